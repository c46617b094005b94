import { FhirError } from '../../http/http-error.js';
import type { SearchRequest } from '../../storage/search-request.js';
import type { ResourceQuery } from '../../storage/types.js';

/*
 * The `total` of a searchset: what `_total` asks of the store, and the bound on an exact count.
 */

/** The default of `fhirRouter`'s `searchLimits.maxAccurateTotal`. */
export const DEFAULT_MAX_ACCURATE_TOTAL = 100_000;

/**
 * The total a searchset gives: `_total` as asked; without `_total`, none (a page does not count
 * its matches, as HAPI and Medplum answer), except for a count request (`_summary=count`,
 * `_count=0`), which is exact unless `_total=estimate` asks for less.
 * @see https://hl7.org/fhir/R4/search.html#total
 */
export function searchTotal(request: SearchRequest): NonNullable<ResourceQuery['total']> {
  if (request.summary === 'count') return request.total === 'estimate' ? 'estimate' : 'accurate';
  return request.total ?? (request.count === 0 ? 'accurate' : 'none');
}

/**
 * 400 `too-costly` when an exact total passed `maxAccurateTotal` (the store counted past it), naming
 * `_total` and the bound, and pointing at `_total=estimate`.
 */
export function checkAccurateTotal(
  total: number | undefined,
  mode: ResourceQuery['total'],
  maxAccurateTotal: number,
): void {
  if (mode !== 'accurate' || total === undefined || total <= maxAccurateTotal) return;
  throw new FhirError(
    400,
    'too-costly',
    `More than ${maxAccurateTotal} resources match: an exact total is not counted past that; ask _total=estimate, or narrow the search`,
    { expression: ['_total'] },
  );
}
