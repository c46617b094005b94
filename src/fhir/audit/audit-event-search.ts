import { parseDateRange } from '../../common/date-range.js';
import { FhirError } from '../../http/http-error.js';
import type { StoredResource } from '../../storage/types.js';

/** A test on one stored AuditEvent. */
export type AuditPredicate = (resource: StoredResource) => boolean;

/**
 * The R4 search parameters of `AuditEvent` this server answers (besides `patient`, answered through
 * the patient compartment like every compartment parameter):
 * `date` (`recorded`), `agent` (`agent.who`), `entity` (`entity.what`), `action`, `type`,
 * `subtype`, `outcome`.
 * @see https://hl7.org/fhir/R4/auditevent.html#search
 */
export const AUDIT_EVENT_SEARCH_PARAMS: readonly string[] = [
  'date',
  'agent',
  'entity',
  'action',
  'type',
  'subtype',
  'outcome',
];

const DATE_PREFIXES = new Set(['eq', 'gt', 'ge', 'lt', 'le']);

function invalid(param: string, message: string): FhirError {
  return new FhirError(400, 'invalid', message, { expression: [param] });
}

/** Splits a search value on unescaped commas (OR). */
function orValues(value: string): string[] {
  return value.split(/(?<!\\),/).map((v) => v.replace(/\\([|,$\\])/g, '$1'));
}

interface Coded {
  system?: unknown;
  code?: unknown;
}

/** A token (`system|code`, `|code`, `system|`, `code`) as a test on one coding. */
function tokenTest(raw: string): (coding: Coded) => boolean {
  const bar = raw.search(/(?<!\\)\|/);
  if (bar === -1) return (c) => c.code === raw;
  const system = raw.slice(0, bar);
  const code = raw.slice(bar + 1);
  return (c) =>
    (system === '' ? c.system === undefined : c.system === system) && (code === '' || c.code === code);
}

function codings(value: unknown): Coded[] {
  if (Array.isArray(value)) return value.filter((v): v is Coded => typeof v === 'object' && v !== null);
  return typeof value === 'object' && value !== null ? [value] : [];
}

interface ReferenceLike {
  reference?: unknown;
  identifier?: { system?: unknown; value?: unknown };
}

/** The `who` of every agent, or the `what` of every entity. */
function references(resource: StoredResource, param: 'agent' | 'entity'): ReferenceLike[] {
  const list = resource[param];
  if (!Array.isArray(list)) return [];
  const key = param === 'agent' ? 'who' : 'what';
  const out: ReferenceLike[] = [];
  for (const item of list) {
    const ref = (item as Record<string, unknown> | null)?.[key];
    if (typeof ref === 'object' && ref !== null) out.push(ref);
  }
  return out;
}

/**
 * One value of `agent` / `entity`: `Type/id` (or an absolute URL ending so) matches that reference;
 * a bare id matches a reference with that id or an identifier with that value (clients and users
 * have no FHIR resource: they are named by identifier); `:identifier` takes a token
 * `system|value` on the identifier.
 */
function referenceTest(param: string, raw: string, byIdentifier: boolean): (ref: ReferenceLike) => boolean {
  if (byIdentifier) {
    const test = tokenTest(raw);
    return (ref) =>
      ref.identifier !== undefined && test({ system: ref.identifier.system, code: ref.identifier.value });
  }
  const typed = /(?:^|\/)([A-Z][A-Za-z]{1,63}\/[A-Za-z0-9\-.]{1,64})$/.exec(raw);
  if (typed) {
    const target = typed[1]!;
    return (ref) =>
      typeof ref.reference === 'string' && (ref.reference === target || ref.reference.endsWith(`/${target}`));
  }
  if (!/^[^/\s]{1,256}$/.test(raw)) throw invalid(param, `${param} must be a reference (Type/id) or an id`);
  return (ref) =>
    (typeof ref.reference === 'string' && ref.reference.endsWith(`/${raw}`)) || ref.identifier?.value === raw;
}

/** One `date` value (with its prefix) as a test on an instant in epoch ms. */
function dateTest(raw: string): (ms: number) => boolean {
  const hasPrefix = /^[a-z]{2}/.test(raw);
  const prefix = hasPrefix ? raw.slice(0, 2) : 'eq';
  if (!DATE_PREFIXES.has(prefix)) throw invalid('date', `Unsupported date prefix ${prefix}`);
  const interval = parseDateRange(hasPrefix ? raw.slice(2) : raw);
  if (!interval) throw invalid('date', 'date must be a FHIR date, dateTime or instant');
  const { start, end } = interval;
  switch (prefix) {
    case 'gt':
      return (t) => t >= end;
    case 'ge':
      return (t) => t >= start;
    case 'lt':
      return (t) => t < start;
    case 'le':
      return (t) => t < end;
    default:
      return (t) => t >= start && t < end;
  }
}

/**
 * The test of one AuditEvent search parameter (values ORed by commas; the router ANDs repeats), or
 * `undefined` when the modifier is not supported (the caller ignores it, or answers 400 under
 * strict handling). A malformed value is a 400 `FhirError`.
 */
export function auditSearchPredicate(
  name: string,
  modifier: string | undefined,
  value: string,
): AuditPredicate | undefined {
  const values = orValues(value);
  switch (name) {
    case 'date': {
      if (modifier !== undefined) return undefined;
      const tests = values.map(dateTest);
      return (r) => {
        const t = typeof r.recorded === 'string' ? Date.parse(r.recorded) : NaN;
        return !Number.isNaN(t) && tests.some((test) => test(t));
      };
    }
    case 'agent':
    case 'entity': {
      if (modifier !== undefined && modifier !== 'identifier') return undefined;
      const tests = values.map((v) => referenceTest(name, v, modifier === 'identifier'));
      return (r) => references(r, name).some((ref) => tests.some((test) => test(ref)));
    }
    case 'action':
    case 'outcome': {
      if (modifier !== undefined) return undefined;
      const system =
        name === 'action'
          ? 'http://hl7.org/fhir/audit-event-action'
          : 'http://hl7.org/fhir/audit-event-outcome';
      const tests = values.map(tokenTest);
      return (r) => tests.some((test) => test({ system, code: r[name] }));
    }
    case 'type':
    case 'subtype': {
      if (modifier !== undefined) return undefined;
      const tests = values.map(tokenTest);
      return (r) => codings(r[name]).some((c) => tests.some((test) => test(c)));
    }
    default:
      return undefined;
  }
}
