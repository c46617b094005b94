import type { SearchReads } from '../../src/fhir/search/search-query.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import { compileSearchPredicate } from '../../src/search/match.js';
import type { FilterTest, ResourceIndexer } from '../../src/storage/search-index.js';
import { filterSearch, typeSearch } from '../../src/storage/search-request.js';
import type { ResourceQuery, Storage } from '../../src/storage/types.js';
import { r4SearchIndexer } from '../../src/stores.js';

/**
 * What a store-level test or benchmark searches with: every type allowed (the store's own caller,
 * no principal). The store answers chains and `_has` itself.
 */
export function allReads(): SearchReads {
  return { authorize: () => undefined };
}

/**
 * The reference answer of `query`: its search's filters compiled by `src/search/match.ts` (chains
 * and `_has` reading every resource of their types from `storage`) and given as the caller's own
 * `where`, with a search of its compartment only, so that no store index narrows it.
 */
export async function scannedQuery(
  storage: Pick<Storage, 'searchResources'>,
  projectId: string,
  query: ResourceQuery,
): Promise<ResourceQuery> {
  const { search, where: own, ...rest } = query;
  if (!search) return query;
  const test = await compileSearchPredicate(await loadSearchRegistry(), search.filters, {
    async *resources(type, filter) {
      const inner = filter ? { search: filterSearch(type, filter) } : {};
      yield* (await storage.searchResources(projectId, type, inner)).resources;
    },
  });
  return {
    ...rest,
    ...(search.compartment
      ? { search: { ...typeSearch(search.resourceType), compartment: search.compartment } }
      : {}),
    where: own ? (r) => test(r) && own(r) : test,
  };
}

/** What a {@link countingIndexer}'s store tested: candidates its matcher decided, resources its chains read. */
export interface MatcherCalls {
  /** Candidates the compiled tests were run on. */
  tests: number;
  /** `Type/id` of each resource read for a chain or `_has` the postings did not resolve. */
  reads: string[];
}

/**
 * The R4 indexer of the embedded stores, counting what its matcher (`compileFilters`) does in
 * `calls`: how a test sees whether the postings answered a search exactly.
 */
export function countingIndexer(calls: MatcherCalls): () => Promise<ResourceIndexer> {
  return async () => {
    const inner = await r4SearchIndexer();
    return {
      ...inner,
      async compileFilters(filters, resolver): Promise<FilterTest> {
        const test = await inner.compileFilters!(filters, {
          async *resources(type, filter) {
            for await (const resource of resolver.resources(type, filter)) {
              calls.reads.push(`${resource.resourceType}/${String(resource.id)}`);
              yield resource;
            }
          },
        });
        return (resource) => {
          calls.tests += 1;
          return test(resource);
        };
      },
    };
  };
}
