import {
  dataAccess,
  limitCompartment,
  type DataAccess,
  type PatientLimit,
} from '../auth/access/data-access.js';
import type { ResourceAction } from '../auth/access/access.js';
import { PlatformError } from '../errors.js';
import type { Principal } from '../http/principal.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import { reachOf, typeSearch } from '../storage/search-request.js';
import { typesReadByFilters } from '../search/types-read.js';
import type {
  FhirResource,
  HistoryEntry,
  HistoryPage,
  HistoryQuery,
  ResourcePage,
  ResourceQuery,
  ResourceWrite,
  Storage,
  StorageOperations,
  StoredResource,
  WriteOptions,
  WriteResult,
} from '../storage/types.js';
import { R4_PATIENT_COMPARTMENT } from './compartment.js';
import { isRefused, scopedMemberRule, type CheckedMember } from './scoped-storage-rules.js';

/**
 * The data access rule of `principal` in `projectId` (undefined unless it is a SMART user), with the
 * R4 Patient compartment (the one the stores index) and the user's profile read from `storage`.
 * Build one per request: it reads a RelatedPerson's profile once.
 */
export function userDataAccess(
  principal: Principal,
  storage: Pick<StorageOperations, 'readResource'>,
  projectId: string,
): DataAccess | undefined {
  return dataAccess(principal, R4_PATIENT_COMPARTMENT, async (type, id) => {
    try {
      return await storage.readResource(projectId, type, id);
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  });
}

/** Marks a view this module built, so that a transaction of it is not wrapped twice. */
const SCOPED = Symbol('scoped storage');

/**
 * The entries of a history page a SMART user may see: versions within its patients' compartments
 * (`read` for a resource's history, `search` for a type's or the project's). Deletions carry no
 * content to place in a compartment, so they are left out.
 */
export async function permittedEntries(
  access: DataAccess,
  entries: HistoryEntry[],
  action: 'read' | 'search',
): Promise<HistoryEntry[]> {
  const kept: HistoryEntry[] = [];
  for (const entry of entries) {
    if (entry.resource && (await access.permits(entry.resource, action))) kept.push(entry);
  }
  return kept;
}

/**
 * `storage` as a SMART user sees it (`access`, see src/auth/data-access.ts): every resource read,
 * search and write of the FHIR interactions, Bundles, `_include`, chains, `$everything` and history
 * goes through it, so none can step outside the user's patients.
 *
 * - Searches gain the compartment restriction (the store answers it from its compartment index: SQL
 *   on PostgreSQL), so totals and paging stay right, and the reach of their chains and `_has`
 *   (`SearchRequest.reach`: each other type they read bounded to the user's patients for it).
 * - A read of a resource outside it is a 404, as if it did not exist (the read of a deleted one is
 *   still a 410); so is a version read (vread) of a version outside it.
 * - A history page keeps only the versions within it (without deletions; without `total` when
 *   some were left out).
 * - A write whose current resource is outside it is a 404 for the same reason; one that would put a
 *   resource outside it (a create, or the new content of an update) is a 403.
 * - A `transaction` of the view runs in a view of the transaction.
 *
 * It fails closed: every other member of `Storage` either passes through for a stated reason or is
 * refused (`SCOPED_MEMBER_RULES`, which the compiler keeps complete), and anything `Storage` does
 * not define (an adapter's own members) is refused too: reading it throws a `PlatformError`
 * (`ERR_INTERNAL`) rather than handing the store out unchecked.
 */
export function scopedStorage<T extends StorageOperations>(storage: T, access: DataAccess): T {
  if ((storage as { [SCOPED]?: true })[SCOPED]) return storage;
  return guardedView(storage, checkedMembers(storage as unknown as Storage, access));
}

/**
 * `query` limited to what the user reaches (`access`), in its search only: the compartment of the
 * search narrowed to the user's patients for the type (`limit`, when the type is limited; a search
 * of the type without filters when it has none), and each other type its chains and `_has` read
 * bounded in `reach` to the user's patients for that type, so that the store (in SQL on
 * PostgreSQL) never matches through a resource outside it. Unchanged when nothing is limited.
 */
async function withinReach(
  type: string,
  query: ResourceQuery,
  limit: PatientLimit,
  access: DataAccess,
): Promise<ResourceQuery> {
  const own = query.search?.resourceType === type ? query.search : undefined;
  const reach = { ...own?.reach };
  for (const read of typesReadByFilters(own?.filters ?? [])) {
    const bound = await access.limit(read, 'search');
    if (bound === undefined) continue;
    reach[read] = { compartment: 'Patient', ids: limitCompartment(reachOf(own, read)?.ids, bound) ?? [] };
  }
  const reached = Object.keys(reach).length > 0 ? { reach } : {};
  if (limit === undefined) return own && reached.reach ? { ...query, search: { ...own, ...reached } } : query;
  const search = own ?? typeSearch(type);
  const compartment = limitCompartment(search.compartment?.ids, limit) ?? [];
  return {
    ...query,
    search: { ...search, compartment: { compartment: 'Patient', ids: compartment }, ...reached },
  };
}

/** 404 for what lies outside the user's reach: as if it did not exist. */
function outside(type: string, id: string): NotFoundError {
  return new NotFoundError(`${type}/${id} not found`);
}

/** The members of the view that apply the user's limits, over `storage`. */
function checkedMembers(storage: Storage, access: DataAccess): Pick<Storage, CheckedMember> {
  const { checkWrite, checkDelete } = writeChecks(storage, access);
  return {
    async readResource(projectId: string, type: string, id: string): Promise<StoredResource> {
      const resource = await storage.readResource(projectId, type, id);
      if (!(await access.permits(resource, 'read'))) throw outside(type, id);
      return resource;
    },
    async searchResources(projectId: string, type: string, query: ResourceQuery = {}): Promise<ResourcePage> {
      const limit = await access.limit(type, 'search');
      return storage.searchResources(projectId, type, await withinReach(type, query, limit, access));
    },
    async createResource(projectId: string, resource: FhirResource): Promise<StoredResource> {
      // A create's id is the server's: there is no current resource to check.
      if (!(await access.permits(resource, 'create')))
        throw new FhirError(403, 'forbidden', `Not allowed to create this ${resource.resourceType}`);
      return storage.createResource(projectId, resource);
    },
    async updateResource(
      projectId: string,
      resource: FhirResource & { id: string },
      options?: WriteOptions,
    ): Promise<{ resource: StoredResource; created: boolean }> {
      await checkWrite(projectId, resource, 'update');
      return storage.updateResource(projectId, resource, options);
    },
    async deleteResource(projectId: string, type: string, id: string, options?: WriteOptions): Promise<void> {
      await checkDelete(projectId, type, id);
      return storage.deleteResource(projectId, type, id, options);
    },
    async writeResources(projectId: string, writes: ResourceWrite[]): Promise<WriteResult[]> {
      for (const write of writes) {
        if (write.op === 'delete') await checkDelete(projectId, write.resourceType, write.id);
        else if (write.op === 'update') await checkWrite(projectId, write.resource, 'update');
        else {
          const { id: _id, ...created } = write.resource;
          await checkWrite(projectId, created, 'create');
        }
      }
      return storage.writeResources(projectId, writes);
    },
    async readResourceVersion(
      projectId: string,
      type: string,
      id: string,
      versionId: string,
    ): Promise<StoredResource> {
      const resource = await storage.readResourceVersion(projectId, type, id, versionId);
      if (!(await access.permits(resource, 'read')))
        throw new NotFoundError(`${type}/${id} has no version ${versionId}`);
      return resource;
    },
    async readHistory(projectId: string, query: HistoryQuery): Promise<HistoryPage> {
      const page = await storage.readHistory(projectId, query);
      const action = query.id !== undefined ? 'read' : 'search';
      const entries = await permittedEntries(access, page.entries, action);
      if (entries.length === page.entries.length) return page;
      // A total would count the versions left out.
      const { total: _total, ...rest } = page;
      return { ...rest, entries };
    },
    // Only the types whose search reaches the patient (the view of the walk's searches): the others
    // would answer nothing through the view anyway.
    async compartmentTypes(projectId: string, patientId: string): Promise<string[]> {
      const kept: string[] = [];
      for (const type of await storage.compartmentTypes!(projectId, patientId)) {
        const limit = await access.limit(type, 'search');
        if (limit === undefined || limit.includes(patientId)) kept.push(type);
      }
      return kept;
    },
    // A transaction of the view is one of the store, seen through the same limits.
    transaction<R>(fn: (tx: StorageOperations) => Promise<R>): Promise<R> {
      return storage.transaction((tx) => fn(scopedStorage(tx, access)));
    },
  };
}

/** The checks of a write: on the current resource (if any) and on what the write would store. */
function writeChecks(storage: StorageOperations, access: DataAccess) {
  /** The current resource, unless absent (a create) or deleted. */
  const current = async (
    projectId: string,
    type: string,
    id: string,
  ): Promise<StoredResource | undefined> => {
    try {
      return await storage.readResource(projectId, type, id);
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  };

  const checkWrite = async (
    projectId: string,
    resource: FhirResource,
    action: ResourceAction,
  ): Promise<void> => {
    if (resource.id !== undefined) {
      const existing = await current(projectId, resource.resourceType, resource.id);
      if (existing && !(await access.permits(existing, 'update')))
        throw outside(resource.resourceType, resource.id);
    }
    if (!(await access.permits(resource, action)))
      throw new FhirError(
        403,
        'forbidden',
        `The access token does not cover this ${resource.resourceType}: it would be outside the patients it may see`,
      );
  };

  const checkDelete = async (projectId: string, type: string, id: string): Promise<void> => {
    const existing = await current(projectId, type, id);
    if (existing && !(await access.permits(existing, 'delete'))) throw outside(type, id);
  };

  return { checkWrite, checkDelete };
}

/** Thrown on reading a member the view refuses (a bug of the caller, never the user's doing). */
function refusal(name: string, reason: string): PlatformError {
  return new PlatformError('ERR_INTERNAL', `A SMART user's view of the store refuses ${name}: ${reason}`);
}

/**
 * The view itself: a proxy over an empty object (so that no trap falls back to the store), whose
 * members follow `SCOPED_MEMBER_RULES`. A checked or passing member the store does not have (the
 * history of a transaction view) reads as undefined, as on the store.
 */
function guardedView<T extends StorageOperations>(storage: T, checked: Pick<Storage, CheckedMember>): T {
  const member = (name: string): unknown => {
    const rule = scopedMemberRule(name);
    if (rule === undefined) throw refusal(name, 'not a member of the Storage contract');
    if (isRefused(rule)) throw refusal(name, rule.refused);
    const value: unknown = Reflect.get(storage, name);
    if (value === undefined) return undefined;
    if (rule === 'checked') return checked[name as CheckedMember];
    return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(storage) : value;
  };
  const readOnly = (): never => {
    throw new PlatformError('ERR_INTERNAL', "A SMART user's view of the store is read-only");
  };
  return new Proxy(Object.create(null) as T, {
    get: (_target, property) => {
      if (property === SCOPED) return true;
      // Symbols (inspection, coercion) name no member of the contract.
      return typeof property === 'string' ? member(property) : undefined;
    },
    has: (_target, property) => {
      if (typeof property !== 'string') return property === SCOPED;
      return !isRefused(scopedMemberRule(property)) && property in storage;
    },
    set: readOnly,
    defineProperty: readOnly,
    deleteProperty: readOnly,
  });
}
