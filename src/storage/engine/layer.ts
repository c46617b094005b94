import type {
  ClientRecord,
  ExportJobRecord,
  MembershipRecord,
  ProjectRecord,
  SigningKeyRecord,
  UserRecord,
} from '../types.js';
import { assertNever } from '../assert-never.js';
import { getOrCreate } from './map-entry.js';
import { pairKey, type Mutation, type ResourceEntry } from './mutation.js';
import { userIndexValues, type StateView, type UserIndex } from './state.js';
import type { SearchCandidates } from './postings.js';
import type { SearchRequest } from '../search-request.js';
import { compareUserPositions, userPosition, type UserSortKey } from '../user-list.js';

type Scoped<V> = Map<string, Map<string, V | null>>;

function scopedGet<V>(map: Scoped<V>, scope: string, id: string): V | null | undefined {
  return map.get(scope)?.get(id);
}

function scopedSet<V>(map: Scoped<V>, scope: string, id: string, value: V | null): void {
  const inner = getOrCreate(map, scope, () => new Map());
  inner.set(id, value);
}

/**
 * Pending writes on top of another view (a batch or a transaction). Lookups see the layer's own
 * changes first; `mutations` lists them in order for the commit.
 */
export class Layer implements StateView {
  readonly mutations: Mutation[] = [];
  private readonly projectRecords = new Map<string, ProjectRecord | null>();
  /** Projects deleted in this layer: the parent's data of these is hidden. */
  private readonly dropped = new Set<string>();
  private readonly userRecords: Scoped<UserRecord> = new Map();
  private readonly membershipRecords: Scoped<MembershipRecord> = new Map();
  private readonly jobRecords: Scoped<ExportJobRecord> = new Map();
  private readonly clientRecords = new Map<string, ClientRecord>();
  private readonly keyRecords = new Map<string, SigningKeyRecord>();
  private readonly onceValues = new Map<string, number>();
  /** project -> type -> id -> entry. */
  private readonly resourceEntries = new Map<string, Map<string, Map<string, ResourceEntry>>>();

  /** project -> `index\0value` -> ids of this layer's own users with that value. */
  private readonly userIndex = new Map<string, Map<string, Set<string>>>();

  constructor(readonly parent: StateView) {}

  private indexUser(projectId: string, user: UserRecord | null | undefined, add: boolean): void {
    if (!user) return;
    const byKey = getOrCreate(this.userIndex, projectId, () => new Map());
    for (const index of ['name', 'externalId', 'profileId', 'email'] as const) {
      for (const value of userIndexValues(user, index))
        this.indexUserValue(byKey, user.id, index, value, add);
    }
  }

  private indexUserValue(
    byKey: Map<string, Set<string>>,
    id: string,
    index: UserIndex,
    value: string,
    add: boolean,
  ): void {
    const k = pairKey(index, value);
    let ids = byKey.get(k);
    if (add) {
      if (!ids) byKey.set(k, (ids = new Set()));
      ids.add(id);
    } else {
      ids?.delete(id);
      if (ids?.size === 0) byKey.delete(k);
    }
  }

  private visible(projectId: string): boolean {
    return !this.dropped.has(projectId);
  }

  project(id: string): ProjectRecord | undefined {
    const own = this.projectRecords.get(id);
    if (own !== undefined) return own ?? undefined;
    return this.parent.project(id);
  }
  *projects(): Iterable<ProjectRecord> {
    for (const p of this.parent.projects()) if (!this.projectRecords.has(p.id)) yield p;
    for (const p of this.projectRecords.values()) if (p) yield p;
  }
  user(projectId: string, id: string): UserRecord | undefined {
    const own = scopedGet(this.userRecords, projectId, id);
    if (own !== undefined) return own ?? undefined;
    return this.visible(projectId) ? this.parent.user(projectId, id) : undefined;
  }
  userIds(projectId: string, index: UserIndex, value: string): string[] {
    const own = this.userRecords.get(projectId);
    const out: string[] = [...(this.userIndex.get(projectId)?.get(pairKey(index, value)) ?? [])];
    if (this.visible(projectId)) {
      for (const id of this.parent.userIds(projectId, index, value)) if (!own?.has(id)) out.push(id);
    }
    return out;
  }
  users(projectId: string): Iterable<UserRecord> {
    return this.scopedList(
      this.userRecords,
      projectId,
      () => this.parent.users(projectId),
      (u) => u.id,
    );
  }
  sortedUsers(projectId: string, sortBy: UserSortKey): readonly UserRecord[] {
    // Without changes of its own to the project's users, the layer's order is its parent's.
    if (this.visible(projectId) && !this.userRecords.has(projectId))
      return this.parent.sortedUsers(projectId, sortBy);
    const keyed = [...this.users(projectId)].map((u) => ({ u, at: userPosition(u, sortBy) }));
    return keyed.sort((a, b) => compareUserPositions(a.at, b.at)).map((k) => k.u);
  }
  membership(projectId: string, id: string): MembershipRecord | undefined {
    const own = scopedGet(this.membershipRecords, projectId, id);
    if (own !== undefined) return own ?? undefined;
    return this.visible(projectId) ? this.parent.membership(projectId, id) : undefined;
  }
  memberships(projectId: string): Iterable<MembershipRecord> {
    return this.scopedList(
      this.membershipRecords,
      projectId,
      () => this.parent.memberships(projectId),
      (m) => m.id,
    );
  }
  client(id: string): ClientRecord | undefined {
    const own = this.clientRecords.get(id);
    if (own) return own;
    const parent = this.parent.client(id);
    return parent && parent.projectId !== null && this.dropped.has(parent.projectId) ? undefined : parent;
  }
  *clients(): Iterable<ClientRecord> {
    for (const c of this.parent.clients()) {
      if (this.clientRecords.has(c.id)) continue;
      if (c.projectId !== null && this.dropped.has(c.projectId)) continue;
      yield c;
    }
    yield* this.clientRecords.values();
  }
  *signingKeys(): Iterable<SigningKeyRecord> {
    for (const k of this.parent.signingKeys()) if (!this.keyRecords.has(k.kid)) yield k;
    yield* this.keyRecords.values();
  }
  job(projectId: string, id: string): ExportJobRecord | undefined {
    const own = scopedGet(this.jobRecords, projectId, id);
    if (own !== undefined) return own ?? undefined;
    return this.visible(projectId) ? this.parent.job(projectId, id) : undefined;
  }
  *jobs(): Iterable<ExportJobRecord> {
    for (const j of this.parent.jobs()) {
      if (this.dropped.has(j.projectId) || this.jobRecords.get(j.projectId)?.has(j.id)) continue;
      yield j;
    }
    for (const inner of this.jobRecords.values()) for (const j of inner.values()) if (j) yield j;
  }
  once(key: string): number | undefined {
    return this.onceValues.get(key) ?? this.parent.once(key);
  }
  resource(projectId: string, resourceType: string, id: string): ResourceEntry | undefined {
    const own = this.resourceEntries.get(projectId)?.get(resourceType)?.get(id);
    if (own) return own;
    return this.visible(projectId) ? this.parent.resource(projectId, resourceType, id) : undefined;
  }
  *resources(projectId: string, resourceType: string): Iterable<ResourceEntry> {
    const own = this.resourceEntries.get(projectId)?.get(resourceType);
    if (this.visible(projectId)) {
      for (const e of this.parent.resources(projectId, resourceType)) if (!own?.has(e.id)) yield e;
    }
    if (own) yield* own.values();
  }
  *compartment(projectId: string, patientId: string): Iterable<ResourceEntry> {
    const own = this.resourceEntries.get(projectId);
    if (this.visible(projectId)) {
      for (const e of this.parent.compartment(projectId, patientId)) {
        if (!own?.get(e.resourceType)?.has(e.id)) yield e;
      }
    }
    if (own) {
      for (const byId of own.values()) {
        for (const e of byId.values()) if (!e.deleted && e.patients.includes(patientId)) yield e;
      }
    }
  }
  *identified(projectId: string, resourceType: string, key: string): Iterable<ResourceEntry> {
    const own = this.resourceEntries.get(projectId)?.get(resourceType);
    if (this.visible(projectId)) {
      for (const e of this.parent.identified(projectId, resourceType, key)) if (!own?.has(e.id)) yield e;
    }
    if (own) for (const e of own.values()) if (!e.deleted && e.identifiers.includes(key)) yield e;
  }

  /** The parent's candidates this layer did not change, then every entry of the type it wrote. */
  searched(
    projectId: string,
    resourceType: string,
    search: SearchRequest,
    among?: Iterable<ResourceEntry>,
  ): SearchCandidates | undefined {
    const own = this.resourceEntries.get(projectId)?.get(resourceType);
    if (!this.visible(projectId)) return { entries: own?.values() ?? [], exact: false };
    const parent = this.parent.searched(projectId, resourceType, search, among);
    if (!parent || !own) return parent;
    // This layer's own entries are not posted: `where` decides on them.
    return {
      entries: (function* () {
        for (const e of parent.entries) if (!own.has(e.id)) yield e;
        yield* own.values();
      })(),
      exact: false,
    };
  }

  postedCodes(projectId: string, resourceType: string): ReadonlySet<string> | undefined {
    return this.parent.postedCodes(projectId, resourceType);
  }

  private *scopedList<V>(
    map: Scoped<V>,
    projectId: string,
    parent: () => Iterable<V>,
    idOf: (v: V) => string,
  ): Iterable<V> {
    const own = map.get(projectId);
    if (this.visible(projectId)) for (const v of parent()) if (!own?.has(idOf(v))) yield v;
    if (own) for (const v of own.values()) if (v) yield v;
  }

  /** Records a mutation; later lookups through this layer see it. */
  apply(m: Mutation): void {
    this.mutations.push(m);
    switch (m.kind) {
      case 'project-put':
        this.projectRecords.set(m.record.id, m.record);
        return;
      case 'project-delete':
        this.projectRecords.set(m.id, null);
        this.dropped.add(m.id);
        this.userRecords.delete(m.id);
        this.userIndex.delete(m.id);
        this.membershipRecords.delete(m.id);
        this.jobRecords.delete(m.id);
        this.resourceEntries.delete(m.id);
        for (const [id, c] of this.clientRecords) if (c.projectId === m.id) this.clientRecords.delete(id);
        return;
      case 'user-put':
        this.indexUser(m.projectId, scopedGet(this.userRecords, m.projectId, m.record.id), false);
        scopedSet(this.userRecords, m.projectId, m.record.id, m.record);
        this.indexUser(m.projectId, m.record, true);
        return;
      case 'user-delete':
        this.indexUser(m.projectId, scopedGet(this.userRecords, m.projectId, m.id), false);
        scopedSet(this.userRecords, m.projectId, m.id, null);
        return;
      case 'membership-put':
        scopedSet(this.membershipRecords, m.projectId, m.record.id, m.record);
        return;
      case 'membership-delete':
        scopedSet(this.membershipRecords, m.projectId, m.id, null);
        return;
      case 'client-put':
        this.clientRecords.set(m.record.id, m.record);
        return;
      case 'signing-key-put':
        this.keyRecords.set(m.record.kid, m.record);
        return;
      case 'export-job-put':
        scopedSet(this.jobRecords, m.record.projectId, m.record.id, m.record);
        return;
      case 'export-job-delete':
        scopedSet(this.jobRecords, m.projectId, m.id, null);
        return;
      case 'one-time-value-put':
        this.onceValues.set(m.key, m.expiresAt);
        return;
      case 'resource-put':
      case 'resource-delete': {
        const byType = getOrCreate(this.resourceEntries, m.projectId, () => new Map());
        const byId = getOrCreate(byType, m.entry.resourceType, () => new Map());
        byId.set(m.entry.id, m.entry);
        return;
      }
      default:
        assertNever(m);
    }
  }

  /**
   * Forgets every mutation after the first `count` (an operation that failed part-way). Rebuilds
   * the layer, so it costs the layer's size: cheaper overall than a child layer per operation,
   * as failures are rare.
   */
  rollbackTo(count: number): void {
    if (count >= this.mutations.length) return;
    const kept = this.mutations.slice(0, count);
    this.mutations.length = 0;
    this.projectRecords.clear();
    this.dropped.clear();
    this.userRecords.clear();
    this.userIndex.clear();
    this.membershipRecords.clear();
    this.jobRecords.clear();
    this.clientRecords.clear();
    this.keyRecords.clear();
    this.onceValues.clear();
    this.resourceEntries.clear();
    for (const m of kept) this.apply(m);
  }
}
