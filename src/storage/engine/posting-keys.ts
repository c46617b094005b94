import type { CompositeIndexValue, IndexValue } from '../index-values.js';
import type { ResourceIndexEntries } from '../search-index.js';
import type { SearchRequest } from '../search-request.js';

/*
 * The keys under which the memory and file stores post a version in their search indexes
 * (`postings.ts`): one string per distinct (parameter, value), `<code>\0<kind><value>`. The kinds:
 *   t  a token's system and code (`pair`; an absent part as the empty string);
 *   r  a reference's type and id (`pair`; an absent type as the empty string);
 *   u  a uri, or a reference's absolute or canonical url;
 *   s  a string, normalized (lowercased, accents removed);
 *   o  an ordered value (date, number, quantity) as the range it covers, `<low>:<high>` (an open
 *      end as -Infinity / Infinity).
 * Composite values, token texts and reference identifiers are not posted: searches on them scan.
 * Neither are `_id` and `_lastUpdated`, which every store answers from its own index.
 */

/** Parameters not posted (see above). */
export const UNPOSTED = new Set(['_id', '_lastUpdated']);

/** The parameter types whose values are posted (not composite, not special). */
export const POSTED_TYPES: ReadonlySet<string> = new Set([
  'token',
  'reference',
  'uri',
  'string',
  'date',
  'number',
  'quantity',
]);

/** The separator between a key's parameter code and its value (never in a code). */
export const KEY_SEPARATOR = '\u0000';

/** The kinds of posting key. */
export type PostingKind = 't' | 'r' | 'u' | 's' | 'o';

/** The key of one value of parameter `code`. */
export function postingKey(code: string, kind: PostingKind, value: string): string {
  return `${code}${KEY_SEPARATOR}${kind}${value}`;
}

/** Two strings as one, `<length of first>.<first>|<second>`: split back by `unpair`, whatever they hold. */
export function pair(first: string, second: string): string {
  return `${first.length}.${first}|${second}`;
}

/** The two strings of a `pair`. */
export function unpair(value: string): [string, string] {
  const dot = value.indexOf('.');
  const length = Number(value.slice(0, dot));
  return [value.slice(dot + 1, dot + 1 + length), value.slice(dot + 2 + length)];
}

/** The `[low, high]` an ordered index value covers, open ends infinite; undefined when it has none. */
export function orderedRange(value: IndexValue): [number, number] | undefined {
  if (value.type === 'date') return [value.start ?? -Infinity, value.end ?? Infinity];
  if (value.type !== 'number' && value.type !== 'quantity') return undefined;
  if (value.value !== undefined) return [value.value, value.value];
  if (value.low === undefined && value.high === undefined) return undefined;
  return [value.low ?? -Infinity, value.high ?? Infinity];
}

function keysOf(code: string, value: IndexValue | CompositeIndexValue, out: Set<string>): void {
  switch (value.type) {
    case 'token':
      if (value.system !== undefined || value.code !== undefined)
        out.add(postingKey(code, 't', pair(value.system ?? '', value.code ?? '')));
      return;
    case 'reference':
      if (value.id !== undefined) out.add(postingKey(code, 'r', pair(value.resourceType ?? '', value.id)));
      if (value.url !== undefined) out.add(postingKey(code, 'u', value.url));
      return;
    case 'uri':
      out.add(postingKey(code, 'u', value.value));
      return;
    case 'string':
      out.add(postingKey(code, 's', value.normalized));
      return;
    case 'date':
    case 'number':
    case 'quantity': {
      const range = orderedRange(value);
      if (range) out.add(postingKey(code, 'o', `${range[0]}:${range[1]}`));
      return;
    }
    default:
      return;
  }
}

/**
 * The posting keys of a version's index entries (of the parameters in `codes` only, when given),
 * each once, grouped by parameter (the keys of one parameter are adjacent).
 */
export function postingKeys(entries: ResourceIndexEntries, codes?: ReadonlySet<string>): string[] {
  const out = new Set<string>();
  for (const code in entries) {
    if (UNPOSTED.has(code) || (codes !== undefined && !codes.has(code))) continue;
    for (const value of entries[code]!) keysOf(code, value, out);
  }
  return [...out];
}

/** Modifiers the postings never answer: a filter with one does not build its parameter. */
const UNANSWERED_MODIFIERS = new Set(['missing', 'not', 'text', 'of-type', 'identifier', 'below', 'above']);

/** The parameters of `search`'s own filters that postings could answer (each once, in order). */
export function postableCodes(search: SearchRequest): string[] {
  const codes = new Set<string>();
  for (const f of search.filters) {
    if (f.kind !== 'parameter' || !POSTED_TYPES.has(f.type) || UNPOSTED.has(f.code)) continue;
    if (f.values.length === 0 || (f.modifier !== undefined && UNANSWERED_MODIFIERS.has(f.modifier))) continue;
    codes.add(f.code);
  }
  return [...codes];
}
