// A custom storage adapter: every record lives in an inner store (any `Storage`: memoryStorage,
// fileStorage, postgresStorage, …), and every write that succeeds is appended to an audit trail
// (who changed which record when: ids only, never a resource body or a secret). Writes inside
// `transaction` are recorded only when the transaction commits. The adapter passes the storage
// contract suite (test/examples/custom-storage.test.ts runs it from `fhir-platform-kit/testing`).
// See docs/storage.md, "Writing an adapter".
import {
  memoryStorage,
  type ClientChanges,
  type ExportJobChanges,
  type ExportJobRecord,
  type ExportJobStatus,
  type ExportReader,
  type ExportSnapshot,
  type FhirResource,
  type MembershipRecord,
  type NewClient,
  type NewExportJob,
  type NewMembership,
  type NewUser,
  type ProjectRecord,
  type ResourceQuery,
  type ResourceWrite,
  type SigningKeyRecord,
  type HistoryQuery,
  type Storage,
  type StorageDescriptor,
  type StorageOperations,
  type UserChanges,
  type UserListOptions,
  type UserPage,
  type UserQuery,
  type UserRecord,
  type WriteOptions,
} from 'fhir-platform-kit';

/** One audited write. */
export interface AuditEntry {
  /** When the write was acknowledged (ISO 8601). */
  at: string;
  /** The storage method (`createResource`, `updateUser`, …). */
  operation: string;
  /** The project it changed, when it belongs to one. */
  projectId?: string;
  /** What it changed: `Patient/123`, `User/u1`, `Client/c1`, … */
  target: string;
}

type Record_ = Omit<AuditEntry, 'at'>;

/** The record operations (used directly, and inside transactions with a deferred trail). */
class AuditedOperations implements StorageOperations {
  constructor(
    protected readonly inner: StorageOperations,
    protected readonly record: (entry: Record_) => void,
  ) {}

  /** Runs a write, then records it (a failed write records nothing). */
  protected async audited<T>(write: Promise<T>, entry: (result: T) => Record_): Promise<T> {
    const result = await write;
    this.record(entry(result));
    return result;
  }

  // Projects
  createProject(project: Omit<ProjectRecord, 'createdAt' | 'updatedAt' | 'version'>) {
    return this.audited(this.inner.createProject(project), (p) => ({
      operation: 'createProject',
      projectId: p.id,
      target: `Project/${p.id}`,
    }));
  }
  readProject(id: string) {
    return this.inner.readProject(id);
  }
  updateProject(id: string, changes: Parameters<StorageOperations['updateProject']>[1]) {
    return this.audited(this.inner.updateProject(id, changes), () => ({
      operation: 'updateProject',
      projectId: id,
      target: `Project/${id}`,
    }));
  }

  // Users
  createUser(projectId: string, user: NewUser) {
    return this.audited(this.inner.createUser(projectId, user), (u) => ({
      operation: 'createUser',
      projectId,
      target: `User/${u.id}`,
    }));
  }
  readUser(projectId: string, id: string) {
    return this.inner.readUser(projectId, id);
  }
  updateUser(projectId: string, id: string, changes: UserChanges, options?: { ifVersion?: number }) {
    return this.audited(this.inner.updateUser(projectId, id, changes, options), () => ({
      operation: 'updateUser',
      projectId,
      target: `User/${id}`,
    }));
  }
  deleteUser(projectId: string, id: string) {
    return this.audited(this.inner.deleteUser(projectId, id), () => ({
      operation: 'deleteUser',
      projectId,
      target: `User/${id}`,
    }));
  }
  findUsers(projectId: string, query: UserQuery) {
    return this.inner.findUsers(projectId, query);
  }
  listUsers(projectId: string): Promise<UserRecord[]>;
  listUsers(projectId: string, options: UserListOptions): Promise<UserPage>;
  listUsers(projectId: string, options?: UserListOptions): Promise<UserRecord[] | UserPage> {
    return options === undefined ? this.inner.listUsers(projectId) : this.inner.listUsers(projectId, options);
  }

  // Memberships
  createMembership(projectId: string, membership: NewMembership) {
    return this.audited(this.inner.createMembership(projectId, membership), (m: MembershipRecord) => ({
      operation: 'createMembership',
      projectId,
      target: `Membership/${m.id}`,
    }));
  }
  listMemberships(projectId: string, query?: { userId?: string; clientId?: string }) {
    return this.inner.listMemberships(projectId, query);
  }
  deleteMembership(projectId: string, id: string) {
    return this.audited(this.inner.deleteMembership(projectId, id), () => ({
      operation: 'deleteMembership',
      projectId,
      target: `Membership/${id}`,
    }));
  }

  // Client applications
  createClient(client: NewClient) {
    return this.audited(this.inner.createClient(client), (c) => ({
      operation: 'createClient',
      ...(c.projectId ? { projectId: c.projectId } : {}),
      target: `Client/${c.id}`,
    }));
  }
  readClient(clientId: string) {
    return this.inner.readClient(clientId);
  }
  listClients(projectId: string) {
    return this.inner.listClients(projectId);
  }
  updateClient(clientId: string, changes: ClientChanges) {
    return this.audited(this.inner.updateClient(clientId, changes), (c) => ({
      operation: 'updateClient',
      ...(c.projectId ? { projectId: c.projectId } : {}),
      target: `Client/${c.id}`,
    }));
  }

  // FHIR resources
  createResource(projectId: string, resource: FhirResource) {
    return this.audited(this.inner.createResource(projectId, resource), (r) => ({
      operation: 'createResource',
      projectId,
      target: `${r.resourceType}/${r.id}`,
    }));
  }
  readResource(projectId: string, resourceType: string, id: string) {
    return this.inner.readResource(projectId, resourceType, id);
  }
  updateResource(projectId: string, resource: FhirResource & { id: string }, options?: WriteOptions) {
    return this.audited(this.inner.updateResource(projectId, resource, options), () => ({
      operation: 'updateResource',
      projectId,
      target: `${resource.resourceType}/${resource.id}`,
    }));
  }
  deleteResource(projectId: string, resourceType: string, id: string, options?: WriteOptions) {
    return this.audited(this.inner.deleteResource(projectId, resourceType, id, options), () => ({
      operation: 'deleteResource',
      projectId,
      target: `${resourceType}/${id}`,
    }));
  }
  async writeResources(projectId: string, writes: ResourceWrite[]) {
    const results = await this.inner.writeResources(projectId, writes);
    writes.forEach((write, i) => {
      const resource = results[i]?.resource;
      const target =
        write.op === 'delete'
          ? `${write.resourceType}/${write.id}`
          : `${resource?.resourceType ?? write.resource.resourceType}/${resource?.id ?? write.resource.id ?? ''}`;
      this.record({ operation: `writeResources:${write.op}`, projectId, target });
    });
    return results;
  }
  searchResources(projectId: string, resourceType: string, query?: ResourceQuery) {
    return this.inner.searchResources(projectId, resourceType, query);
  }
}

/** The adapter: the record operations above, plus the server-wide part of `Storage`. */
export class AuditedStorage extends AuditedOperations implements Storage {
  readonly #store: Storage;
  readonly #trail: AuditEntry[];

  constructor(inner: Storage) {
    const trail: AuditEntry[] = [];
    super(inner, (entry) => trail.push({ at: new Date().toISOString(), ...entry }));
    this.#store = inner;
    this.#trail = trail;
  }

  /** The audit trail so far, oldest first (a copy). */
  auditTrail(): AuditEntry[] {
    return this.#trail.map((entry) => ({ ...entry }));
  }

  async transaction<T>(fn: (tx: StorageOperations) => Promise<T>): Promise<T> {
    let pending: Record_[] = [];
    const result = await this.#store.transaction((tx) => {
      pending = []; // the inner store may run `fn` again (a retried transaction)
      return fn(new AuditedOperations(tx, (entry) => pending.push(entry)));
    });
    for (const entry of pending) this.record(entry);
    return result;
  }

  deleteProject(id: string) {
    return this.audited(this.#store.deleteProject(id), () => ({
      operation: 'deleteProject',
      projectId: id,
      target: `Project/${id}`,
    }));
  }
  listProjects() {
    return this.#store.listProjects();
  }

  // Old versions and history: reads, not audited.
  readResourceVersion(projectId: string, resourceType: string, id: string, versionId: string) {
    return this.#store.readResourceVersion(projectId, resourceType, id, versionId);
  }
  readHistory(projectId: string, query: HistoryQuery) {
    return this.#store.readHistory(projectId, query);
  }

  // Signing keys and one-time values: server plumbing, not audited.
  listSigningKeys() {
    return this.#store.listSigningKeys();
  }
  saveSigningKey(key: SigningKeyRecord) {
    return this.#store.saveSigningKey(key);
  }
  useOnce(key: string, expiresAt: number) {
    return this.#store.useOnce(key, expiresAt);
  }

  // Export jobs and reads: delegated as they are.
  createExportJob(job: NewExportJob) {
    return this.#store.createExportJob(job);
  }
  readExportJob(projectId: string, id: string) {
    return this.#store.readExportJob(projectId, id);
  }
  updateExportJob(
    projectId: string,
    id: string,
    changes: ExportJobChanges,
    options?: { ifVersion?: number },
  ): Promise<ExportJobRecord> {
    return this.#store.updateExportJob(projectId, id, changes, options);
  }
  deleteExportJob(projectId: string, id: string) {
    return this.#store.deleteExportJob(projectId, id);
  }
  listExportJobs(query?: { projectId?: string; status?: ExportJobStatus[] }) {
    return this.#store.listExportJobs(query);
  }
  exportSnapshot(projectId: string, options?: Parameters<Storage['exportSnapshot']>[1]) {
    return this.#store.exportSnapshot(projectId, options);
  }
  releaseSnapshot(snapshot: ExportSnapshot) {
    return this.#store.releaseSnapshot(snapshot);
  }
  get exportReader(): ExportReader {
    return this.#store.exportReader;
  }
  /** Export workers reopen the inner store (they only read, so nothing to audit). */
  get descriptor(): StorageDescriptor | undefined {
    return this.#store.descriptor;
  }

  ping() {
    return this.#store.ping();
  }
  close() {
    return this.#store.close();
  }
}

/** An audited store over `inner` (a fresh memory store by default). */
export function auditedStorage(inner: Storage = memoryStorage()): AuditedStorage {
  return new AuditedStorage(inner);
}
