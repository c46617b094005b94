import { FhirError } from '../../src/http/http-error.js';
import type { SearchResolver } from '../../src/search/match.js';
import type { SearchReads } from '../../src/fhir/search-query.js';
import { filterSearch } from '../../src/storage/search-request.js';
import type { Storage } from '../../src/storage/types.js';

/**
 * What a store-level test or benchmark searches with: every type allowed (the store's own caller,
 * no principal), chains read from `storage` in `projectId` (as the FHIR router's reads do, the inner
 * filter narrowing the read), or through `resolver`; with neither, a chain this module must answer
 * is a 400, as a store that answers chains itself never asks.
 */
export function allReads(
  source?: { storage: Pick<Storage, 'searchResources'>; projectId: string } | SearchResolver,
): SearchReads {
  if (source !== undefined && 'resources' in source) {
    return { authorize: () => undefined, resources: (type, filter) => source.resources(type, filter) };
  }
  return {
    authorize: () => undefined,
    async *resources(type, filter) {
      if (!source) throw new FhirError(400, 'not-supported', 'This search reads no other type');
      const query = filter ? { search: filterSearch(type, filter) } : {};
      yield* (await source.storage.searchResources(source.projectId, type, query)).resources;
    },
  };
}
