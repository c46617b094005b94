import type { CompositeIndexValue, IndexValue } from './index-values.js';
import type { SearchFilter } from './search-request.js';
import type { FhirResource } from './types.js';

/*
 * What a store indexes for search: the values each search parameter sees in a version, computed
 * once per write by a `ResourceIndexer` the package fills in (src/stores.ts, src/postgres.ts: the
 * R4 definitions through `src/search/`), so that every adapter indexes exactly the same normalized
 * values. `src/storage` knows nothing of FHIR search definitions: like the patient compartment,
 * the indexer reaches it as an option. See history/storage-design.md.
 */

/**
 * The values of one version, by search parameter code (`name`, `code`, `code-value-quantity`):
 * only the parameters of its type that see at least one value. Plain, structured-cloneable data.
 * Composite parameters hold `CompositeIndexValue`s, every other type `IndexValue`s.
 */
export type ResourceIndexEntries = Record<string, (IndexValue | CompositeIndexValue)[]>;

/** Computes what a store indexes of each version it writes. Pure and deterministic. */
export interface ResourceIndexer {
  /**
   * Changes whenever the definitions or the normalization change: index data a store kept with
   * another fingerprint (a file store's `.idx`, PostgreSQL's index tables) must be rebuilt.
   */
  readonly fingerprint: string;
  /**
   * The index entries of `resource` (a stored version, with its `resourceType` and `id`): of every
   * parameter of its type, or only of those in `codes` when given (the memory and file stores
   * index only the parameters searched so far; PostgreSQL indexes all). An indexer that ignores
   * `codes` is correct, only slower: a store keeps just the entries it asked for.
   */
  index(resource: FhirResource, codes?: ReadonlySet<string>): ResourceIndexEntries;
  /**
   * The parameters of `resourceType` whose values are exactly those of other parameters of the
   * type (see {@link DerivedParameter}), by code: a store that keeps rows per parameter may keep
   * none for them and answer them from their parts. Omitted: every parameter stands alone.
   */
  derived?(resourceType: string): ReadonlyMap<string, DerivedParameter>;
  /**
   * Every code `index` can answer for `resourceType` (its indexed parameters), so that a store
   * keeping none for the derived ones can ask for the others only. Omitted: not known (the store
   * asks for all).
   */
  codes?(resourceType: string): ReadonlySet<string>;
  /**
   * Whether the `identifier` parameter of `resourceType` reads exactly its top-level `identifier`
   * element, what a store's identifier index keeps (`src/storage/identifier-keys.ts`): a plain
   * `identifier` filter of the type is then answered from that index. Omitted: never (the filter
   * goes to the search index like any other).
   */
  identifierIndexed?(resourceType: string): boolean;
  /**
   * Compiles search filters (ANDed) into a test of one resource, with FHIR R4 search semantics:
   * what a store tests of the filters its own indexes cannot answer exactly (the memory and file
   * stores' postings answer most, never every, filter). Chains and `_has` read the resources they
   * reach through `resolver`, which the store answers from itself (within the search's `reach`).
   * Omitted: the store falls back to the matcher it was built with, if any (the package's stores
   * always have the R4 one), else refuses a search it cannot answer.
   * @see https://hl7.org/fhir/R4/search.html
   */
  compileFilters?(filters: readonly SearchFilter[], resolver: FilterResolver): Promise<FilterTest>;
}

/**
 * How a compiled search test reads the resources of other types a chain or `_has` reaches: the
 * current resources of `resourceType`, of the searching project only, that may match `filter` (the
 * chain's or `_has`'s inner filter, tested again on each one). Any superset of those that match is
 * correct; iterables and async iterables are both accepted.
 */
export interface FilterResolver {
  resources(
    resourceType: string,
    filter?: SearchFilter,
  ): Iterable<FhirResource> | AsyncIterable<FhirResource>;
}

/** A compiled test of a search's filters on one resource. */
export type FilterTest = (resource: FhirResource) => boolean;

/** What compiles search filters into a test: an indexer's {@link ResourceIndexer.compileFilters}. */
export type SearchMatcher = Required<Pick<ResourceIndexer, 'compileFilters'>>;

/** A store's matcher: the matcher itself, or a loader the store calls (once) before its first use. */
export type MatcherOption = SearchMatcher | (() => Promise<SearchMatcher>);

/**
 * A search parameter answered from others of the same type:
 * - `union`: its values are those of `parts` together (R4 `combo-code` is `code` and
 *   `component-code`), so a value test, `:not`, `:missing` and a sort read the parts' values;
 *   with `targetType`, only their references to that type (R4 Observation `patient` is `subject`
 *   restricted to Patient: `Observation.subject.where(resolve() is Patient)`);
 * - `composite`: its elements are those of `alternatives` together, each either the resource
 *   itself with one component per parameter of `and` (R4 `code-value-concept` on an Observation is
 *   its `code` and its `value-concept`), or the elements of another composite parameter with the
 *   same components (`combo-code-value-concept`'s components are `component-code-value-concept`'s).
 */
export type DerivedParameter =
  | { readonly kind: 'union'; readonly parts: readonly string[]; readonly targetType?: string }
  | {
      readonly kind: 'composite';
      readonly alternatives: readonly (
        { readonly and: readonly string[] } | { readonly composite: string }
      )[];
    };

/**
 * How a store is given its indexer: the indexer itself, or a loader the store calls (once) before
 * its first write or index rebuild (the package's R4 indexer loads its definitions asynchronously).
 */
export type IndexerOption = ResourceIndexer | (() => Promise<ResourceIndexer>);

/** A memoized getter of an `IndexerOption`: `undefined` when the store was given none. */
export function indexerGetter(option: IndexerOption | undefined): () => Promise<ResourceIndexer | undefined> {
  if (option === undefined) return () => Promise.resolve(undefined);
  if (typeof option !== 'function') return () => Promise.resolve(option);
  let loading: Promise<ResourceIndexer> | undefined;
  return () => {
    loading ??= option().catch((error: unknown) => {
      loading = undefined;
      throw error;
    });
    return loading;
  };
}

/**
 * A store factory's options with the matcher the package fills in (`src/stores.ts`: the R4 one),
 * used when the indexer has no `compileFilters` or there is no indexer (`indexer: false`).
 */
export type WithMatcher<T> = T & { matcher?: MatcherOption };
