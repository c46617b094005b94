import type { FhirResource, SortValue } from '../storage/types.js';
import type { SearchRegistry } from './definitions.js';
import { extractValues } from './extract.js';
import type { IndexValue } from '../storage/index-values.js';
import type { SortKey } from '../storage/search-request.js';
import { SORT_HIGHEST, SORT_LOWEST } from '../storage/result-page.js';

/*
 * The values a resource is sorted by for `_sort`: per key, the lowest of the values the parameter
 * sees in it (ascending) or the highest (descending), as R4 asks; `null` when it sees none.
 * @see https://hl7.org/fhir/R4/search.html#_sort
 */

/** Open ends of a date, number or quantity range, as finite numbers (cursors are JSON). */
const LOWEST = SORT_LOWEST;
const HIGHEST = SORT_HIGHEST;

/** `system` and `code` as one string that sorts like the pair (NUL joins them: below any character). */
const pair = (system: string | undefined, code: string): string => `${system ?? ''}\u0000${code}`;

/** The value one element gives a key: a number or a string; undefined when it gives none. */
function valueOf(value: IndexValue, descending: boolean): string | number | undefined {
  switch (value.type) {
    case 'string':
      return value.normalized;
    case 'token':
      // System (none first), then code: identifiers by system, then value. A text is not a code.
      return value.code === undefined ? undefined : pair(value.system, value.code);
    case 'date':
      return descending ? (value.end ?? HIGHEST) : (value.start ?? LOWEST);
    case 'number':
    case 'quantity':
      if (value.value !== undefined) return value.value;
      return descending ? (value.high ?? HIGHEST) : (value.low ?? LOWEST);
    case 'reference':
      if (value.resourceType !== undefined && value.id !== undefined)
        return `${value.resourceType}/${value.id}`;
      if (value.url !== undefined) return value.url;
      if (value.identifier?.value !== undefined) {
        return pair(value.identifier.system, value.identifier.value);
      }
      return undefined;
    case 'uri':
      return value.value;
  }
}

/**
 * Compiles `_sort` keys of `resourceType` (as parsed: composite and special parameters are refused
 * there) into the function giving a resource's sort values, one per key: strings compare
 * case- and accent-insensitively (normalized), tokens by system (none first) then code, references as `Type/id`
 * (else the URL, else `system|value` of the identifier), dates by the start of their range
 * ascending and its end descending (a Period's open end the furthest), numbers and quantities by
 * value (no unit conversion).
 */
export function sortValuesOf(
  registry: SearchRegistry,
  resourceType: string,
  keys: readonly SortKey[],
): (resource: FhirResource) => SortValue[] {
  const definitions = keys.map((key) => {
    const definition = registry.get(resourceType, key.code);
    if (!definition) throw new Error(`${resourceType} has no search parameter ${key.code}`);
    return { definition, descending: key.descending };
  });
  return (resource) =>
    definitions.map(({ definition, descending }) => {
      let best: SortValue = null;
      for (const value of extractValues(registry, definition, resource)) {
        const v = valueOf(value, descending);
        if (v === undefined) continue;
        if (best === null || (descending ? v > best : v < best)) best = v;
      }
      return best;
    });
}
