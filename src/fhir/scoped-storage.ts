import { dataAccess, limitCompartment, type DataAccess } from '../auth/data-access.js';
import type { ResourceAction } from '../auth/access.js';
import type { Principal } from '../http/principal.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type {
  FhirResource,
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
 * `storage` as a SMART user sees it (`access`, see src/auth/data-access.ts): every resource read,
 * search and write of the FHIR interactions, Bundles, `_include`, chains and `$everything` goes
 * through it, so none can step outside the user's patients.
 *
 * - Searches gain the compartment restriction (the store answers it from its compartment index: SQL
 *   on PostgreSQL), so totals and paging stay right.
 * - A read of a resource outside it is a 404, as if it did not exist (the read of a deleted one is
 *   still a 410).
 * - A write whose current resource is outside it is a 404 for the same reason; one that would put a
 *   resource outside it (a create, or the new content of an update) is a 403.
 *
 * A `transaction` of the view runs in a view of the transaction. Every other operation (projects,
 * users, clients; history, whose routes apply the same limits) passes through unchanged.
 */
export function scopedStorage<T extends StorageOperations>(storage: T, access: DataAccess): T {
  if ((storage as { [SCOPED]?: true })[SCOPED]) return storage;

  const outside = (type: string, id: string): NotFoundError => new NotFoundError(`${type}/${id} not found`);

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

  const overrides: Partial<StorageOperations> = {
    async readResource(projectId: string, type: string, id: string): Promise<StoredResource> {
      const resource = await storage.readResource(projectId, type, id);
      if (!(await access.permits(resource, 'read'))) throw outside(type, id);
      return resource;
    },
    async searchResources(projectId: string, type: string, query: ResourceQuery = {}): Promise<ResourcePage> {
      const limit = await access.limit(type, 'search');
      if (limit === undefined) return storage.searchResources(projectId, type, query);
      const compartment = limitCompartment(query.compartment, limit);
      // A chain or `_has` must find its other resources within reach too: `where` tests them through
      // this view (its resolver), so a store must not skip it on its own indexes' word.
      const reaching = query.search?.filters.some((f) => f.kind !== 'parameter') === true;
      return storage.searchResources(projectId, type, {
        ...query,
        ...(compartment ? { compartment } : {}),
        ...(reaching ? { whereIsSearch: false } : {}),
      });
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
  };

  // A transaction of the view is one of the store, seen through the same limits.
  const transaction = (fn: (tx: StorageOperations) => Promise<unknown>): Promise<unknown> =>
    (storage as unknown as Storage).transaction((tx) => fn(scopedStorage(tx, access)));

  return new Proxy(storage, {
    get(target, property) {
      if (property === SCOPED) return true;
      if (property === 'transaction' && typeof (target as Partial<Storage>).transaction === 'function')
        return transaction;
      if (typeof property === 'string' && Object.hasOwn(overrides, property))
        return overrides[property as keyof StorageOperations];
      const value: unknown = Reflect.get(target, property);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
