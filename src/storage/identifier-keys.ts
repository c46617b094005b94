import type { IdentifierToken } from './types.js';

/**
 * Index keys for `identifier` token search. Each identifier element gets one
 * key per kind of token that can match it, so a token is answered by one exact key lookup:
 *
 * - `value` (that value, any system): `v:<value>`;
 * - `system|value`: `t<system length>:<system>|<value>`;
 * - `system|` (that system, any value): `s:<system>`;
 * - `|value` (that value, no system): `n:<value>`;
 * - `|` (no system, any value): `n`.
 *
 * The system's length makes `t` keys unambiguous whatever characters the parts hold. Only string
 * parts are keyed: a number where a string belongs matches no token, as in {@link matchesIdentifier}.
 * Bump `IDENTIFIER_KEYS_VERSION` when the keys change: the file store's index files hold them.
 * @see https://hl7.org/fhir/R4/search.html#token
 */
export const IDENTIFIER_KEYS_VERSION = 1;

const NONE: readonly string[] = Object.freeze([]);

/** The identifier elements of a resource as FHIR JSON: one object or an array of them. */
function elements(resource: Readonly<Record<string, unknown>>): unknown[] {
  const raw = resource.identifier;
  return Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
}

/** The index keys of a resource (JSON as stored), without duplicates; empty when it has none. */
export function identifierKeys(resource: Readonly<Record<string, unknown>>): readonly string[] {
  const list = elements(resource);
  if (list.length === 0) return NONE;
  const keys = new Set<string>();
  for (const item of list) {
    if (item === null || typeof item !== 'object') continue;
    const { system, value } = item as { system?: unknown; value?: unknown };
    if (typeof value === 'string') keys.add(`v:${value}`);
    if (typeof system === 'string') {
      keys.add(`s:${system}`);
      if (typeof value === 'string') keys.add(`t${system.length}:${system}|${value}`);
    } else if (system === undefined) {
      keys.add('n');
      if (typeof value === 'string') keys.add(`n:${value}`);
    }
  }
  return keys.size === 0 ? NONE : [...keys];
}

/** The key a token is looked up by; undefined for a token with neither system nor value. */
export function identifierTokenKey(token: IdentifierToken): string | undefined {
  const { system, value } = token;
  if (typeof system === 'string') {
    return value === undefined ? `s:${system}` : `t${system.length}:${system}|${value}`;
  }
  if (system === null) return value === undefined ? 'n' : `n:${value}`;
  return value === undefined ? undefined : `v:${value}`;
}

/** The distinct keys of `tokens` (tokens that match nothing left out). */
export function identifierTokenKeys(tokens: readonly IdentifierToken[]): string[] {
  const keys = new Set<string>();
  for (const token of tokens) {
    const key = identifierTokenKey(token);
    if (key !== undefined) keys.add(key);
  }
  return [...keys];
}

/**
 * True when an identifier element of `resource` matches one of `tokens`: the same answer as the
 * index (for filters that test resources one by one, such as `_typeFilter`).
 */
export function matchesIdentifier(
  resource: Readonly<Record<string, unknown>>,
  tokens: readonly IdentifierToken[],
): boolean {
  for (const item of elements(resource)) {
    if (item === null || typeof item !== 'object') continue;
    const { system, value } = item as { system?: unknown; value?: unknown };
    for (const t of tokens) {
      if (t.value === undefined && t.system === undefined) continue;
      if (t.value !== undefined && value !== t.value) continue;
      if (t.system === null && system !== undefined) continue;
      if (typeof t.system === 'string' && system !== t.system) continue;
      return true;
    }
  }
  return false;
}
