/**
 * Group membership follows the users, inside the transaction that changes the user: a user deleted
 * leaves every SCIM Group it is a member of; a user deactivated stays a member, marked
 * `member.inactive` true on the FHIR Group (so that a Group export leaves its compartment out),
 * and is unmarked when reactivated. The groups are found with a FHIR search on `member` (the
 * user's profile), answered from the store's index; each changed group is written once.
 */
import { groupsWithMember } from '../storage/scim-group-search.js';
import type { StorageOperations, StoredResource, UserRecord } from '../storage/types.js';
import {
  groupWithMembers,
  memberEntries,
  memberUserId,
  profileReference,
  type GroupMemberEntry,
} from './group-mapping.js';

/** Whether `entry` is the member entry of `user`. */
function isMemberEntryOf(entry: GroupMemberEntry, user: Pick<UserRecord, 'id'>): boolean {
  return memberUserId(entry) === user.id;
}

/** Writes the group with `members` in place of its member list. */
async function writeMembers(
  tx: StorageOperations,
  projectId: string,
  group: StoredResource,
  members: GroupMemberEntry[],
): Promise<void> {
  await tx.updateResource(projectId, groupWithMembers(group, members), { ifMatch: group.meta.versionId });
}

/** Removes `user` from every SCIM Group it is a member of. */
export async function leaveGroups(tx: StorageOperations, projectId: string, user: UserRecord): Promise<void> {
  for (const group of await groupsWithMember(tx, projectId, profileReference(user))) {
    const members = memberEntries(group);
    const kept = members.filter((entry) => !isMemberEntryOf(entry, user));
    if (kept.length !== members.length) await writeMembers(tx, projectId, group, kept);
  }
}

/** Marks `user`'s member entries `inactive` while the user is, in every SCIM Group it is in. */
export async function followActivity(
  tx: StorageOperations,
  projectId: string,
  user: UserRecord,
): Promise<void> {
  for (const group of await groupsWithMember(tx, projectId, profileReference(user))) {
    let changed = false;
    const members = memberEntries(group).map((entry) => {
      if (!isMemberEntryOf(entry, user) || (entry.inactive === true) === !user.active) return entry;
      changed = true;
      const { inactive: _inactive, ...rest } = entry;
      return user.active ? rest : { ...rest, inactive: true };
    });
    if (changed) await writeMembers(tx, projectId, group, members);
  }
}
