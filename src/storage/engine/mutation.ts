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
 * the engine applies them to its in-memory state.
 */
export type Mutation =
  | { t: 'project'; record: ProjectRecord }
  /** Removes the project record and everything scoped to it (users, resources, clients, …). */
  | { t: 'project-'; id: string }
  | { t: 'user'; projectId: string; record: UserRecord }
  | { t: 'user-'; projectId: string; id: string }
  | { t: 'membership'; projectId: string; record: MembershipRecord }
  | { t: 'membership-'; projectId: string; id: string }
  | { t: 'client'; record: ClientRecord }
  | { t: 'key'; record: SigningKeyRecord }
  | { t: 'job'; record: ExportJobRecord }
  | { t: 'job-'; projectId: string; id: string }
  | { t: 'once'; key: string; expiresAt: number }
  | { t: 'resource'; projectId: string; entry: ResourceEntry & { json: string } }
  | { t: 'resource-'; projectId: string; entry: ResourceEntry & { json: string } };

/** The index entry of the current version (or tombstone) of one resource. */
export interface ResourceEntry {
  resourceType: string;
  id: string;
  versionId: string;
  /** `meta.lastUpdated` (or the delete time) in microseconds since the epoch (`isoMicros` gives the instant). */
  lu: number;
  deleted: boolean;
  /** Ids of the patients in whose compartment this version is (empty for tombstones). */
  patients: readonly string[];
  /** `identifierKeys` of this version (empty for tombstones). */
  identifiers: readonly string[];
  /**
   * The version's JSON text (a tombstone's for deletes), only on entries not yet committed
   * (transaction and batch overlays). Text, not an object: nobody can mutate it, it is what the
   * adapters store, and the object handed to the caller is never shared with the store.
   */
  json?: string;
  /** Where the adapter keeps the committed body; opaque to the engine. */
  ref?: unknown;
}

export function key2(a: string, b: string): string {
  return `${a}\u0000${b}`;
}
