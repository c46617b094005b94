import type {
  ProjectRecord,
  ProjectChanges,
  UserRecord,
  NewUser,
  UserChanges,
  UserQuery,
  MembershipRecord,
  NewMembership,
  ClientRecord,
  NewClient,
  ClientChanges,
  SigningKeyRecord,
  ExportJobStatus,
  ExportJobRecord,
  NewExportJob,
  ExportJobChanges,
  ExportSnapshot,
} from './record-types.js';
import type { FhirResource, StoredResource } from './resource-types.js';
import type { ResourceQuery, ResourcePage, WriteOptions, ResourceWrite, WriteResult } from './query-types.js';
import type {
  ExportSnapshotOptions,
  ExportReader,
  StorageDescriptor,
  ExportFileStore,
  ExportJobQueue,
} from './export-types.js';
import type { UserListOptions, UserPage } from './user-list.js';
import type { HistoryPage, HistoryQuery } from './history-types.js';
import type { GrantStore } from './grant-types.js';

export type * from './resource-types.js';
export type * from './record-types.js';
export type { UserCursor, UserFilter, UserListOptions, UserPage, UserSortKey } from './user-list.js';
export type * from './query-types.js';
export type * from './export-types.js';
export type * from './history-types.js';
export type * from './grant-types.js';

/**
 * The storage contract every adapter implements (memory, file, PostgreSQL).
 *
 * Rules every adapter keeps (checked by the contract suite, `src/testing/storage-contract.ts`):
 * - Every method is async and returns plain, structured-cloneable JSON values that the caller
 *   may mutate freely (adapters never hand out their internal objects).
 * - Everything that belongs to a Project is addressed by `projectId`; no call ever returns a
 *   record of another project, whatever id is passed.
 * - Failures are typed: `NotFoundError`, `ConflictError`, `PreconditionFailedError`,
 *   `StorageClosedError` (see `./errors.ts`).
 * - Writes are durable when the returned promise resolves.
 */

/**
 * What storage needs of the patient compartment: which patients' compartments each version is in,
 * kept in an index on write (compartment search, Patient and Group exports). Storage does not
 * define it: the package's `fileStorage`, `memoryStorage` and `postgresStorage` pass
 * `R4_PATIENT_COMPARTMENT` (FHIR R4 CompartmentDefinition "Patient") unless told otherwise.
 * Plain, immutable and free of side effects.
 */
export interface PatientCompartment {
  /** The resource types that may be in a patient's compartment. */
  readonly types: readonly string[];
  /** The compartment parameters (inclusion criteria) of a type; empty when never in it. */
  params(resourceType: string): readonly string[];
  /**
   * Ids of the patients in whose compartment `resource` is (a Patient is in its own), without
   * duplicates. Runs on every write: keep it cheap.
   */
  patientIds(resource: FhirResource): string[];
}

/** Reads and writes that may run inside an atomic `transaction`. */
export interface StorageOperations {
  // Projects
  createProject(project: Omit<ProjectRecord, 'createdAt' | 'updatedAt' | 'version'>): Promise<ProjectRecord>;
  readProject(id: string): Promise<ProjectRecord>;
  updateProject(id: string, changes: ProjectChanges): Promise<ProjectRecord>;

  // Users (unique per project: userName case-insensitively, externalId exactly)
  createUser(projectId: string, user: NewUser): Promise<UserRecord>;
  readUser(projectId: string, id: string): Promise<UserRecord>;
  updateUser(
    projectId: string,
    id: string,
    changes: UserChanges,
    options?: { ifVersion?: number },
  ): Promise<UserRecord>;
  deleteUser(projectId: string, id: string): Promise<void>;
  findUsers(projectId: string, query: UserQuery): Promise<UserRecord[]>;
  /** Every user of the project, ordered by `createdAt` then id. */
  listUsers(projectId: string): Promise<UserRecord[]>;
  /**
   * One page of the project's users matching `options.filter` (and `where`), in the order of
   * `sortBy` then id, starting after the cursor `after`, with the total (see `UserListOptions`).
   * Stores answer indexed filters (`userName`, `externalId`, `profileId`, `email`, `id`) without
   * reading the other users, and a page without a filter in time independent of the users before it.
   */
  listUsers(projectId: string, options: UserListOptions): Promise<UserPage>;

  // Memberships
  createMembership(projectId: string, membership: NewMembership): Promise<MembershipRecord>;
  listMemberships(
    projectId: string,
    query?: { userId?: string; clientId?: string },
  ): Promise<MembershipRecord[]>;
  deleteMembership(projectId: string, id: string): Promise<void>;

  // Client applications
  createClient(client: NewClient): Promise<ClientRecord>;
  /** Looks a client up by its `client_id` alone, for client authentication. */
  readClient(clientId: string): Promise<ClientRecord>;
  listClients(projectId: string): Promise<ClientRecord[]>;
  updateClient(clientId: string, changes: ClientChanges): Promise<ClientRecord>;

  // FHIR resources
  createResource(projectId: string, resource: FhirResource): Promise<StoredResource>;
  readResource(projectId: string, resourceType: string, id: string): Promise<StoredResource>;
  updateResource(
    projectId: string,
    resource: FhirResource & { id: string },
    options?: WriteOptions,
  ): Promise<{ resource: StoredResource; created: boolean }>;
  deleteResource(projectId: string, resourceType: string, id: string, options?: WriteOptions): Promise<void>;
  /** All-or-nothing: either every write applies or none does. */
  writeResources(projectId: string, writes: ResourceWrite[]): Promise<WriteResult[]>;
  searchResources(projectId: string, resourceType: string, query?: ResourceQuery): Promise<ResourcePage>;
  /**
   * The resource types with a resource in the compartment of patient `patientId` (any order). It
   * may name a type more: one whose resources there were all deleted or left the compartment since,
   * never one less. `Patient/$everything` asks it once per patient and then searches only those
   * types, instead of each of the compartment's 60-odd types in turn (a round trip each on a
   * database). Optional: without it the walk searches every type. The PostgreSQL store has it.
   */
  compartmentTypes?(projectId: string, patientId: string): Promise<string[]>;
}

/** One failure counter in a `FailureCountStore`, while its window is open. */
export interface FailureCount {
  /** Failures counted in the window. */
  failures: number;
  /** Milliseconds until the window ends and the counter is back to 0. */
  msLeft: number;
}

/**
 * Counters of failed authentications shared by every instance on one store (the failure limiter
 * of `tokenRouter` and `bearerAuth` uses them when `Storage.failureCounts` is present). Keys are
 * opaque strings of any length; a window starts at the first failure counted.
 */
export interface FailureCountStore {
  /** The counters of `keys`, in order; `undefined` for one with no failure in an open window. */
  get(keys: readonly string[]): Promise<(FailureCount | undefined)[]>;
  /** Counts one failure on each of `keys`, opening a window of `windowMs` where none is open. */
  add(keys: readonly string[], windowMs: number): Promise<void>;
}

export interface Storage extends StorageOperations {
  /**
   * Runs `fn` with a view whose writes apply all together when `fn` resolves, or not at all when it
   * throws. Reads through `tx` see the transaction's own writes. Keep `fn` short: adapters may
   * hold other writers back meanwhile.
   */
  transaction<T>(fn: (tx: StorageOperations) => Promise<T>): Promise<T>;

  /**
   * One version of a resource, current or kept by the store's `history` retention.
   * @throws NotFoundError with `deleted: true` when that version is a deletion (FHIR 410), without
   *   when the resource or the version is unknown or no longer kept (404).
   */
  readResourceVersion(
    projectId: string,
    resourceType: string,
    id: string,
    versionId: string,
  ): Promise<StoredResource>;
  /**
   * The history of a resource, a type or the whole project: kept versions and deletions, newest
   * first, paged by an opaque cursor in commit order (writes made while a client pages are never
   * in a later page, and no entry is skipped or repeated). Exports are unaffected: they read the
   * versions current at their snapshot.
   * @throws InvalidRecordError for a cursor this store did not give, or `id` without `type`.
   */
  readHistory(projectId: string, query: HistoryQuery): Promise<HistoryPage>;

  /** Deletes a project and everything in it. */
  deleteProject(id: string): Promise<void>;
  listProjects(): Promise<ProjectRecord[]>;

  // Signing keys (server-wide)
  listSigningKeys(): Promise<SigningKeyRecord[]>;
  saveSigningKey(key: SigningKeyRecord): Promise<void>;

  /**
   * Records a one-time value (a JWT `jti`) until `expiresAt` (epoch ms). Resolves false when it was
   * already recorded and has not expired: a replay.
   */
  useOnce(key: string, expiresAt: number): Promise<boolean>;

  /**
   * Failed-authentication counters kept in the store, so that every instance using it counts
   * together (the PostgreSQL store has them). Absent: each router counts in its own memory.
   */
  readonly failureCounts?: FailureCountStore;

  /**
   * Authorization codes, pending authorizations, refresh tokens and revoked access token ids of the
   * SMART App Launch authorization server (the three stores of this package have them). Absent:
   * `fhirPlatform` keeps them in its own memory (one process, lost on restart).
   */
  readonly grants?: GrantStore;

  // Export jobs
  createExportJob(job: NewExportJob): Promise<ExportJobRecord>;
  readExportJob(projectId: string, id: string): Promise<ExportJobRecord>;
  updateExportJob(
    projectId: string,
    id: string,
    changes: ExportJobChanges,
    options?: { ifVersion?: number },
  ): Promise<ExportJobRecord>;
  deleteExportJob(projectId: string, id: string): Promise<void>;
  /** Jobs of every project (for resume and retention), filtered by status when given. */
  listExportJobs(query?: { projectId?: string; status?: ExportJobStatus[] }): Promise<ExportJobRecord[]>;

  // Export reads
  /**
   * Marks "now" for a consistent export; release it when the job ends. Pass the patient ids of
   * a Patient/Group export when known: adapters may record where those patients' compartment
   * resources are, so reading them costs in proportion to the compartment (optional: without
   * them `readResources` with `patientIds` is still correct, possibly slower).
   */
  exportSnapshot(projectId: string, options?: ExportSnapshotOptions): Promise<ExportSnapshot>;
  releaseSnapshot(snapshot: ExportSnapshot): Promise<void>;
  /** The same reads an export worker does, in this thread. */
  readonly exportReader: ExportReader;
  /** How a worker reopens this store read-only; absent when it cannot (then exports stream from this thread). */
  readonly descriptor?: StorageDescriptor;
  /**
   * Export files in the store itself, reachable from every instance; absent: the bulk router
   * writes them to its `exportDir`.
   */
  readonly exportFiles?: ExportFileStore;
  /** The shared export job queue of a store several instances use at once; absent: one process. */
  readonly exportQueue?: ExportJobQueue;

  /**
   * A cheap reachability check for readiness probes (`GET /readyz`): resolves when the store can
   * serve calls now (open, and its files or database reachable), rejects otherwise (a closed store
   * rejects with `StorageClosedError`). It reads and writes no records.
   */
  ping(): Promise<void>;

  /** Flushes pending writes and releases files, locks and timers. */
  close(): Promise<void>;
}
