/**
 * Prototype-safe, case-insensitive access to SCIM resource JSON. Only own properties are ever
 * read or written, so inherited names (`toString`, `__proto__`, `constructor`) never resolve.
 */

/** Keys that must never be used as a path segment or an object key we write. */
export const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The own key of `object` equal to `name` ignoring case, if any. */
export function findKey(object: Record<string, unknown>, name: string): string | undefined {
  if (Object.hasOwn(object, name)) return name;
  const lower = name.toLowerCase();
  for (const key of Object.keys(object)) if (key.toLowerCase() === lower) return key;
  return undefined;
}

/** The own value of `object` under `name` ignoring case. */
export function getOwn(object: unknown, name: string): unknown {
  if (!isPlainObject(object)) return undefined;
  const key = findKey(object, name);
  return key === undefined ? undefined : object[key];
}

/** True when `value` holds a key (at any depth) that could reach a prototype. */
export function hasForbiddenKey(value: unknown, depth = 0): boolean {
  if (depth > 64) return true;
  if (Array.isArray(value)) return value.some((item) => hasForbiddenKey(item, depth + 1));
  if (!isPlainObject(value)) return false;
  for (const key of Object.keys(value)) {
    if (key.split(/[.:]/).some((part) => FORBIDDEN_KEYS.has(part))) return true;
    if (hasForbiddenKey(value[key], depth + 1)) return true;
  }
  return false;
}

/** Sets an own data property (never an accessor, never through a setter such as `__proto__`). */
export function setOwn(object: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
}

/** Whether a SCIM value counts as present (RFC 7644 `pr`): not null, not "", not [] and not {}. */
export function isPresent(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  if (typeof value === 'string') return value !== '';
  if (Array.isArray(value)) return value.some(isPresent);
  if (isPlainObject(value)) return Object.values(value).some(isPresent);
  return true;
}

/** JSON with object keys sorted at every depth: equal for values equal whatever their key order. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}
