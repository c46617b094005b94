import type { CompositeIndexValue, IndexValue } from '../index-values.js';
import type { ResourceIndexEntries } from '../search-index.js';
import type { ParameterFilter, SearchRequest } from '../search-request.js';

/*
 * The keys under which the memory and file stores post a version in their search indexes
 * (`postings.ts`): one string per distinct (parameter, value), `<code>\0<kind><value>`. The kinds:
 *   t  a token's system and code (`pair`; an absent part as the empty string);
 *   r  a reference's type and id (`pair`; an absent type as the empty string);
 *   u  a uri, or a reference's absolute or canonical url;
 *   s  a string, normalized (lowercased, accents removed);
 *   o  an ordered value (date, number, quantity) as the range it covers, `<low>:<high>` (an open
 *      end as -Infinity / Infinity);
 *   p  that a version has some value of a parameter (`:missing`), under the parameter's presence
 *      code (`presenceCode`): posted only once a `:missing` search built that code.
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
export type PostingKind = 't' | 'r' | 'u' | 's' | 'o' | 'p';

/** The key of one value of parameter `code`. */
export function postingKey(code: string, kind: PostingKind, value: string): string {
  return `${code}${KEY_SEPARATOR}${kind}${value}`;
}

/**
 * The code under which the presence of parameter `code`'s values is built and posted (never a
 * search parameter's code: those hold no control character). Apart from `code` itself, so that
 * the presence of the parameters searched with `:missing` only costs its key per version.
 */
export function presenceCode(code: string): string {
  return `${PRESENCE}${code}`;
}

const PRESENCE = '\u0001';

/** The key of the versions holding some value of parameter `code` (see `presenceCode`). */
export function presenceKey(code: string): string {
  return postingKey(presenceCode(code), 'p', '');
}

/** The parameters an indexer computes to post `codes`: a presence code needs its parameter's values. */
export function indexedCodes(codes: ReadonlySet<string>): ReadonlySet<string> {
  let out: Set<string> | undefined;
  for (const code of codes) if (code.startsWith(PRESENCE)) (out ??= new Set(codes)).add(code.slice(1));
  return out ?? codes;
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
 * The posting keys of a version's index entries, of the parameters and presence codes in `codes`
 * (of every parameter, and no presence, when not given), each once, grouped by parameter (the keys
 * of one parameter are adjacent).
 */
export function postingKeys(entries: ResourceIndexEntries, codes?: ReadonlySet<string>): string[] {
  const out = new Set<string>();
  for (const code in entries) {
    if (UNPOSTED.has(code)) continue;
    const values = entries[code]!;
    if (codes === undefined || codes.has(code)) for (const value of values) keysOf(code, value, out);
    // Composite values are not posted, nor then is their presence (`posted`).
    if (codes?.has(presenceCode(code)) === true && values[0]?.type !== 'composite')
      out.add(presenceKey(code));
  }
  return [...out];
}

/** Whether the postings can answer `filter` at all: a posted parameter, its values or its presence. */
export function posted(filter: ParameterFilter): boolean {
  if (!POSTED_TYPES.has(filter.type) || UNPOSTED.has(filter.code)) return false;
  if (filter.modifier === 'missing') return true;
  return (
    filter.values.length > 0 && (filter.modifier === undefined || !UNANSWERED_MODIFIERS.has(filter.modifier))
  );
}

/** The code a posted filter needs built: its parameter's, or for `:missing`, its presence code. */
export function builtCode(filter: ParameterFilter): string {
  return filter.modifier === 'missing' ? presenceCode(filter.code) : filter.code;
}

/**
 * Modifiers the postings never answer: a filter with one does not build its parameter. The
 * terminology ones (`in`, `not-in`, a token's `below` / `above`) reach no store unresolved
 * (`narrowQuery` refuses them).
 */
const UNANSWERED_MODIFIERS = new Set([
  'not',
  'text',
  'of-type',
  'identifier',
  'below',
  'above',
  'in',
  'not-in',
]);

/** The codes to build for `search`'s own filters the postings could answer (each once, in order). */
export function postableCodes(search: SearchRequest): string[] {
  const codes = new Set<string>();
  for (const f of search.filters) if (f.kind === 'parameter' && posted(f)) codes.add(builtCode(f));
  return [...codes];
}
