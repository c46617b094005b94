/**
 * SCIM Group operations on the storage, framework-free: each SCIM Group is a FHIR `Group` of the
 * project (see group-mapping.ts), read and written inside one storage transaction, with the
 * version preconditions and the retry that keeps concurrent writes from being lost.
 */
import { ScimError } from '../http/http-error.js';
import type { Storage, StoredResource } from '../storage/types.js';
import { checkIfMatch, type EntityTagCondition } from './entity-tags.js';
import { groupToScim, groupVersion, scimGroupFields, type ScimGroupFields } from './group-mapping.js';
import { readScimGroup } from './group-queries.js';
import { searchGroups, type GroupLinks } from './group-search.js';
import { createGroup, writeGroup } from './group-writes.js';
import type { ScimListQuery } from './list-query.js';
import { applyScimPatch } from './patch.js';
import { GROUP_RESOURCE_SCHEMAS } from './schema.js';
import { scimStorageCall } from './storage-errors.js';
import type { ScimSearchResult } from './user-search.js';
import { withRetry } from './user-writes.js';

export interface ScimGroupServiceConfig {
  storage: Storage;
  maxOperations: number;
  /** Attempts of a write that lost a race, when the client sent no If-Match. */
  maxAttempts: number;
}

/** The SCIM Group operations of one router; each throws `ScimError`s. */
export interface ScimGroupService {
  create(projectId: string, body: unknown): Promise<StoredResource>;
  read(projectId: string, id: string): Promise<StoredResource>;
  replace(
    projectId: string,
    id: string,
    body: unknown,
    ifMatch?: EntityTagCondition,
  ): Promise<StoredResource>;
  /** `links` render the group the PATCH operates on (`members.$ref`, `meta.location`). */
  patch(
    projectId: string,
    id: string,
    body: unknown,
    links: GroupLinks,
    ifMatch?: EntityTagCondition,
  ): Promise<StoredResource>;
  delete(projectId: string, id: string, ifMatch?: EntityTagCondition): Promise<void>;
  /** Filters, sorts and pages the project's groups, rendered with `links` and projected. */
  search(projectId: string, query: ScimListQuery, links: GroupLinks): Promise<ScimSearchResult>;
}

/** The SCIM Group operations of one router. */
export function scimGroupService(config: ScimGroupServiceConfig): ScimGroupService {
  const { storage } = config;

  /** Reads the group, checks `ifMatch`, writes what `change` makes of it (again after a lost race). */
  function update(
    projectId: string,
    id: string,
    ifMatch: EntityTagCondition | undefined,
    change: (current: StoredResource) => ScimGroupFields,
  ): Promise<StoredResource> {
    return scimStorageCall(() =>
      withRetry(ifMatch !== undefined, config.maxAttempts, () =>
        storage.transaction(async (tx) => {
          const current = await readScimGroup(tx, projectId, id);
          checkIfMatch(ifMatch, groupVersion(current));
          return writeGroup(tx, projectId, current, change(current));
        }),
      ),
    );
  }

  function create(projectId: string, body: unknown): Promise<StoredResource> {
    const fields = scimGroupFields(body);
    return scimStorageCall(() => storage.transaction((tx) => createGroup(tx, projectId, fields)));
  }

  function replace(
    projectId: string,
    id: string,
    body: unknown,
    ifMatch?: EntityTagCondition,
  ): Promise<StoredResource> {
    // Checked before any read (400 before 404).
    const fields = scimGroupFields(body);
    const bodyId = (body as Record<string, unknown>).id;
    if (bodyId !== undefined && bodyId !== id) {
      throw new ScimError(400, 'mutability', 'The id in the body differs from the id in the path');
    }
    return update(projectId, id, ifMatch, () => fields);
  }

  function patch(
    projectId: string,
    id: string,
    body: unknown,
    links: GroupLinks,
    ifMatch?: EntityTagCondition,
  ): Promise<StoredResource> {
    return update(projectId, id, ifMatch, (current) => {
      const document = groupToScim(current, { location: links.groupUrl(id), userUrl: links.userUrl });
      const patched = applyScimPatch(document, body, {
        schemas: GROUP_RESOURCE_SCHEMAS,
        maxOperations: config.maxOperations,
      });
      return scimGroupFields(patched);
    });
  }

  async function remove(projectId: string, id: string, ifMatch?: EntityTagCondition): Promise<void> {
    await scimStorageCall(() =>
      storage.transaction(async (tx) => {
        const current = await readScimGroup(tx, projectId, id);
        checkIfMatch(ifMatch, groupVersion(current));
        // The members' users and profiles stay; the Group's history keeps its versions.
        await tx.deleteResource(projectId, 'Group', id, { ifMatch: current.meta.versionId });
      }),
    );
  }

  return {
    create,
    read: (projectId, id) => scimStorageCall(() => readScimGroup(storage, projectId, id)),
    replace,
    patch,
    delete: remove,
    search: (projectId, query, links) => searchGroups(storage, projectId, query, links),
  };
}
