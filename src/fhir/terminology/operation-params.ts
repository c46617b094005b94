import { FhirError } from '../../http/http-error.js';
import type { FhirResource } from '../../storage/types.js';

/*
 * The parameters of an operation, from the query string (GET or POST) and a `Parameters` body
 * (POST): primitives from either, complex values (`Coding`, `CodeableConcept`) and resources from
 * the body only, as R4 allows no other way to send them.
 */

/** One value of a parameter: a primitive (as sent), a complex value, or a resource. */
type ParameterValue =
  | { kind: 'primitive'; value: string }
  | { kind: 'complex'; value: Record<string, unknown> }
  | { kind: 'resource'; value: FhirResource };

/** Query parameters every operation ignores (they concern the answer's format). */
const IGNORED = new Set(['_format', '_pretty']);

function invalid(name: string, message: string, code: 'invalid' | 'required' = 'invalid'): FhirError {
  return new FhirError(400, code, message, { expression: [name] });
}

/** The value of one `Parameters.parameter` entry (400 for one with none, or several). */
function valueOf(entry: Record<string, unknown>, at: number): ParameterValue {
  const where = `Parameters.parameter[${at}]`;
  if (entry.resource !== undefined) {
    const resource = entry.resource as FhirResource | null;
    if (typeof resource !== 'object' || resource === null || typeof resource.resourceType !== 'string')
      throw invalid(where, `${where}.resource must be a resource`);
    return { kind: 'resource', value: resource };
  }
  const keys = Object.keys(entry).filter((key) => key.startsWith('value'));
  if (keys.length !== 1) throw invalid(where, `${where} must have one value[x] or a resource`);
  const value = entry[keys[0]!];
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean')
    return { kind: 'primitive', value: String(value) };
  if (typeof value === 'object' && value !== null && !Array.isArray(value))
    return { kind: 'complex', value: value as Record<string, unknown> };
  throw invalid(where, `${where}.${keys[0]} is not a FHIR value`);
}

/** The parameters of a `Parameters` body, by name. */
function bodyParameters(body: unknown, into: Map<string, ParameterValue[]>): void {
  const resource = body as { resourceType?: unknown; parameter?: unknown } | null;
  if (typeof resource !== 'object' || resource === null || resource.resourceType !== 'Parameters')
    throw invalid('Parameters', 'The body must be a Parameters resource');
  if (resource.parameter === undefined) return;
  if (!Array.isArray(resource.parameter))
    throw invalid('Parameters.parameter', 'Parameters.parameter must be an array');
  resource.parameter.forEach((entry: unknown, at) => {
    const named = entry as { name?: unknown } | null;
    if (typeof named !== 'object' || named === null || typeof named.name !== 'string')
      throw invalid(`Parameters.parameter[${at}]`, `Parameters.parameter[${at}] must have a name`);
    const list = into.get(named.name) ?? [];
    list.push(valueOf(named, at));
    into.set(named.name, list);
  });
}

/** The parameters of an operation request, read and checked by name. */
export interface OperationParams {
  /** The one primitive value of `name` (400 when repeated or not a primitive). */
  text(name: string): string | undefined;
  /** Every primitive value of `name` (a repeated parameter, such as `$lookup`'s `property`). */
  texts(name: string): string[];
  /** A non-negative integer (400 otherwise). */
  count(name: string): number | undefined;
  /** `true` or `false` (400 otherwise). */
  flag(name: string): boolean | undefined;
  /** The one complex value of `name` (a `Coding`, a `CodeableConcept`). */
  complex(name: string): Record<string, unknown> | undefined;
  /** The one resource of `name`, of type `type` (400 otherwise). */
  resource(name: string, type: string): FhirResource | undefined;
}

/**
 * The parameters of an operation request: `query` (the query string's pairs) and, for a POST,
 * `body` (a `Parameters` resource, or undefined). A parameter not in `accepted` is a 400, naming
 * it (`_format` and `_pretty` are ignored).
 * @see https://hl7.org/fhir/R4/operations.html#request
 */
export function operationParams(
  operation: string,
  query: Iterable<[string, string]>,
  body: unknown,
  accepted: readonly string[],
): OperationParams {
  const params = new Map<string, ParameterValue[]>();
  for (const [name, value] of query) {
    if (IGNORED.has(name)) continue;
    const list = params.get(name) ?? [];
    list.push({ kind: 'primitive', value });
    params.set(name, list);
  }
  if (body !== undefined) bodyParameters(body, params);
  for (const name of params.keys()) {
    if (!accepted.includes(name))
      throw new FhirError(400, 'not-supported', `${operation} does not take the parameter ${name}`, {
        expression: [name],
      });
  }
  const one = (name: string): ParameterValue | undefined => {
    const list = params.get(name) ?? [];
    if (list.length > 1) throw invalid(name, `${name} may be given once`);
    return list[0];
  };
  const primitive = (name: string, value: ParameterValue | undefined): string | undefined => {
    if (value === undefined) return undefined;
    if (value.kind !== 'primitive') throw invalid(name, `${name} must be a primitive value`);
    return value.value;
  };
  return {
    text: (name) => primitive(name, one(name)),
    texts: (name) => (params.get(name) ?? []).map((value) => primitive(name, value)!),
    count(name) {
      const text = primitive(name, one(name));
      if (text === undefined) return undefined;
      if (!/^\d{1,9}$/.test(text)) throw invalid(name, `${name} must be a non-negative integer`);
      return Number(text);
    },
    flag(name) {
      const text = primitive(name, one(name));
      if (text === undefined) return undefined;
      if (text !== 'true' && text !== 'false') throw invalid(name, `${name} must be true or false`);
      return text === 'true';
    },
    complex(name) {
      const value = one(name);
      if (value === undefined) return undefined;
      if (value.kind !== 'complex')
        throw invalid(name, `${name} must be a complex value (in a Parameters body, POST)`);
      return value.value;
    },
    resource(name, type) {
      const value = one(name);
      if (value === undefined) return undefined;
      if (value.kind !== 'resource' || value.value.resourceType !== type)
        throw invalid(name, `${name} must be a ${type} resource (in a Parameters body, POST)`);
      return value.value;
    },
  };
}

/** The one parameter of `names` given, or 400 `required` naming them all when none is. */
export function requireOne<T>(names: string, value: T | undefined): T {
  if (value === undefined) throw invalid(names, `${names} is required`, 'required');
  return value;
}
