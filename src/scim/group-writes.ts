/**
 * Writing a SCIM Group as its FHIR `Group`, inside the caller's storage transaction: the
 * `displayName` checked free in the project, the members resolved (`resolveMembers`), and one
 * resource write, or none when nothing changed.
 */
import { groupNameKey } from '../common/scim-managed.js';
import { ScimError } from '../http/http-error.js';
import type { StorageOperations, StoredResource } from '../storage/types.js';
import { groupResource, memberEntries, type ScimGroupFields } from './group-mapping.js';
import { resolveMembers } from './group-members.js';
import { findGroupNamed } from './group-queries.js';
import { canonicalJson } from './json-access.js';

/** 409 `uniqueness` when another SCIM Group of the project has the name (case-insensitive). */
async function checkNameFree(
  tx: StorageOperations,
  projectId: string,
  displayName: string,
  except?: string,
): Promise<void> {
  if (await findGroupNamed(tx, projectId, displayName, except)) {
    throw new ScimError(409, 'uniqueness', 'displayName is already in use');
  }
}

/** Whether two versions hold the same group (what the stores add to `meta` aside). */
function sameContent(current: StoredResource, next: Record<string, unknown>): boolean {
  const { meta: currentMeta, ...currentRest } = current;
  const { meta: nextMeta, ...nextRest } = next;
  const { versionId: _v, lastUpdated: _l, ...currentKept } = currentMeta;
  return canonicalJson([currentRest, currentKept]) === canonicalJson([nextRest, nextMeta]);
}

/** Creates the FHIR Group of a new SCIM Group: one resource write. */
export async function createGroup(
  tx: StorageOperations,
  projectId: string,
  fields: ScimGroupFields,
): Promise<StoredResource> {
  await checkNameFree(tx, projectId, fields.displayName);
  const members = await resolveMembers(tx, projectId, fields.members, [], new Date().toISOString());
  return tx.createResource(projectId, groupResource(fields, members));
}

/** Writes `fields` over the group `current`: one resource write, none when nothing changed. */
export async function writeGroup(
  tx: StorageOperations,
  projectId: string,
  current: StoredResource,
  fields: ScimGroupFields,
): Promise<StoredResource> {
  const currentName = typeof current.name === 'string' ? current.name : '';
  if (groupNameKey(fields.displayName) !== groupNameKey(currentName)) {
    await checkNameFree(tx, projectId, fields.displayName, current.id);
  }
  const now = new Date().toISOString();
  const members = await resolveMembers(tx, projectId, fields.members, memberEntries(current), now);
  const next = groupResource(fields, members, current);
  if (sameContent(current, next)) return current;
  const written = await tx.updateResource(projectId, next as typeof next & { id: string }, {
    ifMatch: current.meta.versionId,
  });
  return written.resource;
}
