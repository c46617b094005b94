import { SORT_HIGHEST, SORT_LOWEST } from '../result-page.js';
import type { SortKey } from '../search-request.js';
import type { SortValue } from '../types.js';
import type { ResourceEntry } from './mutation.js';
import { KEY_SEPARATOR, UNPOSTED } from './posting-keys.js';

/*
 * `_sort` values read from a version's posting keys instead of its body: what
 * src/search/sort-values.ts computes from the body, for the parameter types whose keys hold the
 * value it compares. A string key holds the normalized string; a date key the `[start, end]` its
 * value covers (an open end infinite, `SORT_LOWEST` / `SORT_HIGHEST` as a sort value). Not numbers
 * and quantities (a quantity without any value has no key but a sort value), nor tokens and
 * references (their sort values are other strings than their keys).
 */

/** The parameter types whose sort values the keys hold. */
const SORTED_TYPES: ReadonlySet<string> = new Set(['string', 'date']);

/**
 * The function giving a current entry's `_sort` values (one per key, as `sortValuesOf`) from its
 * posting keys, when every key is of a parameter of `SORTED_TYPES` in `built` (its type's built
 * parameters); undefined otherwise.
 */
export function postedSortValues(
  built: ReadonlySet<string> | undefined,
  keys: readonly SortKey[] | undefined,
): ((entry: ResourceEntry) => SortValue[]) | undefined {
  if (!built || !keys || keys.length === 0) return undefined;
  const answered = (k: SortKey): boolean =>
    SORTED_TYPES.has(k.type) && !UNPOSTED.has(k.code) && built.has(k.code);
  if (!keys.every(answered)) return undefined;
  const prefixes = keys.map((k) => `${k.code}${KEY_SEPARATOR}`);
  return (entry) =>
    keys.map(({ descending }, i) => {
      const prefix = prefixes[i]!;
      let best: SortValue = null;
      for (const key of entry.postings ?? []) {
        if (!key.startsWith(prefix)) continue;
        const value = key.slice(prefix.length + 1);
        let v: string | number;
        if (key[prefix.length] === 's') v = value;
        else if (key[prefix.length] === 'o') {
          const colon = value.indexOf(':');
          const n = Number(descending ? value.slice(colon + 1) : value.slice(0, colon));
          v = n === -Infinity ? SORT_LOWEST : n === Infinity ? SORT_HIGHEST : n;
        } else continue;
        if (best === null || (descending ? v > best : v < best)) best = v;
      }
      return best;
    });
}

/** The parameters of `keys` whose postings a sort can use (see `SORTED_TYPES`). */
export function sortedCodes(keys: readonly SortKey[] | undefined): string[] {
  return (keys ?? []).filter((k) => SORTED_TYPES.has(k.type) && !UNPOSTED.has(k.code)).map((k) => k.code);
}
