/**
 * SCIM User operations on the storage, framework-free: create (profile resource + user +
 * membership in one transaction), read, replace, patch, delete (leaving every group, in the same
 * transaction) and search, with the version preconditions and the retry that keeps concurrent
 * writes from being lost.
 */
import { ScimError } from '../http/http-error.js';
import type { ProfileType, Storage, UserRecord } from '../storage/types.js';
import { checkIfMatch, type EntityTagCondition } from './entity-tags.js';
import type { ScimListQuery } from './list-query.js';
import { applyScimPatch } from './patch.js';
import type { ScimResourceSchemas } from './schema.js';
import { scimStorageCall } from './storage-errors.js';
import { ScimPageCursors } from './user-listing.js';
import { profileResource, scimUserFields, userDocument, type ScimUserFields } from './user-mapping.js';
import { leaveGroups } from './user-groups.js';
import { searchUsers, type ScimSearchResult } from './user-search.js';
import { DEFAULT_ACTIVE, withRetry, writeUser } from './user-writes.js';

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

/** The SCIM User operations of one router; each throws `ScimError`s. */
export interface ScimUserService {
  create(projectId: string, body: unknown, settings?: ScimUserSettings): Promise<UserRecord>;
  read(projectId: string, id: string): Promise<UserRecord>;
  replace(
    projectId: string,
    id: string,
    body: unknown,
    ifMatch?: EntityTagCondition,
    settings?: ScimUserSettings,
  ): Promise<UserRecord>;
  patch(
    projectId: string,
    id: string,
    body: unknown,
    location: string,
    ifMatch?: EntityTagCondition,
    settings?: ScimUserSettings,
  ): Promise<UserRecord>;
  delete(projectId: string, id: string, ifMatch?: EntityTagCondition): Promise<void>;
  /**
   * Filters, sorts and pages the project's users, rendered and projected. The store filters (what
   * its indexes answer, then the whole filter as `where`), sorts and pages; a `startIndex` that an
   * earlier page led to starts from that page's cursor (`ScimPageCursors`). A `sortBy` no store
   * keeps (`name.familyName`, …) is sorted here, over every match.
   */
  search(
    projectId: string,
    query: ScimListQuery,
    locationOf: (id: string) => string,
    settings?: ScimUserSettings,
  ): Promise<ScimSearchResult>;
}

/** The SCIM User operations of one router. */
export function scimUserService(config: ScimUserServiceConfig): ScimUserService {
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

  /**
   * A user deactivated or deleted keeps no SMART grant: their refresh tokens and pending codes go
   * at once (their access tokens already stop at `bearerAuth`, which reads the user each time).
   */
  async function endGrants(projectId: string, user: { id: string; active: boolean }): Promise<void> {
    if (!user.active)
      await scimStorageCall(
        () => storage.grants?.revoke({ projectId, userId: user.id }) ?? Promise.resolve(0),
      );
  }

  /** Reads the user, checks `ifMatch`, writes what `change` makes of it (again after a lost race). */
  async function update(
    projectId: string,
    id: string,
    ifMatch: EntityTagCondition | undefined,
    change: (current: UserRecord) => ScimUserFields,
  ): Promise<UserRecord> {
    const record = await scimStorageCall(() =>
      withRetry(ifMatch !== undefined, config.maxAttempts, () =>
        storage.transaction(async (tx) => {
          const current = await tx.readUser(projectId, id);
          checkIfMatch(ifMatch, current.version);
          return writeUser(tx, projectId, current, change(current));
        }),
      ),
    );
    await endGrants(projectId, record);
    return record;
  }

  function create(projectId: string, body: unknown, settings = defaults): Promise<UserRecord> {
    const fields = fieldsOf(body, settings, settings.defaultUserType);
    return scimStorageCall(() =>
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
        const membership = {
          projectId,
          userId: user.id,
          admin: false,
          profile: `${fields.userType}/${profile.id}`,
        };
        await tx.createMembership(projectId, membership);
        return user;
      }),
    );
  }

  async function replace(
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
    return await update(projectId, id, ifMatch, (current) =>
      fieldsOf(body, settings, settings.defaultUserType ? current.userType : undefined),
    );
  }

  function patch(
    projectId: string,
    id: string,
    body: unknown,
    location: string,
    ifMatch?: EntityTagCondition,
    settings = defaults,
  ): Promise<UserRecord> {
    return update(projectId, id, ifMatch, (current) => {
      const patched = applyScimPatch(userDocument(current, location), body, {
        schemas,
        maxOperations: config.maxOperations,
      });
      const fields = scimUserFields(
        patched,
        schemas,
        settings.defaultUserType ? current.userType : undefined,
      );
      // The patched document holds `active` unless an operation unassigned it. (A replace
      // without `active` keeps the current value instead: see `writeUser`.)
      return { ...fields, active: fields.active ?? DEFAULT_ACTIVE };
    });
  }

  async function remove(projectId: string, id: string, ifMatch?: EntityTagCondition): Promise<void> {
    await scimStorageCall(() =>
      storage.transaction(async (tx) => {
        const current = await tx.readUser(projectId, id);
        checkIfMatch(ifMatch, current.version);
        for (const membership of await tx.listMemberships(projectId, { userId: id })) {
          await tx.deleteMembership(projectId, membership.id);
        }
        await leaveGroups(tx, projectId, current);
        // The profile resource and every other FHIR resource stay.
        await tx.deleteUser(projectId, id);
      }),
    );
    await endGrants(projectId, { id, active: false });
  }

  return {
    create,
    read: (projectId, id) => scimStorageCall(() => storage.readUser(projectId, id)),
    replace,
    patch,
    delete: remove,
    search: (projectId, query, locationOf, settings = defaults) =>
      searchUsers({ storage, schemas, cursors }, projectId, query, locationOf, settings.echoUserName),
  };
}
