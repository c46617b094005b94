import {
  indexerGetter,
  type IndexerOption,
  type MatcherOption,
  type ResourceIndexer,
  type SearchMatcher,
} from '../search-index.js';
import type { FhirResource } from '../types.js';
import { indexedCodes, postingKeys } from './posting-keys.js';

/**
 * A store's search indexer, loaded on first need (the first search that builds a parameter's
 * postings, or a file store opening with saved postings): the engine computes each written
 * version's posting keys with it, at plan time, in the caller's thread (see `posting-keys.ts`),
 * for the parameters its type has built only. Without an indexer the store posts nothing and
 * every search scans. What the postings cannot answer exactly is tested with the indexer's matcher
 * (`ResourceIndexer.compileFilters`), else with the store's own `matcher` (the package's stores
 * are given the R4 one, with or without an indexer).
 */
export class Indexing {
  /** The loaded indexer; undefined before `load` or without one. */
  current: ResourceIndexer | undefined;
  private readonly get: () => Promise<ResourceIndexer | undefined>;
  private loaded: boolean;
  private loading: Promise<ResourceIndexer | undefined> | undefined;

  private readonly getMatcher: () => Promise<SearchMatcher | undefined>;

  constructor(option: IndexerOption | false | undefined, matcher?: MatcherOption) {
    this.get = indexerGetter(option === false ? undefined : option);
    this.loaded = option === undefined || option === false;
    this.getMatcher = matcherGetter(matcher);
  }

  /**
   * The matcher that tests what the postings do not answer exactly: the indexer's
   * (`ResourceIndexer.compileFilters`), else the store's own; undefined when it has neither (a
   * store built without the package's factories).
   */
  async matcher(): Promise<SearchMatcher | undefined> {
    const indexer = this.enabled ? await this.load().catch(() => undefined) : undefined;
    if (indexer?.compileFilters) return indexer as SearchMatcher;
    return this.getMatcher();
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
    return postingKeys(this.current.index(resource, indexedCodes(codes)), codes);
  }
}

/** A memoized getter of a `MatcherOption` (a failed load is tried again by the next call). */
function matcherGetter(option: MatcherOption | undefined): () => Promise<SearchMatcher | undefined> {
  if (option === undefined || typeof option !== 'function') return () => Promise.resolve(option);
  let loading: Promise<SearchMatcher> | undefined;
  return () => {
    loading ??= option().catch((error: unknown) => {
      loading = undefined;
      throw error;
    });
    return loading;
  };
}
