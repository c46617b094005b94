import { indexerGetter, type IndexerOption, type ResourceIndexer } from '../search-index.js';
import type { FhirResource } from '../types.js';
import { postingKeys } from './posting-keys.js';

/**
 * A store's search indexer, loaded once: the engine computes each written version's posting keys
 * with it, at plan time, in the caller's thread (see `posting-keys.ts`). Without an indexer the
 * store posts nothing and every search scans.
 */
export class Indexing {
  /** The loaded indexer; undefined before `load` or without one. */
  current: ResourceIndexer | undefined;
  private readonly get: () => Promise<ResourceIndexer | undefined>;
  private loaded: boolean;
  private loading: Promise<ResourceIndexer | undefined> | undefined;

  constructor(option: IndexerOption | undefined) {
    this.get = indexerGetter(option);
    this.loaded = option === undefined;
  }

  /** True until the indexer a store was given is loaded (writes wait for it). */
  get pending(): boolean {
    return !this.loaded;
  }

  /**
   * Loads the indexer (once; a failed load is tried again by the next call). One promise for
   * every caller while it loads, so that what waits on it resumes in call order.
   */
  load(): Promise<ResourceIndexer | undefined> {
    if (this.loaded) return Promise.resolve(this.current);
    this.loading ??= this.get().then(
      (indexer) => {
        this.current = indexer;
        this.loaded = true;
        return indexer;
      },
      (error: unknown) => {
        this.loading = undefined;
        throw error;
      },
    );
    return this.loading;
  }

  /** The posting keys of a version, or undefined when the store has no indexer. */
  keys(resource: FhirResource): string[] | undefined {
    return this.current ? postingKeys(this.current.index(resource)) : undefined;
  }
}
