import type { Readable } from 'node:stream';

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

/** A FHIR R4 resource as plain JSON. */
export interface FhirResource {
  resourceType: string;
  id?: string;
  meta?: FhirMeta;
  [key: string]: unknown;
}

export interface FhirMeta {
  versionId?: string;
  lastUpdated?: string;
  [key: string]: unknown;
}

/** A stored resource always has an id and `meta.versionId` / `meta.lastUpdated`. */
export interface StoredResource extends FhirResource {
  id: string;
  meta: FhirMeta & { versionId: string; lastUpdated: string };
}

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

export interface ProjectRecord {
  id: string;
  name: string;
  description?: string;
  /** Validate resources against the FHIR R4 structure definitions. */
  strictMode: boolean;
  /** Id of the user who owns the project (its first admin). */
  ownerUserId?: string;
  /** The project's SCIM settings; each one absent follows the `scimRouter` option. */
  scim?: ProjectScimSettings;
  createdAt: string;
  updatedAt: string;
  /** Incremented on every change; the ETag of the record. */
  version: number;
}

export type ProfileType = 'Patient' | 'Practitioner' | 'RelatedPerson';

/** Per-project overrides of the `scimRouter` options of the same names. */
export interface ProjectScimSettings {
  /** Profile type of a user created without `userType`. */
  defaultUserType?: ProfileType;
  /** Answer `userName` with the name the client sent instead of the profile id. */
  echoUserName?: boolean;
}

export interface UserRecord {
  id: string;
  projectId: string;
  /**
   * The login name given by whoever created the user (an identity provider's `userName`), or the
   * profile resource id when none was given. Unique per project, compared case-insensitively.
   */
  userName: string;
  /** Identifier of the user in the provisioning client; unique per project when set. */
  externalId?: string;
  userType: ProfileType;
  /** Id of the linked FHIR resource of type `userType` in the same project. */
  profileId: string;
  active: boolean;
  /** Every other attribute of the user (SCIM `name`, `emails`, `displayName`, …). */
  data: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  version: number;
}

/** Fields a caller supplies on user create; the adapter fills id (when absent), times and version. */
export type NewUser = Omit<UserRecord, 'id' | 'createdAt' | 'updatedAt' | 'version'> & { id?: string };

/** Fields a caller may change on update (full replacement of each given field). */
export type UserChanges = Partial<
  Pick<UserRecord, 'userName' | 'externalId' | 'active' | 'data' | 'profileId'>
>;

export interface UserQuery {
  /** Case-insensitive match against the stored `userName`. */
  userName?: string;
  externalId?: string;
  profileId?: string;
}

export interface MembershipRecord {
  id: string;
  projectId: string;
  userId?: string;
  clientId?: string;
  /** Project-admin rights. */
  admin: boolean;
  /** `Type/id` of the member's FHIR profile, when it has one. */
  profile?: string;
  createdAt: string;
}

export type NewMembership = Omit<MembershipRecord, 'id' | 'createdAt'> & { id?: string };

export interface ClientRecord {
  /** The OAuth `client_id`. */
  id: string;
  /** Null only for a super-admin client, which belongs to no project. */
  projectId: string | null;
  name: string;
  /** Hash of the client secret (never the secret itself). */
  secretHash?: string;
  /** Inline public JWKS for `private_key_jwt`. */
  jwks?: { keys: Record<string, unknown>[] };
  jwksUri?: string;
  /** Space-separated scopes the client may be granted. */
  scope: string;
  admin: boolean;
  superAdmin: boolean;
  /** Access token lifetime in seconds; the server default when absent. */
  accessTokenLifetime?: number;
  revoked: boolean;
  createdAt: string;
  updatedAt: string;
}

export type NewClient = Omit<ClientRecord, 'createdAt' | 'updatedAt' | 'revoked'> & { revoked?: boolean };
export type ClientChanges = Partial<Omit<ClientRecord, 'id' | 'projectId' | 'createdAt' | 'updatedAt'>>;

/** A server signing key for access tokens. */
export interface SigningKeyRecord {
  kid: string;
  alg: string;
  privateJwk: Record<string, unknown>;
  publicJwk: Record<string, unknown>;
  createdAt: string;
  /** After this time the key signs no new token; it still verifies until `expiresAt`. */
  retiredAt?: string;
  /** After this time the key is no longer published nor accepted. */
  expiresAt?: string;
}

export type ExportJobStatus = 'accepted' | 'in-progress' | 'completed' | 'failed' | 'cancelled';

export interface ExportJobRecord {
  id: string;
  projectId: string;
  /** Client (or user) id of the principal that started the job. */
  ownerId: string;
  status: ExportJobStatus;
  /** The kick-off request URL, absolute, with its query. */
  request: string;
  /** Kick-off time (FHIR instant). */
  transactionTime: string;
  /** Parsed kick-off parameters, plain JSON. */
  params: Record<string, unknown>;
  /** The storage snapshot the job reads (plain JSON from `exportSnapshot`). */
  snapshot?: ExportSnapshot;
  progress?: Record<string, unknown>;
  /** Manifest `output` / `error` / `deleted` arrays once complete. */
  result?: Record<string, unknown>;
  /** OperationOutcome of a failed job. */
  failure?: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  /** When the job and its files may be removed. */
  expiresAt?: string;
  version: number;
}

export type NewExportJob = Omit<ExportJobRecord, 'createdAt' | 'updatedAt' | 'version'>;
export type ExportJobChanges = Partial<
  Pick<ExportJobRecord, 'status' | 'snapshot' | 'progress' | 'result' | 'failure' | 'expiresAt'>
>;

/** A comparison on `meta.lastUpdated`, as epoch milliseconds. */
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

export interface ResourceQuery {
  /** Only these ids. */
  ids?: string[];
  lastUpdated?: InstantRange;
  /** Only resources in the compartment of one of these patients (ids, not references). */
  compartment?: string[];
  /**
   * Only resources with an `identifier` element (the top-level `identifier`, one object or an
   * array) matching one of these tokens. Answered through an index kept on write; a token with
   * neither `system` nor `value` matches nothing.
   */
  identifier?: IdentifierToken[];
  /**
   * A further test on each candidate (already narrowed by the fields above). Runs in the
   * caller's thread; adapters call it on a private copy.
   */
  where?: (resource: StoredResource) => boolean;
  /** Default: `_lastUpdated`, ties broken by id. */
  sort?: '_lastUpdated' | '-_lastUpdated' | '_id' | '-_id';
  /** Number of matches to skip. @default 0 */
  offset?: number;
  /** Maximum number returned; 0 returns only the total. @default all */
  count?: number;
}

export interface ResourcePage {
  total: number;
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

/**
 * An opaque, plain-JSON marker of "the store as of now", taken at export kick-off and passed to
 * readers (possibly in a worker thread). Each adapter defines what it holds.
 */
export type ExportSnapshot = Record<string, unknown> & { takenAt: string };

/** Optional hints for `exportSnapshot`. */
export interface ExportSnapshotOptions {
  /** Patients whose compartments the export will read (Patient and Group exports). */
  patientIds?: string[];
}

export interface ExportReadOptions {
  resourceType: string;
  /** Only resources changed after this instant (epoch ms). */
  since?: number;
  /** Only resources in the compartment of these patients (Patient resources themselves included). */
  patientIds?: string[];
  /**
   * The caller is done with each chunk's `data` before it asks for the next chunk, so the adapter
   * may write the next chunk into the same memory (the export runner does this to keep its memory
   * flat). Adapters may ignore it.
   * @default false
   */
  reuseChunks?: boolean;
}

/**
 * A chunk of NDJSON: whole lines, each a resource's JSON followed by `\n`; `count` is the number
 * of lines in it.
 */
export interface NdjsonChunk {
  data: string | Uint8Array;
  count: number;
}

/** The read side an export worker uses. */
export interface ExportReader {
  /** Latest version, as of the snapshot, of every live resource matching the options. */
  readResources(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<NdjsonChunk>;
  /** Resources deleted after `since` and up to the snapshot (and not re-created by then). */
  readDeleted(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<Tombstone>;
  close(): Promise<void>;
}

/**
 * How a worker thread reopens a read-only view of a store: `import(module)[exportName](options)`
 * must return an `ExportReader`. Plain data only.
 */
export interface StorageDescriptor {
  module: string;
  exportName: string;
  options: Record<string, unknown>;
}

/** Which job (and which run of it) export files belong to. */
export interface ExportFilesRef {
  projectId: string;
  jobId: string;
  /**
   * The lease token of the run writing the files (see {@link ExportJobQueue}). A store that knows
   * leases refuses new files once another run holds the job. Absent: no lease check.
   */
  run?: string;
}

/** One export file being written: invisible under its name until `commit`. */
export interface ExportFileHandle {
  /** Appends bytes; resolves once they are accepted (memory holds at most one chunk). */
  write(data: string | Uint8Array): Promise<void>;
  /** Completes the file: it is then listed and served under its name. */
  commit(): Promise<void>;
  /** Removes the unfinished file. */
  abort(): Promise<void>;
}

/** Where one run of one export job writes its files. */
export interface ExportFileSink {
  /** Starts the file `name` (e.g. `Observation-1.ndjson`). */
  create(name: string): Promise<ExportFileHandle>;
}

/** A byte range of a file, both ends included (HTTP `Range`). */
export interface ExportFileRange {
  start: number;
  end: number;
}

/**
 * Where export files live: a local directory (the default) or a store every instance reaches (the
 * PostgreSQL store's `exportFiles`). Export workers reopen it from `descriptor` (or write into
 * `directory`); downloads read it in the main thread.
 */
export interface ExportFileStore {
  /** Root directory when the files are plain files (`{directory}/{job id}/{name}`). */
  readonly directory?: string;
  /**
   * How a worker thread reopens the store: `import(module)[exportName](options)` returns an
   * `ExportFileStore`. Absent (and no `directory`): exports run in the main thread.
   */
  readonly descriptor?: StorageDescriptor;
  /** Opens the writer of one job run, in this thread. */
  sink(ref: ExportFilesRef): ExportFileSink;
  /** Size in bytes of a completed file, or undefined when there is none. */
  size(ref: ExportFilesRef, name: string): Promise<number | undefined>;
  /** Streams a completed file (or a range of it) with backpressure. */
  read(ref: ExportFilesRef, name: string, range?: ExportFileRange): Readable;
  /** Total bytes of a job's completed files. */
  bytes(ref: ExportFilesRef): Promise<number>;
  /** Removes every file of a job, complete or not. */
  remove(ref: ExportFilesRef): Promise<void>;
  /**
   * Ids of the jobs that have files here, for the retention sweep to remove those of jobs that no
   * longer exist. Absent when files cannot outlive their job (the PostgreSQL store deletes them with
   * the job).
   */
  jobIds?(): Promise<string[]>;
  /** Releases what the store holds (a worker's connections). */
  close(): Promise<void>;
}

/**
 * Export jobs shared by several instances of the service on one store: a job is run by the
 * instance holding its lease, renewed by a heartbeat; a job whose lease expired (its instance
 * died) may be claimed by any instance. Leases are tokens chosen by the claimer.
 */
export interface ExportJobQueue {
  /**
   * Creates a job already leased to `run` for `leaseMs`, so that the instance that accepted it runs
   * it: no other instance's heartbeat can claim it between its creation and its start.
   * `ConflictError` when the id exists.
   */
  createLeased(job: NewExportJob, run: string, leaseMs: number): Promise<ExportJobRecord>;
  /**
   * Leases a runnable job (accepted or in progress, with no lease or an expired one) to `run` for
   * `leaseMs`: the oldest, or only `only` when given. Undefined when there is none.
   */
  claim(
    run: string,
    leaseMs: number,
    only?: { projectId: string; id: string },
  ): Promise<ExportJobRecord | undefined>;
  /** Extends the lease of `run`; false when the job is gone, over, or leased to another run. */
  renew(projectId: string, id: string, run: string, leaseMs: number): Promise<boolean>;
  /** Ends the job with `changes` and frees its lease, if `run` still holds it; false otherwise. */
  finish(projectId: string, id: string, run: string, changes: ExportJobChanges): Promise<boolean>;
  /** Gives the lease of `run` up: the job stays runnable, for any instance. */
  release(projectId: string, id: string, run: string): Promise<void>;
  /**
   * Keeps a completed job from expiry sweeps for `ms` (a download of its files is in flight on
   * some instance); renewed while the download lasts.
   */
  holdForDownload(projectId: string, id: string, ms: number): Promise<void>;
  /**
   * Deletes an expired job (and with it the files the store keeps for it) unless a run or a
   * download holds it; false when it is held, true when deleted or already gone.
   */
  deleteIfUnheld(projectId: string, id: string): Promise<boolean>;
  /** Runs `fn` while holding the project's kick-off lock, shared by every instance. */
  withProjectLock<T>(projectId: string, fn: () => Promise<T>): Promise<T>;
}

/** Reads and writes that may run inside an atomic `transaction`. */
export interface StorageOperations {
  // Projects
  createProject(project: Omit<ProjectRecord, 'createdAt' | 'updatedAt' | 'version'>): Promise<ProjectRecord>;
  readProject(id: string): Promise<ProjectRecord>;
  updateProject(
    id: string,
    changes: Partial<Pick<ProjectRecord, 'name' | 'description' | 'strictMode' | 'ownerUserId' | 'scim'>>,
  ): Promise<ProjectRecord>;

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
