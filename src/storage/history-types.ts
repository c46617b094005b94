import type { StoredResource } from './resource-types.js';

/**
 * What a store keeps of superseded versions (the current version and a tombstone that is current
 * are always kept): `'all'` every version; `{ versions: n }` the last `n` versions of each resource
 * (`1`: only the current one, as stores did before history); `{ days: n }` the versions superseded
 * less than `n` days ago. Stores drop the rest lazily (file store: compaction; memory: after a
 * batch; PostgreSQL: a sweep), so a dropped version may stay readable for a while.
 */
export type HistoryRetention = 'all' | { versions: number } | { days: number };

/** The HTTP method of the interaction that made a version (FHIR `Bundle.entry.request.method`). */
export type HistoryMethod = 'POST' | 'PUT' | 'DELETE';

/**
 * One version in a history: a resource version, or a deletion (no `resource`). `method` is `POST`
 * for the first version of a resource and for one re-created after a delete, `PUT` for an update,
 * `DELETE` for a deletion (a create through `PUT` with the client's id reads as `POST` too).
 */
export interface HistoryEntry {
  method: HistoryMethod;
  resourceType: string;
  id: string;
  versionId: string;
  /** `meta.lastUpdated` of the version, or the instant of the deletion (6 fraction digits). */
  lastUpdated: string;
  /** The version (absent for a deletion). */
  resource?: StoredResource;
}

/**
 * A history request: the whole project's (`type` and `id` absent), one type's, or one resource's
 * (`type` and `id`). Entries come newest first, in commit order.
 */
export interface HistoryQuery {
  /** Only this resource type. */
  type?: string;
  /** Only this resource (requires `type`). */
  id?: string;
  /** Only versions made at or after this instant (epoch milliseconds): FHIR `_since`. */
  since?: number;
  /**
   * Only versions current at some moment of `[from, to)` (epoch milliseconds): FHIR `_at`. A
   * deletion counts as a version, current until the resource is re-created.
   */
  at?: { from: number; to: number };
  /** Entries per page (0: none, only `next` and `total` when known). */
  count: number;
  /** The `next` of the previous page: the page starts right after its last entry. */
  cursor?: string;
}

/** One page of a history. */
export interface HistoryPage {
  entries: HistoryEntry[];
  /** Opaque: pass it as `cursor` for the next (older) page; absent on the last page. */
  next?: string;
  /** Entries of the whole history asked for, when the store counts them cheaply (a resource's). */
  total?: number;
}
