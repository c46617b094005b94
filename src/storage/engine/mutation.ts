import type {
  ClientRecord,
  ExportJobRecord,
  MembershipRecord,
  ProjectRecord,
  SigningKeyRecord,
  UserRecord,
} from '../types.js';

/**
 * One change of a committed batch. Every write of every adapter built on the engine is a list of
 * these: the engine validates them against the current state, the adapter persists them, then
 * the engine applies them to its in-memory state. A `…-put` inserts or replaces the record with
 * that id; a `…-delete` removes it. Every `switch` over `kind` ends in `assertNever`, so a new
 * kind does not compile until each place handles it (see docs/file-store.md, "Adding a record kind").
 */
export type Mutation =
  | { kind: 'project-put'; record: ProjectRecord }
  /** Removes the project record and everything scoped to it (users, resources, clients, …). */
  | { kind: 'project-delete'; id: string }
  | { kind: 'user-put'; projectId: string; record: UserRecord }
  | { kind: 'user-delete'; projectId: string; id: string }
  | { kind: 'membership-put'; projectId: string; record: MembershipRecord }
  | { kind: 'membership-delete'; projectId: string; id: string }
  | { kind: 'client-put'; record: ClientRecord }
  | { kind: 'signing-key-put'; record: SigningKeyRecord }
  | { kind: 'export-job-put'; record: ExportJobRecord }
  | { kind: 'export-job-delete'; projectId: string; id: string }
  | { kind: 'one-time-value-put'; key: string; expiresAt: number }
  | { kind: 'resource-put'; projectId: string; entry: ResourceEntry & { json: string } }
  | { kind: 'resource-delete'; projectId: string; entry: ResourceEntry & { json: string } };

/** The index entry of the current version (or tombstone) of one resource. */
export interface ResourceEntry {
  resourceType: string;
  id: string;
  versionId: string;
  /** `meta.lastUpdated` (or the delete time) in microseconds since the epoch (`isoMicros` gives the instant). */
  lastUpdatedMicros: number;
  deleted: boolean;
  /** Ids of the patients in whose compartment this version is (empty for tombstones). */
  patients: readonly string[];
  /** `identifierKeys` of this version (empty for tombstones). */
  identifiers: readonly string[];
  /**
   * The search posting keys of this version (`postingKeys`), absent for tombstones and for
   * versions not indexed (a store without indexer, an entry loaded before its index is rebuilt).
   */
  postings?: readonly string[];
  /**
   * The version's JSON text (a tombstone's for deletes), only on entries not yet committed
   * (transaction and batch overlays). Text, not an object: nobody can mutate it, it is what the
   * adapters store, and the object handed to the caller is never shared with the store.
   */
  json?: string;
  /** `Buffer.byteLength(json)`, when measured (resource writes: the file store and answers use it). */
  jsonBytes?: number;
  /** Where the adapter keeps the committed body; opaque to the engine. */
  ref?: unknown;
}

/** One map key for a pair of strings (`type` and `id`, say), unambiguous as the first never holds NUL. */
export function pairKey(first: string, second: string): string {
  return `${first}\u0000${second}`;
}
