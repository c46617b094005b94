import { compartmentOf } from '../search-request.js';
import { narrowQuery } from '../query-narrowing.js';
import { ConflictError, InvalidRecordError, NotFoundError } from '../errors.js';
import type {
  StoredText,
  ClientChanges,
  ClientRecord,
  PatientCompartment,
  FhirResource,
  MembershipRecord,
  NewClient,
  NewMembership,
  NewUser,
  ProjectChanges,
  ProjectRecord,
  ResourcePage,
  ResourceQuery,
  ResourceWrite,
  StorageOperations,
  StoredResource,
  UserChanges,
  UserQuery,
  UserListOptions,
  UserPage,
  UserRecord,
  WriteOptions,
  WriteResult,
} from '../types.js';
import type { OpContext, WriteContext } from './engine.js';
import type { ResourceEntry } from './mutation.js';
import { Indexing } from './indexing.js';
import { candidateEntries, narrowedMatches } from './candidates.js';
import { SearchPace } from './search-pace.js';
import { buildSearched } from './build-postings.js';
import { resolveQuery } from './chains.js';
import { candidateTest, searchFilterTest } from './filter-test.js';
import { postedSortValues } from './sort-postings.js';
import type { StateView } from './state.js';
import { identifierKeys, identifierTokenKeys } from '../identifier-keys.js';
import { byCreatedThenId } from '../record-order.js';
import { resolveUserList } from '../user-list.js';
import { engineUserPage, userQueryList } from './user-page.js';
import { totalRule } from '../total-rule.js';
import { answerPage } from './search-pages.js';
import {
  checkId,
  checkIfVersion,
  checkResourceType,
  checkResourceWrite,
  checkUserName,
  finishUserUpdate,
  mergeUserChanges,
  newClientRecord,
  newMembershipRecord,
  newProjectRecord,
  newRecordId,
  newUserRecord,
  nextVersionId,
  updatedClientRecord,
  updatedProjectRecord,
  writtenResourceKey,
  type NewProject,
} from '../record-rules.js';
import { deleteThroughBatch, updateThroughBatch } from '../single-writes.js';

/**
 * The result of a create or update: `stored.json` is the stored text, and `resource` is parsed from
 * it on first access only (a fresh object, as every read answers), so that bulk writers which never
 * look at it (NDJSON uploads, transactions answered from the stored text) do not pay for a parse.
 * A class, not an object with its own accessor: one is made for every resource written.
 */
class StoredWriteResult implements WriteResult {
  created?: boolean;
  #resource: StoredResource | undefined;

  constructor(
    readonly op: 'create' | 'update',
    readonly stored: StoredText,
  ) {}

  get resource(): StoredResource {
    return (this.#resource ??= JSON.parse(this.stored.json) as StoredResource);
  }

  set resource(value: StoredResource) {
    this.#resource = value;
  }

  /** Own enumerable fields as a plain result would have them (for spreads, logs and tests). */
  toJSON(): WriteResult {
    return {
      op: this.op,
      resource: this.resource,
      stored: this.stored,
      ...(this.created === undefined ? {} : { created: this.created }),
    };
  }
}

function isoNow(w: WriteContext): string {
  return new Date(w.now().ms).toISOString();
}

/**
 * The `StorageOperations` of the engine, written once against an `OpContext` (the committed store
 * or a transaction). Writes are synchronous plans: they read the state, check every rule and emit
 * mutations; the engine commits them.
 */
export class EngineOperations implements StorageOperations {
  constructor(
    protected readonly ctx: OpContext,
    protected readonly compartment: PatientCompartment,
    protected readonly indexing: Indexing = new Indexing(undefined),
  ) {}

  // Projects

  createProject(project: NewProject): Promise<ProjectRecord> {
    return this.ctx.write((w) => {
      checkId(project.id, 'project');
      if (w.view.project(project.id))
        throw new ConflictError(`Project ${project.id} exists`, { attribute: 'id' });
      const record = newProjectRecord(project, isoNow(w));
      w.emit({ kind: 'project-put', record });
      return structuredClone(record);
    });
  }

  async readProject(id: string): Promise<ProjectRecord> {
    const record = this.ctx.view().project(id);
    if (!record) throw new NotFoundError(`Project ${id} not found`);
    return Promise.resolve(structuredClone(record));
  }

  updateProject(id: string, changes: ProjectChanges): Promise<ProjectRecord> {
    return this.ctx.write((w) => {
      const current = w.view.project(id);
      if (!current) throw new NotFoundError(`Project ${id} not found`);
      const record = updatedProjectRecord(current, id, changes, isoNow(w));
      w.emit({ kind: 'project-put', record });
      return structuredClone(record);
    });
  }

  // Users

  createUser(projectId: string, user: NewUser): Promise<UserRecord> {
    return this.ctx.write((w) => {
      const id = newRecordId(user.id);
      checkId(id, 'user');
      checkUserName(user.userName);
      if (w.view.user(projectId, id)) throw new ConflictError(`User ${id} exists`, { attribute: 'id' });
      this.checkUserUnique(w.view, projectId, id, user.userName, user.externalId);
      const record = newUserRecord(projectId, id, user, isoNow(w));
      w.emit({ kind: 'user-put', projectId, record });
      return structuredClone(record);
    });
  }

  async readUser(projectId: string, id: string): Promise<UserRecord> {
    const record = this.ctx.view().user(projectId, id);
    if (!record) throw new NotFoundError(`User ${id} not found`);
    return Promise.resolve(structuredClone(record));
  }

  updateUser(
    projectId: string,
    id: string,
    changes: UserChanges,
    options?: { ifVersion?: number },
  ): Promise<UserRecord> {
    return this.ctx.write((w) => {
      const current = w.view.user(projectId, id);
      if (!current) throw new NotFoundError(`User ${id} not found`);
      checkIfVersion('User', id, current.version, options?.ifVersion);
      const record = mergeUserChanges(current, changes);
      this.checkUserUnique(w.view, projectId, id, record.userName, record.externalId);
      finishUserUpdate(record, projectId, id, current.version, isoNow(w));
      w.emit({ kind: 'user-put', projectId, record });
      return structuredClone(record);
    });
  }

  deleteUser(projectId: string, id: string): Promise<void> {
    return this.ctx.write((w) => {
      if (!w.view.user(projectId, id)) throw new NotFoundError(`User ${id} not found`);
      w.emit({ kind: 'user-delete', projectId, id });
    });
  }

  async findUsers(projectId: string, query: UserQuery): Promise<UserRecord[]> {
    return Promise.resolve(engineUserPage(this.ctx.view(), projectId, userQueryList(query)).users);
  }

  listUsers(projectId: string): Promise<UserRecord[]>;
  listUsers(projectId: string, options: UserListOptions): Promise<UserPage>;
  async listUsers(projectId: string, options?: UserListOptions): Promise<UserRecord[] | UserPage> {
    if (options === undefined)
      return Promise.resolve(structuredClone([...this.ctx.view().sortedUsers(projectId, 'createdAt')]));
    return Promise.resolve(engineUserPage(this.ctx.view(), projectId, resolveUserList(options)));
  }

  private checkUserUnique(
    view: StateView,
    projectId: string,
    id: string,
    userName: string,
    externalId: string | undefined,
  ): void {
    if (view.userIds(projectId, 'name', userName.toLowerCase()).some((other) => other !== id)) {
      throw new ConflictError(`userName ${userName} is taken`, { attribute: 'userName' });
    }
    if (externalId !== undefined && view.userIds(projectId, 'externalId', externalId).some((o) => o !== id)) {
      throw new ConflictError(`externalId ${externalId} is taken`, { attribute: 'externalId' });
    }
  }

  // Memberships

  createMembership(projectId: string, membership: NewMembership): Promise<MembershipRecord> {
    return this.ctx.write((w) => {
      const id = newRecordId(membership.id);
      checkId(id, 'membership');
      if (w.view.membership(projectId, id))
        throw new ConflictError(`Membership ${id} exists`, { attribute: 'id' });
      const record = newMembershipRecord(projectId, id, membership, isoNow(w));
      w.emit({ kind: 'membership-put', projectId, record });
      return structuredClone(record);
    });
  }

  async listMemberships(
    projectId: string,
    query?: { userId?: string; clientId?: string },
  ): Promise<MembershipRecord[]> {
    const out = [...this.ctx.view().memberships(projectId)].filter(
      (m) =>
        (query?.userId === undefined || m.userId === query.userId) &&
        (query?.clientId === undefined || m.clientId === query.clientId),
    );
    return Promise.resolve(structuredClone(out.sort(byCreatedThenId)));
  }

  deleteMembership(projectId: string, id: string): Promise<void> {
    return this.ctx.write((w) => {
      if (!w.view.membership(projectId, id)) throw new NotFoundError(`Membership ${id} not found`);
      w.emit({ kind: 'membership-delete', projectId, id });
    });
  }

  // Clients

  createClient(client: NewClient): Promise<ClientRecord> {
    return this.ctx.write((w) => {
      checkId(client.id, 'client');
      if (w.view.client(client.id))
        throw new ConflictError(`Client ${client.id} exists`, { attribute: 'id' });
      const record = newClientRecord(client, isoNow(w));
      w.emit({ kind: 'client-put', record });
      return structuredClone(record);
    });
  }

  async readClient(clientId: string): Promise<ClientRecord> {
    const record = this.ctx.view().client(clientId);
    if (!record) throw new NotFoundError(`Client ${clientId} not found`);
    return Promise.resolve(structuredClone(record));
  }

  async listClients(projectId: string): Promise<ClientRecord[]> {
    const out = [...this.ctx.view().clients()].filter((c) => c.projectId === projectId);
    return Promise.resolve(structuredClone(out.sort(byCreatedThenId)));
  }

  updateClient(clientId: string, changes: ClientChanges): Promise<ClientRecord> {
    return this.ctx.write((w) => {
      const current = w.view.client(clientId);
      if (!current) throw new NotFoundError(`Client ${clientId} not found`);
      const record = updatedClientRecord(current, changes, isoNow(w));
      w.emit({ kind: 'client-put', record });
      return structuredClone(record);
    });
  }

  // Resources

  async createResource(projectId: string, resource: FhirResource): Promise<StoredResource> {
    const [result] = await this.writeResources(projectId, [{ op: 'create', resource }]);
    return result!.resource!;
  }

  async readResource(projectId: string, resourceType: string, id: string): Promise<StoredResource> {
    const entry = this.ctx.view().resource(projectId, resourceType, id);
    if (!entry) throw new NotFoundError(`${resourceType}/${id} not found`);
    if (entry.deleted) throw new NotFoundError(`${resourceType}/${id} was deleted`, { deleted: true });
    const release = this.ctx.pin([entry]);
    try {
      return await this.ctx.readBody(entry);
    } finally {
      release();
    }
  }

  updateResource(
    projectId: string,
    resource: FhirResource & { id: string },
    options?: WriteOptions,
  ): Promise<{ resource: StoredResource; created: boolean }> {
    return updateThroughBatch((writes) => this.writeResources(projectId, writes), resource, options);
  }

  deleteResource(projectId: string, resourceType: string, id: string, options?: WriteOptions): Promise<void> {
    return deleteThroughBatch((writes) => this.writeResources(projectId, writes), resourceType, id, options);
  }

  writeResources(projectId: string, writes: ResourceWrite[]): Promise<WriteResult[]> {
    // A version is indexed for the parameters its type has built: built by a search, which loaded
    // the indexer first, so a write never waits for it.
    return this.ctx.write((w) => writes.map((write) => this.planWrite(w, projectId, write)));
  }

  private planWrite(w: WriteContext, projectId: string, write: ResourceWrite): WriteResult {
    if (write.op === 'delete') {
      checkResourceType(write.resourceType);
      const current = w.view.resource(projectId, write.resourceType, write.id);
      const live = current && !current.deleted ? current : undefined;
      checkResourceWrite('delete', write.resourceType, write.id, write.ifMatch, live?.versionId);
      if (!live) return { op: 'delete' };
      const tick = w.now();
      const versionId = nextVersionId(live.versionId);
      const tombstone = {
        resourceType: live.resourceType,
        id: live.id,
        meta: { versionId, lastUpdated: tick.iso },
      };
      w.emit({
        kind: 'resource-delete',
        projectId,
        entry: {
          resourceType: live.resourceType,
          id: live.id,
          versionId,
          lastUpdatedMicros: tick.micros,
          deleted: true,
          patients: [],
          identifiers: [],
          json: JSON.stringify(tombstone),
        },
      });
      return { op: 'delete' };
    }
    const { resource: input, id } = writtenResourceKey(write);
    const current = w.view.resource(projectId, input.resourceType, id);
    const live = current && !current.deleted ? current : undefined;
    const ifMatch = write.op === 'update' ? write.ifMatch : undefined;
    checkResourceWrite(write.op, input.resourceType, id, ifMatch, live?.versionId);
    const tick = w.now();
    const versionId = nextVersionId(current?.versionId);
    const { resourceType, id: _id, meta, ...rest } = input;
    if (meta !== undefined && (typeof meta !== 'object' || meta === null || Array.isArray(meta))) {
      throw new InvalidRecordError('meta must be an object');
    }
    // `resourceType`, `id` and `meta` first in the stored JSON, as FHIR servers usually do.
    const stored = {
      resourceType,
      id,
      meta: { ...meta, versionId, lastUpdated: tick.iso },
      ...rest,
    } as StoredResource;
    let json: string;
    try {
      json = JSON.stringify(stored);
    } catch (error) {
      throw new InvalidRecordError('The resource is not JSON', { cause: error });
    }
    // Measured once: the file store writes that many bytes, and an answer splices them in.
    const bytes = Buffer.byteLength(json);
    w.emit({
      kind: 'resource-put',
      projectId,
      entry: {
        resourceType,
        id,
        versionId,
        lastUpdatedMicros: tick.micros,
        deleted: false,
        patients: this.compartment.patientIds(stored),
        identifiers: identifierKeys(stored),
        postings: this.indexing.keys(stored, w.view.postedCodes(projectId, resourceType)),
        json,
        jsonBytes: bytes,
      },
    });
    const text = { json, bytes, resourceType, id, versionId, lastUpdated: tick.iso };
    const result = new StoredWriteResult(write.op, text);
    if (write.op === 'update') result.created = !live;
    return result;
  }

  async searchResources(
    projectId: string,
    resourceType: string,
    asked: ResourceQuery = {},
  ): Promise<ResourcePage> {
    const rule = totalRule(asked);
    const pace = new SearchPace(asked.deadline);
    const read = (entry: ResourceEntry): Promise<StoredResource> => this.ctx.readBody(entry);
    // The indexer says whether an `identifier` filter goes to the identifier index: loaded for those only.
    const identified = asked.search?.filters.some((f) => f.kind === 'parameter' && f.code === 'identifier');
    const indexer =
      identified && this.indexing.enabled ? await this.indexing.load().catch(() => undefined) : undefined;
    const query = narrowQuery(resourceType, asked, indexer?.identifierIndexed?.bind(indexer));
    await buildSearched(this.ctx, this.indexing, projectId, resourceType, query);
    pace.check();
    // Chains and `_has` the postings answer become reference filters and ids (`chains.ts`);
    // `undefined` when one matches nothing. The rest is tested by the matcher (`filter-test.ts`).
    const resolved = await resolveQuery(this.ctx.view(), projectId, resourceType, query, pace);
    const deadline = asked.deadline === undefined ? {} : { deadline: asked.deadline };
    const filters = await searchFilterTest(
      this.indexing,
      resourceType,
      resolved?.search,
      async (type, search) =>
        (await this.searchResources(projectId, type, { search, ...deadline })).resources,
      pace,
    );
    pace.check();
    const view = this.ctx.view();
    const keys = query.identifier ? new Set(identifierTokenKeys(query.identifier)) : undefined;
    const search = resolved?.search;
    const { entries: candidates, exact } = resolved
      ? candidateEntries(view, projectId, resourceType, resolved, keys)
      : { entries: [], exact: true };
    const where = candidateTest(filters, exact, query.where);
    const narrowing = {
      ids: resolved?.ids,
      lastUpdated: query.lastUpdated,
      compartment: compartmentOf(resourceType, query.search),
      keys,
    };
    // Taken at once and pinned: the search lets others (writes, compaction) run while it works.
    const all = [...candidates];
    const release = this.ctx.pin(all);
    try {
      const matches = await narrowedMatches(all, narrowing, pace);
      // `_sort` on parameters whose keys hold the sort values: ordered without reading a body.
      const sortValues =
        !where && query.order
          ? postedSortValues(view.postedCodes(projectId, resourceType), search?.sort)
          : undefined;
      return await answerPage(read, { query, matches, where, rule, pace, sortValues });
    } finally {
      release();
    }
  }
}
