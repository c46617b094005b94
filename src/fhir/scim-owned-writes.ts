import { isScimManaged } from '../common/scim-managed.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type {
  FhirResource,
  ResourceWrite,
  Storage,
  StorageOperations,
  StoredResource,
  WriteOptions,
  WriteResult,
} from '../storage/types.js';

/**
 * How the FHIR router's store answers one member of `Storage`: `'guarded'`, its own version that
 * refuses writes to what SCIM owns; `'passes'`, the store's member (it writes no FHIR resource).
 * `satisfies Record<keyof Storage, …>` makes the compiler refuse a `Storage` member added without a
 * rule here, so that a new way to write resources cannot bypass the guard.
 */
const SCIM_OWNED_RULES = {
  createResource: 'guarded',
  updateResource: 'guarded',
  deleteResource: 'guarded',
  writeResources: 'guarded',
  transaction: 'guarded',
  readResource: 'passes',
  searchResources: 'passes',
  readResourceVersion: 'passes',
  readHistory: 'passes',
  compartmentTypes: 'passes',
  createProject: 'passes',
  readProject: 'passes',
  updateProject: 'passes',
  deleteProject: 'passes',
  listProjects: 'passes',
  createUser: 'passes',
  readUser: 'passes',
  updateUser: 'passes',
  deleteUser: 'passes',
  findUsers: 'passes',
  listUsers: 'passes',
  createMembership: 'passes',
  listMemberships: 'passes',
  deleteMembership: 'passes',
  createClient: 'passes',
  readClient: 'passes',
  listClients: 'passes',
  updateClient: 'passes',
  listSigningKeys: 'passes',
  saveSigningKey: 'passes',
  useOnce: 'passes',
  failureCounts: 'passes',
  grants: 'passes',
  createExportJob: 'passes',
  readExportJob: 'passes',
  updateExportJob: 'passes',
  deleteExportJob: 'passes',
  listExportJobs: 'passes',
  exportSnapshot: 'passes',
  releaseSnapshot: 'passes',
  exportReader: 'passes',
  descriptor: 'passes',
  exportFiles: 'passes',
  exportQueue: 'passes',
  ping: 'passes',
  close: 'passes',
} as const satisfies Record<keyof Storage, 'guarded' | 'passes'>;

type GuardedMember = {
  [K in keyof typeof SCIM_OWNED_RULES]: (typeof SCIM_OWNED_RULES)[K] extends 'guarded' ? K : never;
}[keyof typeof SCIM_OWNED_RULES];

/** The answer to a FHIR write of a resource SCIM owns: 409, naming the owner. */
function ownedByScim(type: string, id: string | undefined): FhirError {
  const what = id === undefined ? `This ${type}` : `${type}/${id}`;
  return new FhirError(
    409,
    'conflict',
    `${what} is managed by the identity provider through SCIM: FHIR clients may read it, not change it`,
  );
}

/**
 * The checks of the writes: of the content written (a resource carrying the SCIM tag is only ever
 * written by the SCIM router), and of the current version of a `Group` updated or deleted (the only
 * type SCIM owns: no other type's write pays a read). A failed read other than an absent resource
 * refuses the write: the check fails closed.
 */
function ownedChecks(storage: StorageOperations) {
  const checkContent = (resource: FhirResource): void => {
    if (isScimManaged(resource)) throw ownedByScim(resource.resourceType, resource.id);
  };
  const checkCurrent = async (projectId: string, type: string, id: string): Promise<void> => {
    if (type !== 'Group') return;
    let current: StoredResource;
    try {
      current = await storage.readResource(projectId, type, id);
    } catch (error) {
      if (error instanceof NotFoundError) return;
      throw error;
    }
    if (isScimManaged(current)) throw ownedByScim(type, id);
  };
  const checkWrite = async (projectId: string, write: ResourceWrite): Promise<void> => {
    if (write.op === 'delete') return checkCurrent(projectId, write.resourceType, write.id);
    checkContent(write.resource);
    if (write.op === 'update') await checkCurrent(projectId, write.resource.resourceType, write.resource.id);
  };
  return { checkContent, checkCurrent, checkWrite };
}

/** The guarded members over `storage`. */
function guardedMembers(storage: Storage): Pick<Storage, GuardedMember> {
  const { checkContent, checkCurrent, checkWrite } = ownedChecks(storage);
  return {
    async createResource(projectId: string, resource: FhirResource): Promise<StoredResource> {
      checkContent(resource);
      return storage.createResource(projectId, resource);
    },
    async updateResource(
      projectId: string,
      resource: FhirResource & { id: string },
      options?: WriteOptions,
    ): Promise<{ resource: StoredResource; created: boolean }> {
      checkContent(resource);
      await checkCurrent(projectId, resource.resourceType, resource.id);
      return storage.updateResource(projectId, resource, options);
    },
    async deleteResource(projectId: string, type: string, id: string, options?: WriteOptions): Promise<void> {
      await checkCurrent(projectId, type, id);
      return storage.deleteResource(projectId, type, id, options);
    },
    async writeResources(projectId: string, writes: ResourceWrite[]): Promise<WriteResult[]> {
      for (const write of writes) await checkWrite(projectId, write);
      return storage.writeResources(projectId, writes);
    },
    transaction<R>(fn: (tx: StorageOperations) => Promise<R>): Promise<R> {
      return storage.transaction((tx) => fn(refuseScimOwnedWrites(tx)));
    },
  };
}

/** Marks a store this module guards, so that it is not wrapped twice. */
const GUARDED = Symbol('SCIM-owned writes refused');

/**
 * `storage` as every FHIR entry point writes to it (interactions, conditional writes, PATCH,
 * batch and transaction Bundles, NDJSON upload): a write that would change, delete or create a
 * resource SCIM owns (one carrying `SCIM_MANAGED_TAG`, a SCIM Group) is refused with a 409
 * `conflict` naming SCIM as its owner, before anything is written. Reads pass unchanged: FHIR
 * clients read, search and export these Groups.
 *
 * The check of the current version runs outside the write's own transaction when the caller is in
 * none: no race can make it wrong, since SCIM creates its Groups under new server-assigned ids and
 * never tags or untags an existing resource.
 */
export function refuseScimOwnedWrites<T extends StorageOperations>(storage: T): T {
  if ((storage as { [GUARDED]?: true })[GUARDED]) return storage;
  const guarded = guardedMembers(storage as unknown as Storage);
  return new Proxy(storage, {
    get(target, property) {
      if (property === GUARDED) return true;
      if (typeof property === 'string' && Object.hasOwn(SCIM_OWNED_RULES, property)) {
        const rule = SCIM_OWNED_RULES[property as keyof typeof SCIM_OWNED_RULES];
        if (rule === 'guarded' && Reflect.get(target, property) !== undefined)
          return guarded[property as GuardedMember];
      }
      const value: unknown = Reflect.get(target, property);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
