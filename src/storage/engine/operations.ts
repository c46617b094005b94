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
  ProjectRecord,
  ResourcePage,
  ResourceQuery,
  ResourceWrite,
  SortValue,
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
import { candidateEntries, inRange } from './candidates.js';
import { pacedSort } from './paced-sort.js';
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
import { compareItems, firstInOrder, PageWindow } from '../result-page.js';
import {
  countedEnough,
  extrapolated,
  resourcePage,
  totalOf,
  totalRule,
  type TotalRule,
} from '../total-rule.js';
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
  type ProjectChanges,
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

/** Bodies are read this many at a time, so that a large type is not held in memory at once. */
const BODY_SLICE = 256;

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
    // The indexer says whether an `identifier` filter goes to the identifier index: loaded for those only.
    const identified = asked.search?.filters.some((f) => f.kind === 'parameter' && f.code === 'identifier');
    const indexer =
      identified && this.indexing.enabled ? await this.indexing.load().catch(() => undefined) : undefined;
    const query = narrowQuery(resourceType, asked, indexer?.identifierIndexed?.bind(indexer));
    await buildSearched(this.ctx, this.indexing, projectId, resourceType, query);
    pace.check();
    // Chains and `_has` the postings answer become reference filters and ids (`chains.ts`);
    // `undefined` when one matches nothing. The rest is tested by the matcher (`filter-test.ts`).
    const resolved = resolveQuery(this.ctx.view(), projectId, resourceType, query);
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
    const ids = resolved?.ids ? new Set(resolved.ids) : undefined;
    const compartment = compartmentOf(resourceType, query.search);
    const matches: ResourceEntry[] = [];
    const seenIds = new Set<string>();
    for (const e of candidates) {
      if (e.deleted || !inRange(e.lastUpdatedMicros, query.lastUpdated)) continue;
      if (ids && (!ids.has(e.id) || seenIds.has(e.id))) continue;
      if (compartment && !compartment.some((p) => e.patients.includes(p))) continue;
      if (keys && !e.identifiers.some((k) => keys.has(k))) continue;
      if (ids) seenIds.add(e.id); // Only ids may repeat a candidate.
      matches.push(e);
    }
    const release = this.ctx.pin(matches);
    try {
      if (!where && !query.order) return await this.unfilteredPage(query, matches, rule, pace);
      // `_sort` on parameters whose keys hold the sort values: ordered without reading a body.
      const sortValues =
        !where && query.order
          ? postedSortValues(view.postedCodes(projectId, resourceType), search?.sort)
          : undefined;
      if (sortValues) {
        const window = new PageWindow<ResourceEntry>(query);
        const keyed = matches.map((entry) => ({ entry, id: entry.id, keys: sortValues(entry) }));
        await pacedSort(keyed, compareItems(query), pace);
        for (const item of keyed) window.offer(item, item.entry);
        const resources = await this.readBodies(window.page(), pace);
        return resourcePage(resources, totalOf(rule, window.total));
      }
      // A count alone needs no order.
      const countOnly = query.count !== undefined && query.count <= 0;
      if (query.order && !countOnly) return await this.orderedPage(query, matches, where, rule, pace);
      return await this.filteredPage(query, matches, where, rule, pace);
    } finally {
      release();
    }
  }

  /**
   * The page of matches that need no `where` and no `order`: every match is counted as it is
   * (the count costs nothing), only the page's entries are put in order and their bodies read.
   */
  private async unfilteredPage(
    query: ResourceQuery,
    matches: ResourceEntry[],
    rule: TotalRule,
    pace: SearchPace,
  ): Promise<ResourcePage> {
    if (!query.after && !query.before) {
      const offset = Math.max(0, query.offset ?? 0);
      const count = query.count === undefined ? Infinity : Math.max(0, query.count);
      const page =
        count === 0 ? [] : firstInOrder(matches, offset + count, compareItems(query)).slice(offset);
      const resources = await this.readBodies(page, pace);
      return resourcePage(resources, totalOf(rule, matches.length));
    }
    const window = new PageWindow<ResourceEntry>(query);
    await pacedSort(matches, compareItems(query), pace);
    for (const e of matches) window.offer(e, e);
    const resources = await this.readBodies(window.page(), pace);
    return resourcePage(resources, totalOf(rule, window.total));
  }

  /**
   * The bodies of `entries`, in order, read `BODY_SLICE` at a time with `pace` between slices: a
   * page without a count (what a chain or a `_has` reads of the other type) shares the event loop
   * and keeps to the search's deadline as a filtered one does.
   */
  private async readBodies(entries: readonly ResourceEntry[], pace: SearchPace): Promise<StoredResource[]> {
    const bodies: StoredResource[] = [];
    for (let i = 0; i < entries.length; i += BODY_SLICE) {
      if (i > 0) await pace.breathe();
      const slice = await Promise.all(entries.slice(i, i + BODY_SLICE).map((e) => this.ctx.readBody(e)));
      for (const body of slice) bodies.push(body);
    }
    return bodies;
  }

  /**
   * The page of an `order` by values read from the bodies: the sort values of every match (after
   * `where`) first, then the page's bodies read again. Counts every match on the way. Tested a few
   * milliseconds at a time (`pace`), so other requests are served meanwhile.
   */
  private async orderedPage(
    query: ResourceQuery,
    matches: ResourceEntry[],
    where: ResourceQuery['where'],
    rule: TotalRule,
    pace: SearchPace,
  ): Promise<ResourcePage> {
    const order = query.order!;
    let keyed: { entry: ResourceEntry; id: string; keys: SortValue[] }[] = [];
    for (let i = 0; i < matches.length; i += BODY_SLICE) {
      const slice = matches.slice(i, i + BODY_SLICE);
      const bodies = await Promise.all(slice.map((e) => this.ctx.readBody(e)));
      for (let k = 0; k < bodies.length; k++) {
        if (pace.due) await pace.breathe();
        const body = bodies[k]!;
        if (where && !where(body)) continue;
        const entry = slice[k]!;
        keyed.push({ entry, id: entry.id, keys: order.keys(body) });
      }
    }
    await pacedSort(keyed, compareItems(query), pace);
    const window = new PageWindow<ResourceEntry>(query);
    for (const item of keyed) window.offer(item, item.entry);
    keyed = [];
    const resources = await this.readBodies(window.page(), pace);
    return resourcePage(resources, totalOf(rule, window.total));
  }

  /**
   * The page of matches `where` decides, in the native order: bodies read slice by slice, the
   * page's kept as they pass. Reading stops once the page is complete and the count needs no
   * more (`none`, `estimate`: extrapolated from the candidates read; `accurate`: past its bound).
   * Tested a few milliseconds at a time (`pace`), as `orderedPage` is.
   */
  private async filteredPage(
    query: ResourceQuery,
    matches: ResourceEntry[],
    where: ResourceQuery['where'],
    rule: TotalRule,
    pace: SearchPace,
  ): Promise<ResourcePage> {
    const window = new PageWindow<StoredResource>(query);
    // Without a page to fill, the order does not matter.
    if (!window.countOnly) await pacedSort(matches, compareItems(query), pace);
    let examined = 0;
    while (examined < matches.length && !(window.full && countedEnough(rule, window.total))) {
      const slice = matches.slice(examined, examined + BODY_SLICE);
      const bodies = await Promise.all(slice.map((e) => this.ctx.readBody(e)));
      for (let k = 0; k < bodies.length; k++) {
        if (pace.due) await pace.breathe();
        const body = bodies[k]!;
        if (!where || where(body)) window.offer(slice[k]!, body);
      }
      examined += slice.length;
    }
    const total =
      rule.mode === 'estimate'
        ? extrapolated(window.total, examined, matches.length)
        : totalOf(rule, window.total);
    return resourcePage(window.page(), total);
  }
}
