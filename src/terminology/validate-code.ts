import type { FhirResource } from '../storage/types.js';
import { findConcept, indexCodeSystem, type CodeSystemIndex, type Concept } from './code-system-index.js';
import type { ComposeResult } from './expansion.js';
import type { TerminologyScope } from './terminology-scope.js';
import {
  TerminologyError,
  type CodeValidation,
  type SystemCode,
  type ValidateCodeRequest,
} from './terminology-types.js';
import { splitCanonical } from './version-order.js';

/*
 * `$validate-code` against a value set or a code system. Decisions, after the HL7 tx test suite
 * (fhir-test-cases `tx/validation`): a wrong display makes the result false, the message naming
 * the right display (returned in `display`); an inactive code stays valid, flagged `inactive` with
 * a message; a code of an unknown system, or of one not held here, is not valid, with a message
 * saying it could not be checked. A CodeableConcept is valid when one of its codings is.
 * @see https://hl7.org/fhir/R4/valueset-operation-validate-code.html
 * @see https://hl7.org/fhir/R4/codesystem-operation-validate-code.html
 */

interface Coding {
  system?: string;
  version?: string;
  code?: string;
  display?: string;
}

/** What validation reads: the scope of the call and the (cached, lenient) codes of a value set. */
export interface ValidateContext {
  scope: TerminologyScope;
  composed(valueSet: string | FhirResource): Promise<ComposeResult>;
}

/** Validates the code, coding or CodeableConcept of `request` against its value set or code system. */
export async function validateCode(
  target: 'ValueSet' | 'CodeSystem',
  request: ValidateCodeRequest,
  context: ValidateContext,
): Promise<CodeValidation> {
  const codings = requestCodings(request);
  if (codings.length === 0)
    throw new TerminologyError('invalid', 'No code, coding or codeableConcept to validate');
  const results =
    target === 'CodeSystem'
      ? await againstCodeSystem(request, codings, context)
      : await againstValueSet(request, codings, context);
  return results.find((r) => r.result) ?? combine(results);
}

function requestCodings(request: ValidateCodeRequest): Coding[] {
  if (request.codeableConcept)
    return (request.codeableConcept.coding ?? []).filter((c) => c.code !== undefined);
  if (request.coding) return request.coding.code === undefined ? [] : [request.coding];
  if (request.code === undefined) return [];
  return [
    {
      code: request.code,
      ...(request.system === undefined ? {} : { system: request.system }),
      ...(request.systemVersion === undefined ? {} : { version: request.systemVersion }),
      ...(request.display === undefined ? {} : { display: request.display }),
    },
  ];
}

function combine(results: CodeValidation[]): CodeValidation {
  if (results.length === 1) return results[0]!;
  const messages = results.map((r) => r.message).filter((m): m is string => m !== undefined);
  return { result: false, message: messages.join('; ') };
}

async function againstCodeSystem(
  request: ValidateCodeRequest,
  codings: Coding[],
  { scope }: ValidateContext,
): Promise<CodeValidation[]> {
  const canonical = splitCanonical(request.url ?? urlOf(request.resource) ?? request.system ?? '');
  const version = request.version ?? canonical.version;
  const index = request.resource
    ? indexCodeSystem(request.resource)
    : await scope.loadCodeSystem(canonical.url, version);
  return codings.map((coding) => {
    if (coding.system !== undefined && coding.system !== canonical.url) {
      return invalid(coding, `The system ${coding.system} is not the code system ${canonical.url}`);
    }
    return inSystem(index, { ...coding, system: canonical.url, ...(version ? { version } : {}) });
  });
}

async function againstValueSet(
  request: ValidateCodeRequest,
  codings: Coding[],
  context: ValidateContext,
): Promise<CodeValidation[]> {
  const reference =
    request.url && request.version && !request.url.includes('|')
      ? `${request.url}|${request.version}`
      : request.url;
  const valueSet = request.resource ?? reference;
  if (valueSet === undefined)
    throw new TerminologyError('invalid', 'No value set to validate against (url or valueSet)');
  const composed = await context.composed(valueSet);
  const results: CodeValidation[] = [];
  for (const asked of codings) {
    const coding = impliedSystem(asked, composed.codes);
    const index =
      coding.system === undefined
        ? undefined
        : await context.scope.loadCodeSystem(coding.system, coding.version);
    results.push(
      inValueSet(composed, index, coding, request.url ?? urlOf(request.resource) ?? 'the value set'),
    );
  }
  return results;
}

/** A code given without a system takes the system of the one value-set code it can be. */
function impliedSystem(coding: Coding, codes: readonly SystemCode[]): Coding {
  if (coding.system !== undefined) return coding;
  const matches = codes.filter((c) => c.code === coding.code);
  return matches.length === 1 ? { ...coding, system: matches[0]!.system } : coding;
}

function inSystem(index: CodeSystemIndex | undefined, coding: Coding): CodeValidation {
  const unchecked = systemProblem(index, coding);
  if (unchecked) return invalid(coding, unchecked);
  const concept = findConcept(index!, coding.code!);
  if (!concept)
    return invalid(coding, `Unknown code '${coding.code}' in the code system ${systemName(coding)}`);
  return valid(coding, index!, concept);
}

/** Why codes of `coding`'s system cannot be checked here, if they cannot. */
function systemProblem(index: CodeSystemIndex | undefined, coding: Coding): string | undefined {
  if (!index)
    return `A definition for the code system ${systemName(coding)} could not be found, so the code cannot be validated`;
  if (!index.held) {
    return `The code system ${systemName(coding)} is not held here (content '${index.content}'), so the code cannot be validated`;
  }
  return undefined;
}

function inValueSet(
  composed: ComposeResult,
  index: CodeSystemIndex | undefined,
  coding: Coding,
  url: string,
): CodeValidation {
  const member = composed.codes.find(
    (c) => c.system === coding.system && sameCode(index, c.code, coding.code!),
  );
  if (member) {
    const concept = index?.held ? findConcept(index, member.code) : undefined;
    return concept ? valid(coding, index!, concept) : validListed(coding, member);
  }
  if (coding.system === undefined)
    return invalid(coding, `The code '${coding.code}' (no system) is not in the value set ${url}`);
  if (composed.openAny || composed.openSystems.has(coding.system) || !index?.held) {
    return invalid(
      coding,
      systemProblem(index, coding) ?? `The value set ${url} cannot be fully expanded here`,
    );
  }
  if (!findConcept(index, coding.code!)) {
    return invalid(coding, `Unknown code '${coding.code}' in the code system ${systemName(coding)}`);
  }
  return invalid(coding, `The code ${systemName(coding)}#${coding.code} is not in the value set ${url}`);
}

function sameCode(index: CodeSystemIndex | undefined, a: string, b: string): boolean {
  return a === b || (index?.caseSensitive === false && a.toLowerCase() === b.toLowerCase());
}

function valid(coding: Coding, index: CodeSystemIndex, concept: Concept): CodeValidation {
  const base: CodeValidation = {
    result: true,
    system: index.url,
    code: concept.code,
    ...(index.version === undefined ? {} : { version: index.version }),
    ...(concept.display === undefined ? {} : { display: concept.display }),
    ...(concept.inactive ? { inactive: true } : {}),
  };
  const names = [concept.display, ...(concept.designations ?? []).map((d) => d.value)];
  return withChecks(base, coding, names);
}

/** A listed code of a system not held: its display as listed is all there is to check. */
function validListed(coding: Coding, member: SystemCode): CodeValidation {
  const base: CodeValidation = { result: true, system: member.system, code: member.code };
  if (member.version !== undefined) base.version = member.version;
  if (member.display !== undefined) base.display = member.display;
  return withChecks(base, coding, [member.display]);
}

/** The display check (a wrong display is an error) and the inactive warning. */
function withChecks(base: CodeValidation, coding: Coding, names: (string | undefined)[]): CodeValidation {
  const known = names.filter((n): n is string => n !== undefined);
  if (
    coding.display !== undefined &&
    known.length > 0 &&
    !known.some((n) => sameDisplay(n, coding.display!))
  ) {
    return {
      ...base,
      result: false,
      message: `Wrong display '${coding.display}' for ${base.system}#${base.code}: the display is '${known[0]}'`,
    };
  }
  if (base.inactive) return { ...base, message: `The code ${base.system}#${base.code} is inactive` };
  return base;
}

function sameDisplay(a: string, b: string): boolean {
  const normal = (s: string): string => s.trim().replace(/\s+/g, ' ').toLowerCase();
  return normal(a) === normal(b);
}

function invalid(coding: Coding, message: string): CodeValidation {
  return {
    result: false,
    message,
    ...(coding.system === undefined ? {} : { system: coding.system }),
    ...(coding.code === undefined ? {} : { code: coding.code }),
    ...(coding.version === undefined ? {} : { version: coding.version }),
  };
}

function systemName(coding: Coding): string {
  return coding.version === undefined ? String(coding.system) : `${coding.system}|${coding.version}`;
}

function urlOf(resource: FhirResource | undefined): string | undefined {
  return typeof resource?.url === 'string' ? resource.url : undefined;
}
