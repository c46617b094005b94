/**
 * Brings client-supplied SCIM values to the canonical form the schemas describe: canonical
 * attribute-name case, booleans from `"True"`/`"False"` strings (Entra), a primitive given for a
 * complex attribute with a `value` sub-attribute wrapped as `{ value }` (Entra's `manager`), a single
 * value given for a multi-valued attribute wrapped in an array. Unknown sub-attributes are dropped;
 * a value of the wrong type is a 400 `invalidValue`.
 */
import { ScimError } from '../http/http-error.js';
import { FORBIDDEN_KEYS, findKey, isPlainObject, setOwn } from './json-access.js';
import {
  findSchema,
  findSubAttribute,
  type ScimAttributeDefinition,
  type ScimResourceSchemas,
} from './schema.js';

function invalidValue(message: string): ScimError {
  return new ScimError(400, 'invalidValue', message);
}

function normalizeSimple(definition: ScimAttributeDefinition, value: unknown, where: string): unknown {
  switch (definition.type) {
    case 'boolean':
      if (typeof value === 'boolean') return value;
      if (typeof value === 'string' && /^(true|false)$/i.test(value.trim()))
        return value.trim().toLowerCase() === 'true';
      throw invalidValue(`${where} must be a boolean`);
    case 'integer':
      if (typeof value === 'number' && Number.isInteger(value)) return value;
      throw invalidValue(`${where} must be an integer`);
    case 'decimal':
      if (typeof value === 'number' && Number.isFinite(value)) return value;
      throw invalidValue(`${where} must be a number`);
    case 'dateTime':
      if (typeof value === 'string' && !Number.isNaN(Date.parse(value))) return value;
      throw invalidValue(`${where} must be a dateTime`);
    default:
      if (typeof value === 'string') return value;
      if (typeof value === 'number' && Number.isFinite(value)) return String(value);
      throw invalidValue(`${where} must be a string`);
  }
}

function normalizeComplex(
  definition: ScimAttributeDefinition,
  value: unknown,
  where: string,
): Record<string, unknown> | undefined {
  if (!isPlainObject(value)) {
    const valueSub = findSubAttribute(definition, 'value');
    if (valueSub && value !== null && typeof value !== 'object') {
      return { [valueSub.name]: normalizeSimple(valueSub, value, `${where}.value`) };
    }
    throw invalidValue(`${where} must be an object`);
  }
  const out: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries(value)) {
    if (FORBIDDEN_KEYS.has(key)) throw invalidValue(`${where} holds a forbidden key`);
    const sub = findSubAttribute(definition, key);
    if (!sub || raw === null || raw === undefined) continue;
    setOwn(out, sub.name, normalizeSimple(sub, raw, `${where}.${sub.name}`));
  }
  return Object.keys(out).length ? out : undefined;
}

/** One value (not an array) of an attribute, or undefined when it amounts to nothing. */
export function normalizeElement(
  definition: ScimAttributeDefinition,
  value: unknown,
  where = definition.name,
): unknown {
  if (value === null || value === undefined) return undefined;
  return definition.type === 'complex'
    ? normalizeComplex(definition, value, where)
    : normalizeSimple(definition, value, where);
}

/**
 * The canonical value of an attribute: an array for a multi-valued one (a single value is
 * wrapped), undefined for null, `[]` or an empty object (unassigned, RFC 7644 §3.5.2).
 */
export function normalizeAttributeValue(
  definition: ScimAttributeDefinition,
  value: unknown,
  where = definition.name,
): unknown {
  if (value === null || value === undefined) return undefined;
  if (definition.multiValued) {
    const items = Array.isArray(value) ? value : [value];
    const out = items
      .map((item, i) => normalizeElement(definition, item, `${where}[${i}]`))
      .filter((v) => v !== undefined);
    return out.length ? out : undefined;
  }
  if (Array.isArray(value)) {
    // Some clients send a one-element array for a single-valued attribute.
    if (value.length === 1) return normalizeElement(definition, value[0], where);
    throw invalidValue(`${where} is single-valued`);
  }
  return normalizeElement(definition, value, where);
}

function normalizeAttributes(
  attributes: ScimAttributeDefinition[],
  input: Record<string, unknown>,
  out: Record<string, unknown>,
  prefix: string,
): void {
  for (const definition of attributes) {
    // readOnly values in a request are ignored (RFC 7643 §2.2); password is never stored.
    if (definition.mutability === 'readOnly' || definition.returned === 'never') continue;
    const key = findKey(input, definition.name);
    if (key === undefined) continue;
    const value = normalizeAttributeValue(definition, input[key], `${prefix}${definition.name}`);
    if (value !== undefined) setOwn(out, definition.name, value);
  }
}

/**
 * The writable attributes of a resource body in canonical form: core attributes at the top level,
 * extension attributes under their canonical URN, `externalId`; readOnly attributes (`id`, `meta`,
 * `groups`), `password`, `schemas` and unknown attributes are left out.
 */
export function normalizeResource(input: unknown, schemas: ScimResourceSchemas): Record<string, unknown> {
  if (!isPlainObject(input)) throw new ScimError(400, 'invalidSyntax', 'The body must be a JSON object');
  const out: Record<string, unknown> = {};
  normalizeAttributes([...schemas.common, ...schemas.core.attributes], input, out, '');
  for (const key of Object.keys(input)) {
    if (!key.toLowerCase().startsWith('urn:')) continue;
    const schema = findSchema(schemas, key);
    if (!schema || schema === schemas.core) continue;
    const value = input[key];
    if (value === null || value === undefined) continue;
    if (!isPlainObject(value)) throw invalidValue(`${schema.id} must be an object`);
    const ext: Record<string, unknown> = {};
    normalizeAttributes(schema.attributes, value, ext, `${schema.id}:`);
    if (Object.keys(ext).length) setOwn(out, schema.id, ext);
  }
  return out;
}
