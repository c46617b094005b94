import { randomUUID } from 'node:crypto';
import { ConflictError, InvalidRecordError, PreconditionFailedError } from './errors.js';
import type {
  ClientChanges,
  ClientRecord,
  ExportJobChanges,
  ExportJobRecord,
  FhirResource,
  MembershipRecord,
  NewClient,
  NewExportJob,
  NewMembership,
  NewUser,
  ProjectChanges,
  ProjectRecord,
  ResourceWrite,
  UserChanges,
  UserRecord,
} from './types.js';

/**
 * The record rules every adapter applies the same way (docs/storage.md, "The contract"): what a
 * valid record is, what a create or an update makes of it (ids, timestamps, version bumps), and
 * the preconditions that do not need the store. Pure functions of their arguments (apart from
 * drawing UUIDs for absent ids); where the store is needed (does the id exist? is the userName
 * taken?) each adapter checks in its own way, between these steps.
 */

export type NewProject = Omit<ProjectRecord, 'createdAt' | 'updatedAt' | 'version'>;

const RESOURCE_TYPE = /^[A-Z][A-Za-z0-9]{0,63}$/;

export function checkResourceType(resourceType: unknown): asserts resourceType is string {
  if (typeof resourceType !== 'string' || !RESOURCE_TYPE.test(resourceType)) {
    throw new InvalidRecordError(`Invalid resource type ${JSON.stringify(resourceType)}`);
  }
}

/** An id is a non-empty string (adapters may refuse more: PostgreSQL refuses NUL characters). */
export function checkId(id: unknown, what: string): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) throw new InvalidRecordError(`Invalid ${what} id`);
}

/** The id of a new record: the one given, else a fresh UUID. */
export function newRecordId(given: string | undefined): string {
  return given ?? randomUUID();
}

export function checkUserName(userName: unknown): void {
  if (typeof userName !== 'string' || userName.length === 0) {
    throw new InvalidRecordError('A user needs a userName');
  }
}

/** `ifVersion` of an update of a versioned record (`what` names it in the error: `User`, `Export job`). */
export function checkIfVersion(
  what: string,
  id: string,
  version: number,
  ifVersion: number | undefined,
): void {
  if (ifVersion !== undefined && ifVersion !== version) {
    throw new PreconditionFailedError(`${what} ${id} is at version ${version}`);
  }
}

// Projects

export function newProjectRecord(project: NewProject, now: string): ProjectRecord {
  return { ...structuredClone(project), createdAt: now, updatedAt: now, version: 1 };
}

export function updatedProjectRecord(
  current: ProjectRecord,
  id: string,
  changes: ProjectChanges,
  now: string,
): ProjectRecord {
  return { ...current, ...structuredClone(changes), id, updatedAt: now, version: current.version + 1 };
}

// Users

export function newUserRecord(projectId: string, id: string, user: NewUser, now: string): UserRecord {
  const record: UserRecord = {
    ...structuredClone(user),
    id,
    projectId,
    createdAt: now,
    updatedAt: now,
    version: 1,
  };
  if (record.externalId === undefined) delete record.externalId;
  return record;
}

/**
 * A user with `changes` applied (`externalId: undefined` removes it), checked; the caller then
 * checks uniqueness and stamps it with {@link finishUserUpdate}.
 */
export function mergeUserChanges(current: UserRecord, changes: UserChanges): UserRecord {
  const record: UserRecord = { ...current, ...structuredClone(changes) };
  if ('externalId' in changes && changes.externalId === undefined) delete record.externalId;
  checkUserName(record.userName);
  return record;
}

/** Stamps a merged user: its key, the update time and the next version. */
export function finishUserUpdate(
  record: UserRecord,
  projectId: string,
  id: string,
  previousVersion: number,
  now: string,
): UserRecord {
  return Object.assign(record, { id, projectId, updatedAt: now, version: previousVersion + 1 });
}

// Memberships and clients

export function newMembershipRecord(
  projectId: string,
  id: string,
  membership: NewMembership,
  now: string,
): MembershipRecord {
  return { ...structuredClone(membership), id, projectId, createdAt: now };
}

export function newClientRecord(client: NewClient, now: string): ClientRecord {
  return { ...structuredClone(client), revoked: client.revoked ?? false, createdAt: now, updatedAt: now };
}

/** A client with `changes` applied: a change to `undefined` removes the field; the key stays. */
export function updatedClientRecord(
  current: ClientRecord,
  changes: ClientChanges,
  now: string,
): ClientRecord {
  const record: ClientRecord = {
    ...current,
    ...structuredClone(changes),
    id: current.id,
    projectId: current.projectId,
    createdAt: current.createdAt,
    updatedAt: now,
  };
  for (const key of Object.keys(changes) as (keyof ClientChanges)[]) {
    if (changes[key] === undefined) delete record[key];
  }
  return record;
}

// Export jobs

export function newExportJobRecord(job: NewExportJob, now: string): ExportJobRecord {
  return { ...structuredClone(job), createdAt: now, updatedAt: now, version: 1 };
}

export function updatedExportJobRecord(
  current: ExportJobRecord,
  projectId: string,
  id: string,
  changes: ExportJobChanges,
  now: string,
): ExportJobRecord {
  return {
    ...current,
    ...structuredClone(changes),
    id,
    projectId,
    updatedAt: now,
    version: current.version + 1,
  };
}

// Resources

/** The type and id a create or update writes (the id drawn for a create without one), checked. */
export function writtenResourceKey(write: Exclude<ResourceWrite, { op: 'delete' }>): {
  resource: FhirResource;
  resourceType: string;
  id: string;
} {
  const resource = write.resource;
  if (typeof resource !== 'object' || resource === null) {
    throw new InvalidRecordError('A resource must be an object');
  }
  checkResourceType(resource.resourceType);
  const id: unknown = write.op === 'create' ? newRecordId(resource.id) : resource.id;
  checkId(id, 'resource');
  return { resource, resourceType: resource.resourceType, id };
}

/**
 * The preconditions of a resource write given the current version (`liveVersionId`, undefined
 * when absent or deleted): a create needs no live version; `ifMatch` (updates and deletes) must
 * equal the live version id.
 */
export function checkResourceWrite(
  op: ResourceWrite['op'],
  resourceType: string,
  id: string,
  ifMatch: string | undefined,
  liveVersionId: string | undefined,
): void {
  if (op !== 'create' && ifMatch !== undefined && liveVersionId !== ifMatch) {
    throw new PreconditionFailedError(`${resourceType}/${id} is not at version ${ifMatch}`);
  }
  if (op === 'create' && liveVersionId !== undefined) {
    throw new ConflictError(`${resourceType}/${id} exists`, { attribute: 'id' });
  }
}

/** The version id after `previous` (`1` for a first version): versions continue across deletes. */
export function nextVersionId(previous: string | undefined): string {
  const n = previous === undefined ? 0 : Number.parseInt(previous, 10);
  return String(Number.isFinite(n) ? n + 1 : 1);
}
