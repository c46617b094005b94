import { SearchParameterError } from './search-error.js';
import { assertNever } from '../storage/assert-never.js';
import type { SearchFilter, SearchRequest } from '../storage/search-request.js';

/**
 * Bounds on what a search may ask, checked before it runs: each refuses a request whose cost can be
 * known from its text (400 `too-costly`, naming the bound), whatever the store.
 */
export interface SearchCostLimits {
  /** Most `_sort` keys. @default 5 */
  maxSortKeys?: number;
  /**
   * Most filters in one search: each search parameter given, a repeated one counting each time
   * (`code=a&code=b` is two), a chain or `_has` counting as one. @default 30
   */
  maxFilters?: number;
  /** Most `_has` nested in one another (`_has:A:x:_has:B:y:z=` is two). @default 2 */
  maxHasDepth?: number;
  /**
   * Largest `_offset`: deeper pages are reached by following the `next` links (keyset paging from
   * the last match, as cheap as the first page), not by skipping matches. @default 10000
   */
  maxOffset?: number;
}

/** {@link SearchCostLimits} with every default. */
export const SEARCH_COST_DEFAULTS: Required<SearchCostLimits> = Object.freeze({
  maxSortKeys: 5,
  maxFilters: 30,
  maxHasDepth: 2,
  maxOffset: 10_000,
});

/** How many `_has` are nested at the deepest point of `filter`. */
function hasDepth(filter: SearchFilter): number {
  switch (filter.kind) {
    case 'parameter':
      return 0;
    case 'chain':
      return hasDepth(filter.filter);
    case 'has':
      return 1 + hasDepth(filter.filter);
    default:
      return assertNever(filter);
  }
}

const tooCostly = (parameter: string, message: string): SearchParameterError =>
  new SearchParameterError('too-costly', message, parameter);

/** Throws the 400 `too-costly` of the first bound of `limits` that `request` passes. */
export function checkSearchCost(request: SearchRequest, limits: SearchCostLimits = {}): void {
  const bounds = { ...SEARCH_COST_DEFAULTS, ...limits };
  if (request.sort.length > bounds.maxSortKeys) {
    throw tooCostly('_sort', `_sort takes at most ${bounds.maxSortKeys} keys`);
  }
  if (request.filters.length > bounds.maxFilters) {
    throw tooCostly(
      request.resourceType,
      `A search takes at most ${bounds.maxFilters} parameters (a repeated one counting each time)`,
    );
  }
  if (request.filters.some((f) => hasDepth(f) > bounds.maxHasDepth)) {
    throw tooCostly('_has', `_has may be nested at most ${bounds.maxHasDepth} deep`);
  }
  if (request.offset > bounds.maxOffset) {
    throw tooCostly(
      '_offset',
      `_offset may be at most ${bounds.maxOffset}: follow the Bundle's next links to page further`,
    );
  }
}
