/**
 * Writing a SCIM user over its stored record (replace and patch): the profile resource and the
 * user's group memberships kept in step with the user's attributes, and a read-modify-write tried
 * again when it lost a race.
 */
import { ScimError } from '../http/http-error.js';
import { NotFoundError, PreconditionFailedError } from '../storage/errors.js';
import type { FhirResource, StorageOperations, UserChanges, UserRecord } from '../storage/types.js';
import { followActivity } from './user-groups.js';
import { profileChanged, profileResource, type ScimUserFields } from './user-mapping.js';

/**
 * `active` of a user created without it. A PATCH that removes `active` (or sets it to null) leaves
 * it unassigned (RFC 7644 §3.5.2.2), which for a user is this default again.
 */
export const DEFAULT_ACTIVE = true;

function sameFields(current: UserRecord, changes: Omit<UserChanges, 'profileId'>): boolean {
  return (
    current.userName === changes.userName &&
    current.externalId === changes.externalId &&
    current.active === changes.active &&
    JSON.stringify(current.data) === JSON.stringify(changes.data)
  );
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

/**
 * Writes new fields over a user, keeping the profile in sync and, when `active` changes, the user's
 * `member.inactive` in its groups (nothing written when nothing changed).
 */
export async function writeUser(
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
  const updated = await tx.updateUser(projectId, current.id, changes, { ifVersion: current.version });
  if (updated.active !== current.active) await followActivity(tx, projectId, updated);
  return updated;
}

/**
 * Runs a read-modify-write, again (up to `maxAttempts` in all) when it lost a race and the client
 * did not pin a version (`pinned`: it sent `If-Match`, and the loser answers 412).
 */
export async function withRetry<T>(pinned: boolean, maxAttempts: number, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (pinned || !(error instanceof PreconditionFailedError) || attempt >= maxAttempts) throw error;
    }
  }
}
