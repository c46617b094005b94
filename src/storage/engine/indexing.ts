import { indexerGetter, type IndexerOption, type ResourceIndexer } from '../search-index.js';
import type { FhirResource } from '../types.js';
import { postingKeys } from './posting-keys.js';

/**
 * A store's search indexer, loaded on first need (the first search that builds a parameter's
 * postings, or a file store opening with saved postings): the engine computes each written
 * version's posting keys with it, at plan time, in the caller's thread (see `posting-keys.ts`),
 * for the parameters its type has built only. Without an indexer the store posts nothing and
 * every search scans.
 */
export class Indexing {
  /** The loaded indexer; undefined before `load` or without one. */
  current: ResourceIndexer | undefined;
  private readonly get: () => Promise<ResourceIndexer | undefined>;
  private loaded: boolean;
  private loading: Promise<ResourceIndexer | undefined> | undefined;

  constructor(option: IndexerOption | false | undefined) {
    this.get = indexerGetter(option === false ? undefined : option);
    this.loaded = option === undefined || option === false;
  }

  /** True when the store was given an indexer. */
  get enabled(): boolean {
    return !this.loaded || this.current !== undefined;
  }

  /**
   * Loads the indexer (once; a failed load is tried again by the next call). One promise for
   * every caller while it loads.
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

  /**
   * The posting keys of a version for the parameters `codes` (those its type has built), or
   * undefined when there are none (or no indexer: a type builds nothing without one).
   */
  keys(resource: FhirResource, codes: ReadonlySet<string> | undefined): string[] | undefined {
    if (codes === undefined || codes.size === 0 || !this.current) return undefined;
    return postingKeys(this.current.index(resource, codes), codes);
  }
}
