/**
 * SCIM User operations on the storage, framework-free: create (profile resource + user +
 * membership in one transaction), read, replace, patch, delete and search, with the version
 * preconditions and the retry that keeps concurrent writes from being lost.
 */
import { ScimError } from '../http/http-error.js';
import {
  ConflictError,
  InvalidRecordError,
  NotFoundError,
  PreconditionFailedError,
  StorageError,
} from '../storage/errors.js';
import type {
  FhirResource,
  ProfileType,
  Storage,
  StorageOperations,
  UserChanges,
  UserRecord,
} from '../storage/types.js';
import { projectScimAttributes } from './attributes.js';
import { compileScimFilter } from './filter-evaluator.js';
import { printScimFilter } from './filter-parser.js';
import { ScimPageCursors, scimStorageFilter, scimStorageSortKey } from './user-listing.js';
import type { ScimListQuery } from './list-query.js';
import { scimSortComparator } from './list-query.js';
import { applyScimPatch } from './patch.js';
import type { ScimResourceSchemas } from './schema.js';
import {
  profileChanged,
  profileResource,
  scimUserFields,
  userDocument,
  userFilterView,
  userToScim,
  type ScimUserFields,
} from './user-mapping.js';

export interface ScimUserServiceConfig {
  storage: Storage;
  schemas: ScimResourceSchemas;
  /** The default of `ScimUserSettings.echoUserName` when a call passes no settings. */
  echoUserName: boolean;
  maxOperations: number;
  /** Attempts of a write that lost a race, when the client sent no If-Match. */
  maxAttempts: number;
}

/** How one request treats `userType` and `userName`: the project's settings over the router's options. */
export interface ScimUserSettings {
  /**
   * Profile type of a create without `userType`; with it, a replace without `userType` keeps the
   * user's type. Without it, `userType` is required.
   */
  defaultUserType?: ProfileType;
  /**
   * Answers carry the stored `userName` instead of the profile id, and creates and replaces must
   * carry a `userName` (RFC 7643 §4.1.1): the client owns the name.
   */
  echoUserName: boolean;
}

/** Parsed `If-Match` / `If-None-Match`: `*`, or the versions listed. */
export type EntityTagCondition = '*' | number[];

/** Parses an entity-tag list (`W/"3", "4"` or `*`); tags that are not our versions never match. */
export function parseEntityTags(header: string | undefined): EntityTagCondition | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  if (header.trim() === '*') return '*';
  const versions: number[] = [];
  for (const match of header.matchAll(/(?:W\/)?"([^"]*)"/g)) {
    const n = Number(match[1]);
    if (Number.isSafeInteger(n)) versions.push(n);
  }
  return versions;
}

export function entityTagMatches(condition: EntityTagCondition, version: number): boolean {
  return condition === '*' || condition.includes(version);
}

/** Maps storage failures to SCIM errors (RFC 7644 §3.12). */
export function scimStorageError(error: unknown): unknown {
  if (!(error instanceof StorageError)) return error;
  if (error instanceof NotFoundError)
    return new ScimError(error.deleted ? 410 : 404, undefined, 'Resource not found', { cause: error });
  if (error instanceof ConflictError) {
    const what = error.attribute
      ? `${error.attribute} is already in use`
      : 'Conflict with an existing resource';
    return new ScimError(409, 'uniqueness', what, { cause: error });
  }
  if (error instanceof PreconditionFailedError) {
    return new ScimError(412, undefined, 'The resource changed (version mismatch)', { cause: error });
  }
  if (error instanceof InvalidRecordError)
    return new ScimError(400, 'invalidValue', error.message, { cause: error });
  return error;
}

export interface ScimSearchResult {
  totalResults: number;
  resources: Record<string, unknown>[];
}

/**
 * `active` of a user created without it. A PATCH that removes `active` (or sets it to null) leaves
 * it unassigned (RFC 7644 §3.5.2.2), which for a user is this default again.
 */
const DEFAULT_ACTIVE = true;

function sameFields(current: UserRecord, changes: Omit<UserChanges, 'profileId'>): boolean {
  return (
    current.userName === changes.userName &&
    current.externalId === changes.externalId &&
    current.active === changes.active &&
    JSON.stringify(current.data) === JSON.stringify(changes.data)
  );
}

/** The SCIM User operations of one router. */
export function scimUserService(config: ScimUserServiceConfig) {
  const { storage, schemas } = config;
  const defaults: ScimUserSettings = { echoUserName: config.echoUserName };
  // Where the next pages of recent list walks start: one set per service (per router).
  const cursors = new ScimPageCursors();

  /** The fields of a create or replace body; `fallback` stands in for an absent `userType`. */
  function fieldsOf(body: unknown, settings: ScimUserSettings, fallback?: ProfileType): ScimUserFields {
    const fields = scimUserFields(body, schemas, fallback);
    if (settings.echoUserName && fields.userName === undefined) {
      throw new ScimError(400, 'invalidValue', 'userName is required');
    }
    return fields;
  }

  async function guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      throw scimStorageError(error);
    }
  }

  /**
   * A user deactivated or deleted keeps no SMART grant: their refresh tokens and pending codes go
   * at once (their access tokens already stop at `bearerAuth`, which reads the user each time).
   */
  async function endGrants(projectId: string, user: { id: string; active: boolean }): Promise<void> {
    if (!user.active)
      await guard(() => storage.grants?.revoke({ projectId, userId: user.id }) ?? Promise.resolve(0));
  }

  /** Runs a read-modify-write, again when it lost a race and the client did not pin a version. */
  async function withRetry<T>(pinned: boolean, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (error) {
        if (pinned || !(error instanceof PreconditionFailedError) || attempt >= config.maxAttempts)
          throw error;
      }
    }
  }

  async function readProfile(
    tx: StorageOperations,
    projectId: string,
    record: UserRecord,
  ): Promise<FhirResource | undefined> {
    try {
      return await tx.readResource(projectId, record.userType, record.profileId);
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  }

  /** Writes new fields over a user, keeping the profile in sync. */
  async function write(
    tx: StorageOperations,
    projectId: string,
    current: UserRecord,
    fields: ScimUserFields,
  ): Promise<UserRecord> {
    if (fields.userType !== current.userType) {
      throw new ScimError(400, 'mutability', 'userType cannot change');
    }
    // A client echoing the profile id we answered as userName keeps the name it gave at create.
    let userName = fields.userName ?? current.userName;
    if (userName.toLowerCase() === current.profileId.toLowerCase()) userName = current.userName;
    const changes: UserChanges = {
      userName,
      externalId: fields.externalId,
      active: fields.active ?? current.active,
      data: fields.data,
    };
    if (sameFields(current, changes)) return current;
    const existing = await readProfile(tx, projectId, current);
    const profile = profileResource(current.userType, fields.data, existing);
    if (!existing || profileChanged(existing, profile)) {
      await tx.updateResource(projectId, { ...profile, id: current.profileId });
    }
    return tx.updateUser(projectId, current.id, changes, { ifVersion: current.version });
  }

  function checkIfMatch(ifMatch: EntityTagCondition | undefined, current: UserRecord): void {
    if (ifMatch && !entityTagMatches(ifMatch, current.version)) {
      throw new ScimError(412, undefined, 'The resource changed (version mismatch)');
    }
  }

  return {
    create(projectId: string, body: unknown, settings = defaults): Promise<UserRecord> {
      const fields = fieldsOf(body, settings, settings.defaultUserType);
      return guard(() =>
        storage.transaction(async (tx) => {
          const profile = await tx.createResource(projectId, profileResource(fields.userType, fields.data));
          const user = await tx.createUser(projectId, {
            projectId,
            userName: fields.userName ?? profile.id,
            ...(fields.externalId !== undefined ? { externalId: fields.externalId } : {}),
            userType: fields.userType,
            profileId: profile.id,
            active: fields.active ?? DEFAULT_ACTIVE,
            data: fields.data,
          });
          await tx.createMembership(projectId, {
            projectId,
            userId: user.id,
            admin: false,
            profile: `${fields.userType}/${profile.id}`,
          });
          return user;
        }),
      );
    },

    read(projectId: string, id: string): Promise<UserRecord> {
      return guard(() => storage.readUser(projectId, id));
    },

    async replace(
      projectId: string,
      id: string,
      body: unknown,
      ifMatch?: EntityTagCondition,
      settings = defaults,
    ): Promise<UserRecord> {
      // Checked before any read (400 before 404); read again below with the user's own type as
      // the fallback for an absent userType.
      fieldsOf(body, settings, settings.defaultUserType);
      const bodyId = (body as Record<string, unknown>).id;
      if (bodyId !== undefined && bodyId !== id) {
        throw new ScimError(400, 'mutability', 'The id in the body differs from the id in the path');
      }
      const record = await guard(() =>
        withRetry(ifMatch !== undefined, () =>
          storage.transaction(async (tx) => {
            const current = await tx.readUser(projectId, id);
            checkIfMatch(ifMatch, current);
            const fallback = settings.defaultUserType ? current.userType : undefined;
            return write(tx, projectId, current, fieldsOf(body, settings, fallback));
          }),
        ),
      );
      await endGrants(projectId, record);
      return record;
    },

    async patch(
      projectId: string,
      id: string,
      body: unknown,
      location: string,
      ifMatch?: EntityTagCondition,
      settings = defaults,
    ): Promise<UserRecord> {
      const record = await guard(() =>
        withRetry(ifMatch !== undefined, () =>
          storage.transaction(async (tx) => {
            const current = await tx.readUser(projectId, id);
            checkIfMatch(ifMatch, current);
            const patched = applyScimPatch(userDocument(current, location), body, {
              schemas,
              maxOperations: config.maxOperations,
            });
            const fallback = settings.defaultUserType ? current.userType : undefined;
            const fields = scimUserFields(patched, schemas, fallback);
            // The patched document holds `active` unless an operation unassigned it. (A replace
            // without `active` keeps the current value instead: see `write`.)
            return write(tx, projectId, current, { ...fields, active: fields.active ?? DEFAULT_ACTIVE });
          }),
        ),
      );
      await endGrants(projectId, record);
      return record;
    },

    async delete(projectId: string, id: string, ifMatch?: EntityTagCondition): Promise<void> {
      await guard(() =>
        storage.transaction(async (tx) => {
          const current = await tx.readUser(projectId, id);
          checkIfMatch(ifMatch, current);
          for (const membership of await tx.listMemberships(projectId, { userId: id })) {
            await tx.deleteMembership(projectId, membership.id);
          }
          // The profile resource and every other FHIR resource stay.
          await tx.deleteUser(projectId, id);
        }),
      );
      await endGrants(projectId, { id, active: false });
    },

    /**
     * Filters, sorts and pages the project's users, rendered and projected. The store filters
     * (what its indexes answer, then the whole filter as `where`), sorts and pages; a `startIndex`
     * that an earlier page led to starts from that page's cursor (`ScimPageCursors`). A `sortBy` no
     * store keeps (`name.familyName`, …) is sorted here, over every match.
     */
    async search(
      projectId: string,
      query: ScimListQuery,
      locationOf: (id: string) => string,
      settings = defaults,
    ): Promise<ScimSearchResult> {
      const predicate = query.filter ? compileScimFilter(query.filter, schemas) : undefined;
      const filter = query.filter ? scimStorageFilter(query.filter, schemas) : undefined;
      const matching = {
        ...(filter ? { filter } : {}),
        ...(predicate ? { where: (u: UserRecord) => predicate(userFilterView(u, locationOf(u.id))) } : {}),
      };
      const render = (u: UserRecord) =>
        userToScim(u, { location: locationOf(u.id), echoUserName: settings.echoUserName });
      const project = (docs: Record<string, unknown>[]) =>
        docs.map((doc) => projectScimAttributes(doc, query, schemas));
      const sortBy = query.sortBy ? scimStorageSortKey(query.sortBy, settings.echoUserName) : 'createdAt';
      const sortOrder = query.descending ? 'descending' : 'ascending';
      if (!sortBy && query.sortBy) {
        const all = await guard(() =>
          storage.listUsers(projectId, { ...matching, count: Number.MAX_SAFE_INTEGER }),
        );
        const from = query.startIndex - 1;
        const sorted = all.users.map(render).sort(scimSortComparator(query.sortBy, query.descending));
        return { totalResults: all.total, resources: project(sorted.slice(from, from + query.count)) };
      }
      const walk = JSON.stringify([
        projectId,
        query.filter ? printScimFilter(query.filter) : '',
        sortBy,
        sortOrder,
      ]);
      const known = cursors.find(walk, query.startIndex);
      const page = await guard(() =>
        storage.listUsers(projectId, {
          ...matching,
          sortBy: sortBy ?? 'createdAt',
          sortOrder,
          ...(known ? { after: known.cursor, total: false } : { offset: query.startIndex - 1 }),
          count: query.count,
        }),
      );
      const total = known ? known.total : page.total;
      if (page.next)
        cursors.remember(walk, query.startIndex + page.users.length, { cursor: page.next, total });
      return { totalResults: total, resources: project(page.users.map(render)) };
    },
  };
}

export type ScimUserService = ReturnType<typeof scimUserService>;
