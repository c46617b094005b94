import { FhirError } from '../../http/http-error.js';
import type { FhirResource, StoredResource } from '../../storage/types.js';
import {
  TerminologyError,
  type CodeValidation,
  type ExpandOptions,
  type Terminology,
  type TerminologySource,
  type ValidateCodeRequest,
} from '../../terminology/terminology-types.js';
import type { FhirContext } from '../context.js';
import { authorize, readResource } from '../interactions.js';
import { requireOne, type OperationParams } from './operation-params.js';

/*
 * The terminology operations as framework-free functions: a context, the parameters, and the id
 * of an instance-level call; each answers the resource to send. A type-level call needs the right
 * to search the operation's type, an instance-level one the right to read it (so the resource is
 * read as a read would be: another project's id is a 404).
 */

type TerminologyType = 'ValueSet' | 'CodeSystem';
type Coding = { system?: string; version?: string; code?: string; display?: string };

/** The parameters each operation takes (any other is a 400). */
export const OPERATION_PARAMETERS = {
  expand: [
    'url',
    'valueSetVersion',
    'valueSet',
    'filter',
    'count',
    'offset',
    'activeOnly',
    'includeDesignations',
  ],
  lookup: ['system', 'code', 'version', 'coding', 'property'],
  valueSetValidateCode: [
    'url',
    'valueSetVersion',
    'valueSet',
    'code',
    'system',
    'systemVersion',
    'display',
    'coding',
    'codeableConcept',
  ],
  codeSystemValidateCode: ['url', 'version', 'codeSystem', 'code', 'display', 'coding', 'codeableConcept'],
  subsumes: ['codeA', 'codeB', 'system', 'version', 'codingA', 'codingB'],
} as const;

/** The statuses of the terminology's refusals. */
const TERMINOLOGY_STATUS = {
  'not-found': 404,
  invalid: 400,
  'too-costly': 400,
  'not-supported': 422,
} as const;

/** `error` as the router answers it: a `TerminologyError` as an OperationOutcome with its status. */
export function terminologyErrorAsFhir(error: unknown): unknown {
  if (!(error instanceof TerminologyError)) return error;
  return new FhirError(TERMINOLOGY_STATUS[error.issueCode], error.issueCode, error.message, { cause: error });
}

/** A call after its access check: the service, the project's source, and the instance it names. */
export interface TerminologyCall {
  service: Terminology;
  source: TerminologySource;
  /** The `ValueSet` or `CodeSystem` of an instance-level call, read as a read reads it. */
  instance?: StoredResource;
}

/**
 * The access check of a call, before its parameters are read: the right to search `type` at the
 * type level; at the instance level the right to read it, and the instance (404 for an unknown id,
 * another project's included).
 */
export async function prepareCall(
  ctx: FhirContext,
  type: TerminologyType,
  id: string | undefined,
): Promise<TerminologyCall> {
  if (id === undefined) authorize(ctx, type, 'search');
  const instance = id === undefined ? undefined : await readResource(ctx, type, id);
  if (!ctx.terminology) throw new FhirError(422, 'not-supported', 'No terminology service is configured');
  const { service, source } = ctx.terminology;
  return { service, source, ...(instance ? { instance } : {}) };
}

/** A Coding parameter, its fields checked to be strings. */
function codingOf(params: OperationParams, name: string): Coding | undefined {
  const value = params.complex(name);
  if (value === undefined) return undefined;
  for (const key of ['system', 'version', 'code', 'display']) {
    if (value[key] !== undefined && typeof value[key] !== 'string')
      throw new FhirError(400, 'invalid', `${name}.${key} must be a string`, { expression: [name] });
  }
  return value;
}

function codeableConceptOf(params: OperationParams): { coding?: Coding[] } | undefined {
  const value = params.complex('codeableConcept');
  if (value === undefined) return undefined;
  if (value.coding !== undefined && !Array.isArray(value.coding))
    throw new FhirError(400, 'invalid', 'codeableConcept.coding must be an array', {
      expression: ['codeableConcept'],
    });
  return value;
}

/** `url` with `version` (`url|version`); 400 when the url names a version already. */
function canonical(url: string, version: string | undefined, versionName: string): string {
  if (version === undefined) return url;
  if (url.includes('|'))
    throw new FhirError(400, 'invalid', `url names a version: ${versionName} may not be given too`, {
      expression: [versionName],
    });
  return `${url}|${version}`;
}

/** Refuses `names` on an instance-level call, where the instance is what they would name. */
function refuseOnInstance(params: OperationParams, names: readonly string[], operation: string): void {
  for (const name of names) {
    if (params.text(name) !== undefined)
      throw new FhirError(400, 'invalid', `${operation} on an instance takes no ${name}`, {
        expression: [name],
      });
  }
}

/**
 * `ValueSet/$expand` and `ValueSet/{id}/$expand`: the value set (by `url` and `valueSetVersion`,
 * given whole as `valueSet`, or the instance) with its `expansion`, paged by `offset` and `count`.
 * @see https://hl7.org/fhir/R4/valueset-operation-expand.html
 */
export async function expandOperation(call: TerminologyCall, params: OperationParams): Promise<FhirResource> {
  const { service, source, instance } = call;
  const options: ExpandOptions = {};
  const filter = params.text('filter');
  if (filter !== undefined) options.filter = filter;
  const count = params.count('count');
  if (count !== undefined) options.count = count;
  const offset = params.count('offset');
  if (offset !== undefined) options.offset = offset;
  const activeOnly = params.flag('activeOnly');
  if (activeOnly !== undefined) options.activeOnly = activeOnly;
  const designations = params.flag('includeDesignations');
  if (designations !== undefined) options.includeDesignations = designations;
  let valueSet: string | FhirResource;
  if (instance) {
    refuseOnInstance(params, ['url', 'valueSetVersion'], '$expand');
    if (params.resource('valueSet', 'ValueSet'))
      throw new FhirError(400, 'invalid', '$expand on an instance takes no valueSet', {
        expression: ['valueSet'],
      });
    valueSet = instance;
  } else {
    const url = params.text('url');
    const version = params.text('valueSetVersion');
    const given = params.resource('valueSet', 'ValueSet');
    if (url !== undefined && given)
      throw new FhirError(400, 'invalid', 'Give url or valueSet, not both', { expression: ['valueSet'] });
    valueSet = given ?? canonical(requireOne('url or valueSet', url), version, 'valueSetVersion');
  }
  return (await service.expand(valueSet, options, source)).resource;
}

/**
 * `CodeSystem/$lookup`: the code (`system` and `code`, or `coding`) with its display,
 * designations and properties (`property` names some), parents and children.
 * @see https://hl7.org/fhir/R4/codesystem-operation-lookup.html
 */
export async function lookupOperation(call: TerminologyCall, params: OperationParams): Promise<FhirResource> {
  const { service, source } = call;
  const coding = codingOf(params, 'coding');
  const system = requireOne('system (or coding.system)', params.text('system') ?? coding?.system);
  const code = requireOne('code (or coding.code)', params.text('code') ?? coding?.code);
  const version = params.text('version') ?? coding?.version;
  const properties = params.texts('property');
  return service.lookup(
    {
      system,
      code,
      ...(version === undefined ? {} : { version }),
      ...(properties.length > 0 ? { properties } : {}),
    },
    source,
  );
}

/** The codes a `$validate-code` call asks about (400 without any). */
function codesAsked(params: OperationParams, withSystem: boolean): ValidateCodeRequest {
  const request: ValidateCodeRequest = {};
  const code = params.text('code');
  const coding = codingOf(params, 'coding');
  const codeableConcept = codeableConceptOf(params);
  if (code !== undefined) request.code = code;
  if (coding) request.coding = coding;
  if (codeableConcept) request.codeableConcept = codeableConcept;
  if (!code && !coding && !codeableConcept)
    throw new FhirError(400, 'required', 'code, coding or codeableConcept is required', {
      expression: ['code'],
    });
  const named: ('display' | 'system' | 'systemVersion')[] = withSystem
    ? ['display', 'system', 'systemVersion']
    : ['display'];
  for (const name of named) {
    const value = params.text(name);
    if (value !== undefined) request[name] = value;
  }
  if (withSystem && code !== undefined && request.system === undefined)
    throw new FhirError(400, 'required', 'system is required with code', { expression: ['system'] });
  return request;
}

/** The `Parameters` answer of `$validate-code` (R4: `result`, `message`, `display`). */
function validationParameters(outcome: CodeValidation): FhirResource {
  const parameter: Record<string, unknown>[] = [{ name: 'result', valueBoolean: outcome.result }];
  if (outcome.message !== undefined) parameter.push({ name: 'message', valueString: outcome.message });
  if (outcome.display !== undefined) parameter.push({ name: 'display', valueString: outcome.display });
  return { resourceType: 'Parameters', parameter };
}

/**
 * `ValueSet/$validate-code` and `ValueSet/{id}/$validate-code`: whether the code (`code` and
 * `system`, `coding` or `codeableConcept`) is in the value set (`url`, `valueSet` or the instance).
 * @see https://hl7.org/fhir/R4/valueset-operation-validate-code.html
 */
export async function valueSetValidateCode(
  call: TerminologyCall,
  params: OperationParams,
): Promise<FhirResource> {
  const { service, source, instance } = call;
  const request: ValidateCodeRequest = codesAsked(params, true);
  if (instance) {
    refuseOnInstance(params, ['url', 'valueSetVersion'], '$validate-code');
    request.resource = instance;
  } else {
    const url = params.text('url');
    const given = params.resource('valueSet', 'ValueSet');
    if (given) request.resource = given;
    else
      request.url = canonical(
        requireOne('url or valueSet', url),
        params.text('valueSetVersion'),
        'valueSetVersion',
      );
  }
  return validationParameters(await service.validateCode('ValueSet', request, source));
}

/**
 * `CodeSystem/$validate-code` and `CodeSystem/{id}/$validate-code`: whether the code is in the
 * code system (`url` and `version`, `codeSystem`, or the instance).
 * @see https://hl7.org/fhir/R4/codesystem-operation-validate-code.html
 */
export async function codeSystemValidateCode(
  call: TerminologyCall,
  params: OperationParams,
): Promise<FhirResource> {
  const { service, source, instance } = call;
  const request: ValidateCodeRequest = codesAsked(params, false);
  if (instance) {
    refuseOnInstance(params, ['url', 'version'], '$validate-code');
    request.resource = instance;
  } else {
    const given = params.resource('codeSystem', 'CodeSystem');
    if (given) request.resource = given;
    else {
      request.url = requireOne('url or codeSystem', params.text('url') ?? request.coding?.system);
      const version = params.text('version');
      if (version !== undefined) request.version = version;
    }
  }
  return validationParameters(await service.validateCode('CodeSystem', request, source));
}

/**
 * `CodeSystem/$subsumes` (and `CodeSystem/{id}/$subsumes`): how `codeA` and `codeB` (or `codingA`
 * and `codingB`) of the system relate.
 * @see https://hl7.org/fhir/R4/codesystem-operation-subsumes.html
 */
export async function subsumesOperation(
  call: TerminologyCall,
  params: OperationParams,
): Promise<FhirResource> {
  const { service, source, instance } = call;
  const codingA = codingOf(params, 'codingA');
  const codingB = codingOf(params, 'codingB');
  const codeA = requireOne('codeA (or codingA)', params.text('codeA') ?? codingA?.code);
  const codeB = requireOne('codeB (or codingB)', params.text('codeB') ?? codingB?.code);
  if (instance) refuseOnInstance(params, ['system', 'version'], '$subsumes');
  const named = [
    instance ? (instance.url as string | undefined) : params.text('system'),
    codingA?.system,
    codingB?.system,
  ].filter((s): s is string => s !== undefined);
  if (new Set(named).size > 1)
    throw new FhirError(400, 'invalid', 'codeA and codeB must be of one code system', {
      expression: ['system'],
    });
  const system = requireOne('system (or codingA.system)', named[0]);
  const version = instance
    ? (instance.version as string | undefined)
    : (params.text('version') ?? codingA?.version ?? codingB?.version);
  const outcome = await service.subsumes(
    { system, codeA, codeB, ...(version === undefined ? {} : { version }) },
    source,
  );
  return { resourceType: 'Parameters', parameter: [{ name: 'outcome', valueCode: outcome }] };
}
