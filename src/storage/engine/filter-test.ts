import { PlatformError } from '../../errors.js';
import type { FilterTest } from '../search-index.js';
import { reachedSearch, type SearchFilter, type SearchRequest } from '../search-request.js';
import type { ResourceQuery, StoredResource } from '../types.js';
import type { Indexing } from './indexing.js';
import type { SearchPace } from './search-pace.js';

/*
 * What the memory and file stores test on each candidate of a search when their postings do not
 * answer it exactly: the search's filters compiled by the store's matcher (src/storage knows
 * nothing of FHIR search: the matcher is injected, see `ResourceIndexer.compileFilters`), chains
 * and `_has` reading the other types through the store itself, within the search's `reach`.
 */

/** Reads the current resources a search of another type finds (the store's own `searchResources`). */
export type ReachedReader = (resourceType: string, search: SearchRequest) => Promise<StoredResource[]>;

/** A search's filter test, or why there is none. */
export type SearchFilterTest =
  /** The search has no filters left for a test (or none of the searched type). */
  | { kind: 'none' }
  | { kind: 'test'; test: FilterTest }
  /** The store has no matcher: it can answer the search only if its postings do so exactly. */
  | { kind: 'unmatched' };

/**
 * The test of `search`'s filters (those `resolveQuery` and `narrowQuery` left) with the store's
 * matcher: compiled before the candidates are read, since a chain or `_has` the postings could not
 * resolve reads other types (through `read`), and only used when the postings are not exact.
 * The matcher tests each resource read so (a `_has` over every Observation) between turns of
 * `pace`: it shares the event loop and keeps to the search's deadline, as the store's reads do.
 */
export async function searchFilterTest(
  indexing: Indexing,
  resourceType: string,
  search: SearchRequest | undefined,
  read: ReachedReader,
  pace: SearchPace,
): Promise<SearchFilterTest> {
  if (search?.resourceType !== resourceType || search.filters.length === 0) return { kind: 'none' };
  const matcher = await indexing.matcher();
  if (!matcher) return { kind: 'unmatched' };
  const test = await matcher.compileFilters(search.filters, {
    async *resources(type: string, filter?: SearchFilter) {
      for (const resource of await read(type, reachedSearch(search, type, filter))) {
        if (pace.due) await pace.breathe();
        yield resource;
      }
    },
  });
  return { kind: 'test', test };
}

/**
 * What decides each candidate: nothing more when the postings answered the search exactly (`exact`),
 * else the filter test, ANDed with the caller's own `where`. Throws `ERR_INTERNAL` when the test is
 * needed and the store has no matcher.
 */
export function candidateTest(
  filters: SearchFilterTest,
  exact: boolean,
  where: ResourceQuery['where'],
): ResourceQuery['where'] {
  if (exact || filters.kind === 'none') return where;
  if (filters.kind === 'unmatched') {
    throw new PlatformError(
      'ERR_INTERNAL',
      'This store has no search matcher (its indexer has no compileFilters and it was given none): it cannot answer these search filters',
    );
  }
  const { test } = filters;
  return where ? (resource) => test(resource) && where(resource) : test;
}
