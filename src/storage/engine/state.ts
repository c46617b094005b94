import type {
  ClientRecord,
  ExportJobRecord,
  MembershipRecord,
  ProjectRecord,
  SigningKeyRecord,
  UserRecord,
} from '../types.js';
import { assertNever } from '../assert-never.js';
import type { UserSortKey } from '../user-list.js';
import { userEmails } from '../user-list.js';
import { getOrCreate } from './map-entry.js';
import type { Mutation, ResourceEntry } from './mutation.js';
import { TypePostings, type SearchCandidates } from './postings.js';
import type { SearchRequest } from '../search-request.js';
import { UserOrders } from './user-order.js';

/**
 * A user attribute with an index: `name` is the lower-cased `userName`, `email` each lower-cased
 * `data.emails[].value`.
 */
export type UserIndex = 'name' | 'externalId' | 'profileId' | 'email';

/** Read access to the engine's state, committed or with pending writes on top. */
export interface StateView {
  project(id: string): ProjectRecord | undefined;
  projects(): Iterable<ProjectRecord>;
  user(projectId: string, id: string): UserRecord | undefined;
  userIds(projectId: string, index: UserIndex, value: string): string[];
  users(projectId: string): Iterable<UserRecord>;
  /** The users of a project in ascending `sortBy` order (see `UserSortKey`); do not change it. */
  sortedUsers(projectId: string, sortBy: UserSortKey): readonly UserRecord[];
  membership(projectId: string, id: string): MembershipRecord | undefined;
  memberships(projectId: string): Iterable<MembershipRecord>;
  client(id: string): ClientRecord | undefined;
  clients(): Iterable<ClientRecord>;
  signingKeys(): Iterable<SigningKeyRecord>;
  job(projectId: string, id: string): ExportJobRecord | undefined;
  jobs(): Iterable<ExportJobRecord>;
  once(key: string): number | undefined;
  /** The current entry (possibly a tombstone) of a resource. */
  resource(projectId: string, resourceType: string, id: string): ResourceEntry | undefined;
  /** Every entry (tombstones included) of a type. */
  resources(projectId: string, resourceType: string): Iterable<ResourceEntry>;
  /** Live entries in the compartment of a patient. */
  compartment(projectId: string, patientId: string): Iterable<ResourceEntry>;
  /** Live entries of a type with an identifier index key (see `identifierKeys`). */
  identified(projectId: string, resourceType: string, key: string): Iterable<ResourceEntry>;
  /**
   * Entries of a type (tombstones possibly included) holding every current match of `search`,
   * from the search postings (`exact` when they are its matches); undefined when they cannot
   * narrow it (then scan `resources`). With `among` (entries the caller narrowed the search to by
   * other means), exact answers are only those of them.
   */
  searched(
    projectId: string,
    resourceType: string,
    search: SearchRequest,
    among?: Iterable<ResourceEntry>,
  ): SearchCandidates | undefined;
  /** The parameters of a type whose search postings are built (a write posts its keys of these). */
  postedCodes(projectId: string, resourceType: string): ReadonlySet<string> | undefined;
}

export function userIndexValues(user: UserRecord, index: UserIndex): string[] {
  if (index === 'name') return [user.userName.toLowerCase()];
  if (index === 'externalId') return user.externalId === undefined ? [] : [user.externalId];
  if (index === 'email') return userEmails(user);
  return [user.profileId];
}

/** Shared by every index entry without patients or identifiers (an array made by `push` holds 17 slots). */
const NONE: readonly string[] = Object.freeze([]);

/**
 * Sets of index entries by key (a patient id, an identifier key) that keep each key string once:
 * `add` answers the string the map holds, which the entry then keeps instead of its own copy (often
 * a slice of a reference that held its whole text alive). An index of a million resources holds
 * one string per patient, not one per resource.
 */
class KeyedSets<T> {
  private readonly slots = new Map<string, { key: string; members: Set<T> }>();

  get(key: string): Set<T> | undefined {
    return this.slots.get(key)?.members;
  }

  /** Adds `member` under `key`; answers the key string the map keeps. */
  add(key: string, member: T): string {
    let slot = this.slots.get(key);
    if (!slot) {
      slot = { key, members: new Set() };
      this.slots.set(key, slot);
    }
    slot.members.add(member);
    return slot.key;
  }

  delete(key: string, member: T): void {
    const slot = this.slots.get(key);
    if (!slot) return;
    slot.members.delete(member);
    if (slot.members.size === 0) this.slots.delete(key);
  }
}

/** `keys` as the sets keep them, in an array of exactly their number (`NONE` when empty). */
function keptKeys<T>(keys: readonly string[], sets: KeyedSets<T>, member: T): readonly string[] {
  if (keys.length === 0) return NONE;
  const kept = new Array<string>(keys.length);
  for (let i = 0; i < keys.length; i++) kept[i] = sets.add(keys[i]!, member);
  return kept;
}

class ProjectData {
  readonly users = new Map<string, UserRecord>();
  readonly byName = new Map<string, string>();
  readonly byExternalId = new Map<string, string>();
  readonly byProfile = new Map<string, Set<string>>();
  readonly byEmail = new Map<string, Set<string>>();
  readonly orders = new UserOrders();
  readonly memberships = new Map<string, MembershipRecord>();
  readonly jobs = new Map<string, ExportJobRecord>();
  readonly resources = new Map<string, Map<string, ResourceEntry>>();
  /** patient id -> live entries in that patient's compartment. */
  readonly compartment = new KeyedSets<ResourceEntry>();
  /** type -> identifier key -> live entries with that key. */
  readonly identifiers = new Map<string, KeyedSets<ResourceEntry>>();
  /** type -> search postings of its live entries. */
  readonly postings = new Map<string, TypePostings>();
}

/** The committed state: plain maps with the secondary indexes kept up to date by `apply`. */
export class BaseState implements StateView {
  private readonly projectRecords = new Map<string, ProjectRecord>();
  private readonly data = new Map<string, ProjectData>();
  private readonly clientRecords = new Map<string, ClientRecord>();
  private readonly keyRecords = new Map<string, SigningKeyRecord>();
  private readonly onceValues = new Map<string, number>();
  private onceSizeAtPurge = 0;

  private get(projectId: string): ProjectData | undefined {
    return this.data.get(projectId);
  }

  private ensure(projectId: string): ProjectData {
    let data = this.data.get(projectId);
    if (!data) {
      data = new ProjectData();
      this.data.set(projectId, data);
    }
    return data;
  }

  /** Project ids that have a record or any data. */
  projectIds(): string[] {
    return [...new Set([...this.projectRecords.keys(), ...this.data.keys()])];
  }

  resourceTypes(projectId: string): string[] {
    return [...(this.get(projectId)?.resources.keys() ?? [])];
  }

  project(id: string): ProjectRecord | undefined {
    return this.projectRecords.get(id);
  }
  projects(): Iterable<ProjectRecord> {
    return this.projectRecords.values();
  }
  user(projectId: string, id: string): UserRecord | undefined {
    return this.get(projectId)?.users.get(id);
  }
  userIds(projectId: string, index: UserIndex, value: string): string[] {
    const data = this.get(projectId);
    if (!data) return [];
    if (index === 'profileId') return [...(data.byProfile.get(value) ?? [])];
    if (index === 'email') return [...(data.byEmail.get(value) ?? [])];
    const id = (index === 'name' ? data.byName : data.byExternalId).get(value);
    return id === undefined ? [] : [id];
  }
  users(projectId: string): Iterable<UserRecord> {
    return this.get(projectId)?.users.values() ?? [];
  }
  sortedUsers(projectId: string, sortBy: UserSortKey): readonly UserRecord[] {
    const data = this.get(projectId);
    return data ? data.orders.sorted(data.users, sortBy) : [];
  }
  membership(projectId: string, id: string): MembershipRecord | undefined {
    return this.get(projectId)?.memberships.get(id);
  }
  memberships(projectId: string): Iterable<MembershipRecord> {
    return this.get(projectId)?.memberships.values() ?? [];
  }
  client(id: string): ClientRecord | undefined {
    return this.clientRecords.get(id);
  }
  clients(): Iterable<ClientRecord> {
    return this.clientRecords.values();
  }
  signingKeys(): Iterable<SigningKeyRecord> {
    return this.keyRecords.values();
  }
  job(projectId: string, id: string): ExportJobRecord | undefined {
    return this.get(projectId)?.jobs.get(id);
  }
  *jobs(): Iterable<ExportJobRecord> {
    for (const data of this.data.values()) yield* data.jobs.values();
  }
  once(key: string): number | undefined {
    return this.onceValues.get(key);
  }
  /** Number of users of a project (constant time). */
  userCount(projectId: string): number {
    return this.get(projectId)?.users.size ?? 0;
  }

  /** Number of recorded one-time values, expired ones not yet purged included (constant time). */
  onceCount(): number {
    return this.onceValues.size;
  }

  /** Every recorded one-time value (for adapters that persist them). */
  onceEntries(): Iterable<[string, number]> {
    return this.onceValues.entries();
  }
  resource(projectId: string, resourceType: string, id: string): ResourceEntry | undefined {
    return this.get(projectId)?.resources.get(resourceType)?.get(id);
  }
  resources(projectId: string, resourceType: string): Iterable<ResourceEntry> {
    return this.get(projectId)?.resources.get(resourceType)?.values() ?? [];
  }
  compartment(projectId: string, patientId: string): Iterable<ResourceEntry> {
    return this.get(projectId)?.compartment.get(patientId)?.values() ?? [];
  }
  identified(projectId: string, resourceType: string, key: string): Iterable<ResourceEntry> {
    return this.get(projectId)?.identifiers.get(resourceType)?.get(key)?.values() ?? [];
  }

  searched(
    projectId: string,
    resourceType: string,
    search: SearchRequest,
    among?: Iterable<ResourceEntry>,
  ): SearchCandidates | undefined {
    const postings = this.get(projectId)?.postings.get(resourceType);
    const all = (): Iterable<ResourceEntry> => this.resources(projectId, resourceType);
    return postings ? postings.candidates(search, among, all) : { entries: [], exact: true };
  }

  postedCodes(projectId: string, resourceType: string): ReadonlySet<string> | undefined {
    const built = this.get(projectId)?.postings.get(resourceType)?.built;
    return built && built.size > 0 ? built : undefined;
  }

  /** The search postings of a type, if it has any. */
  postingsOf(projectId: string, resourceType: string): TypePostings | undefined {
    return this.get(projectId)?.postings.get(resourceType);
  }

  /** The search postings of a type (made when missing: a parameter may be built before any write). */
  typePostings(projectId: string, resourceType: string): TypePostings {
    return getOrCreate(this.ensure(projectId).postings, resourceType, () => new TypePostings());
  }

  /** Drops expired one-time values once the map has doubled since the last purge. */
  purgeOnce(now: number): void {
    if (this.onceValues.size < 1024 || this.onceValues.size < this.onceSizeAtPurge * 2) return;
    for (const [key, expiresAt] of this.onceValues) if (expiresAt <= now) this.onceValues.delete(key);
    this.onceSizeAtPurge = this.onceValues.size;
  }

  /** Applies a committed mutation; `ref` is the adapter's locator for resource bodies. */
  apply(m: Mutation, ref?: unknown): void {
    switch (m.kind) {
      case 'project-put':
        this.projectRecords.set(m.record.id, m.record);
        return;
      case 'project-delete':
        this.projectRecords.delete(m.id);
        this.data.delete(m.id);
        for (const [id, client] of this.clientRecords)
          if (client.projectId === m.id) this.clientRecords.delete(id);
        return;
      case 'user-put': {
        const data = this.ensure(m.projectId);
        const old = data.users.get(m.record.id);
        this.unindexUser(data, m.record.id);
        data.users.set(m.record.id, m.record);
        data.orders.put(old, m.record);
        for (const email of userEmails(m.record))
          getOrCreate(data.byEmail, email, () => new Set()).add(m.record.id);
        data.byName.set(m.record.userName.toLowerCase(), m.record.id);
        if (m.record.externalId !== undefined) data.byExternalId.set(m.record.externalId, m.record.id);
        const ids = getOrCreate(data.byProfile, m.record.profileId, () => new Set());
        ids.add(m.record.id);
        return;
      }
      case 'user-delete': {
        const data = this.get(m.projectId);
        const old = data?.users.get(m.id);
        if (data && old) {
          this.unindexUser(data, m.id);
          data.users.delete(m.id);
          data.orders.delete(old);
        }
        return;
      }
      case 'membership-put':
        this.ensure(m.projectId).memberships.set(m.record.id, m.record);
        return;
      case 'membership-delete':
        this.get(m.projectId)?.memberships.delete(m.id);
        return;
      case 'client-put':
        this.clientRecords.set(m.record.id, m.record);
        return;
      case 'signing-key-put':
        this.keyRecords.set(m.record.kid, m.record);
        return;
      case 'export-job-put':
        this.ensure(m.record.projectId).jobs.set(m.record.id, m.record);
        return;
      case 'export-job-delete':
        this.get(m.projectId)?.jobs.delete(m.id);
        return;
      case 'one-time-value-put':
        this.onceValues.set(m.key, m.expiresAt);
        return;
      case 'resource-put':
      case 'resource-delete': {
        // One literal (not a rest copy then a spread): an index entry is made for every write.
        const e = m.entry;
        this.putEntry(m.projectId, {
          resourceType: e.resourceType,
          id: e.id,
          versionId: e.versionId,
          lastUpdatedMicros: e.lastUpdatedMicros,
          deleted: e.deleted,
          patients: e.patients,
          identifiers: e.identifiers,
          postings: e.postings,
          ref,
        });
        return;
      }
      default:
        assertNever(m);
    }
  }

  /** Sets the current entry of a resource (used by `apply` and by adapters loading a store). */
  putEntry(projectId: string, entry: ResourceEntry): void {
    const data = this.ensure(projectId);
    const byId = getOrCreate(data.resources, entry.resourceType, () => new Map());
    const previous = byId.get(entry.id);
    const byKey = getOrCreate(data.identifiers, entry.resourceType, () => new KeyedSets());
    const postings = getOrCreate(data.postings, entry.resourceType, () => new TypePostings());
    if (previous && !previous.deleted) {
      for (const patient of previous.patients) data.compartment.delete(patient, previous);
      for (const key of previous.identifiers) byKey.delete(key, previous);
      postings.remove(previous);
    }
    byId.set(entry.id, entry);
    if (entry.deleted) {
      entry.patients = NONE;
      entry.identifiers = NONE;
      entry.postings = undefined;
    } else {
      entry.patients = keptKeys(entry.patients, data.compartment, entry);
      entry.identifiers = keptKeys(entry.identifiers, byKey, entry);
      postings.add(entry);
    }
  }

  private unindexUser(data: ProjectData, id: string): void {
    const old = data.users.get(id);
    if (!old) return;
    const name = old.userName.toLowerCase();
    if (data.byName.get(name) === id) data.byName.delete(name);
    if (old.externalId !== undefined && data.byExternalId.get(old.externalId) === id) {
      data.byExternalId.delete(old.externalId);
    }
    const ids = data.byProfile.get(old.profileId);
    ids?.delete(id);
    if (ids?.size === 0) data.byProfile.delete(old.profileId);
    for (const email of userEmails(old)) {
      const holders = data.byEmail.get(email);
      holders?.delete(id);
      if (holders?.size === 0) data.byEmail.delete(email);
    }
  }
}
