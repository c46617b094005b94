import type { SearchRequest } from './search-request.js';
import type { FhirResource, StoredResource } from './resource-types.js';

/*
 * What resource reads and writes take and answer in the storage contract (see `./types.ts`):
 * queries, pages, writes, results, tombstones.
 */

export interface InstantRange {
  gt?: number;
  ge?: number;
  lt?: number;
  le?: number;
}

/**
 * One value of a token search on `identifier` (`system|value`, `|value`, `system|`, `value`): an
 * identifier element matches when each given part is equal. FHIR R4 token search.
 * @see https://hl7.org/fhir/R4/search.html#token
 */
export interface IdentifierToken {
  /** The element's `system`; `null`: only elements without a `system`; absent: any system. */
  system?: string | null;
  /** The element's `value`; absent: any value. */
  value?: string;
}

/**
 * One search of one resource type: what to match (`search`, plus an optional `where` of the
 * caller's), in what order, which page, by when, and what total. A query without `search` matches
 * every current resource of the type.
 */
export interface ResourceQuery {
  /**
   * What the matches satisfy: the parsed FHIR search (plain, structured-cloneable data; its
   * `resourceType` is the one searched), its filters (chains and `_has` included) ANDed with its
   * `compartment`, chains and `_has` within its `reach`. Every store answers all of it: a plain
   * `_id`, a one-value `_lastUpdated` and `compartment` from what it keeps of each version, the
   * other filters from its search indexes (PostgreSQL: in SQL), and what its indexes cannot answer
   * exactly by testing each candidate with its indexer's matcher
   * (`ResourceIndexer.compileFilters`; the memory and file stores). Its result parameters
   * (`count`, `offset`, `sort`, `include`, …) are the caller's: paging and order are the fields
   * below.
   * @see https://hl7.org/fhir/R4/search.html
   */
  search?: SearchRequest;
  /**
   * A further test of the caller's own on each match of `search` (never the search's filters,
   * which the store answers). Runs in the caller's thread; adapters call it on a private copy.
   */
  where?: (resource: StoredResource) => boolean;
  /** Default: `_lastUpdated`, ties broken by id. Ignored when `order` is given. */
  sort?: '_lastUpdated' | '-_lastUpdated' | '_id' | '-_id';
  /**
   * Orders the matches by values read from each one (FHIR `_sort` on search parameters) instead of
   * `sort`: by `keys` compared with {@link compareSortValues}, ties broken by id (ascending).
   */
  order?: ResourceOrder;
  /**
   * Keyset paging: the page starts right after this position of the order (`offset` then counts from
   * there). A position, not a match: the match it was taken from may have changed or gone since.
   */
  after?: ResourceCursor;
  /**
   * Keyset paging backwards: the page is the `count` matches right before this position (`offset`
   * skips that many of the nearest first), in the query's order. Not with `after`.
   */
  before?: ResourceCursor;
  /** Number of matches to skip. @default 0 */
  offset?: number;
  /**
   * When the search must be answered by, in epoch milliseconds (the `Date.now()` clock): past it
   * the store stops, releases what it holds and throws `SearchTooCostlyError`. The embedded stores
   * check it between slices of candidates, yielding to the event loop there so that other requests
   * are served meanwhile; PostgreSQL makes what is left of it the statement timeout of the
   * search's statements. @default no deadline
   */
  deadline?: number;
  /** Maximum number returned; 0 returns only the total. @default all */
  count?: number;
  /**
   * What `ResourcePage.total` the caller needs (FHIR `_total`): `accurate` counts the matches (as far
   * as `maxTotal`); `estimate` asks for a cheap approximation (PostgreSQL: the planner's row
   * estimate; the memory and file stores: exact whenever the count costs no extra read, else
   * extrapolated from the candidates read for the page); `none` asks for no count, so that a store
   * reads only as far as the page (`total` may then be absent).
   * @see https://hl7.org/fhir/R4/search.html#total
   * @default 'accurate'
   */
  total?: 'none' | 'estimate' | 'accurate';
  /**
   * With `total: 'accurate'`: the count may stop once more than this many match. A `total` over
   * `maxTotal` says that more than `maxTotal` match (the package's stores answer `maxTotal + 1`; a
   * store may count further). A whole number, or `Infinity`.
   * @default Infinity
   */
  maxTotal?: number;
}

/** One value a resource is sorted by: a string, a number, or `null` when it has none. */
export type SortValue = string | number | null;

/**
 * An order by values read from each match (`ResourceQuery.order`). An adapter calls `keys` once per
 * match, on its private copy (after `where`), and sorts with {@link compareSortValues}; values are
 * plain data, kept in paging cursors.
 */
export interface ResourceOrder {
  /** The values of one match, one per sort key. */
  keys(resource: StoredResource): SortValue[];
  /** Per sort key: descending (its values reversed; a `null` still sorts last). */
  descending: boolean[];
}

/**
 * A position in a query's order (`ResourceQuery.after` / `before`): what the ordering compares of
 * the match it was taken from.
 */
export interface ResourceCursor {
  /** Its id (every order ends with the id). */
  id: string;
  /** Its `meta.lastUpdated` (the FHIR instant as stored): needed when sorting by `_lastUpdated`. */
  lastUpdated?: string;
  /** Its `order.keys`: needed when sorting by `order`. */
  keys?: SortValue[];
}

export interface ResourcePage {
  /**
   * The number of matches, whatever the page, as the query's `total` asks: exact (but at most
   * `maxTotal + 1`) for `accurate`, approximate for `estimate`; absent only when it asked `none`.
   */
  total?: number;
  resources: StoredResource[];
}

export interface WriteOptions {
  /** The write fails with `PreconditionFailedError` unless the current `meta.versionId` equals it. */
  ifMatch?: string;
}

/**
 * One write of a batch. `create` fails with `ConflictError` if the id exists (ids are assigned by
 * the adapter when absent); `update` creates or replaces; `delete` of an absent id is a no-op.
 */
export type ResourceWrite =
  | { op: 'create'; resource: FhirResource }
  | { op: 'update'; resource: FhirResource & { id: string }; ifMatch?: string }
  | { op: 'delete'; resourceType: string; id: string; ifMatch?: string };

/** What `writeResources` did for each write, in order (`resource` absent for deletes). */
export interface WriteResult {
  op: ResourceWrite['op'];
  resource?: StoredResource;
  /** True when an update created the resource. */
  created?: boolean;
  /**
   * The stored JSON text of `resource` and its version, when the adapter has them at hand (the
   * memory and file stores): a caller can answer with the resource without parsing or serialising
   * it again.
   */
  stored?: StoredText;
}

/** A stored resource as its JSON text, with what a response needs to know of it. */
export interface StoredText {
  json: string;
  /** `Buffer.byteLength(json)`, when the adapter measured it (the memory and file stores do). */
  bytes?: number;
  resourceType: string;
  id: string;
  versionId: string;
  lastUpdated: string;
}

/** A deleted resource, as kept for exports (`_since` lists deletions). */
export interface Tombstone {
  resourceType: string;
  id: string;
  /** Time of the delete (FHIR instant). */
  deletedAt: string;
}
