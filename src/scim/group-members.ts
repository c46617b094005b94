/**
 * A group's member list as a write makes it: members it has already keep their entries (no read of
 * their users), new ones are looked up in batches. A PATCH that adds one member to a group of
 * 10,000 reads one user and writes the group once.
 */
import { ScimError } from '../http/http-error.js';
import type { StorageOperations, UserRecord } from '../storage/types.js';
import {
  memberUserId,
  newMemberEntry,
  type GroupMemberEntry,
  type ScimMemberField,
} from './group-mapping.js';

/** Users looked up per `listUsers` call (one `id` condition each). */
const LOOKUP_BATCH = 500;

/** The users of `ids` in the project, by id (absent ids are simply not in the map). */
async function usersById(
  ops: Pick<StorageOperations, 'listUsers'>,
  projectId: string,
  ids: string[],
): Promise<Map<string, UserRecord>> {
  const found = new Map<string, UserRecord>();
  for (let start = 0; start < ids.length; start += LOOKUP_BATCH) {
    const batch = ids.slice(start, start + LOOKUP_BATCH);
    const page = await ops.listUsers(projectId, {
      filter: { or: batch.map((id) => ({ attribute: 'id' as const, eq: id })) },
      count: batch.length,
      total: false,
    });
    for (const user of page.users) found.set(user.id, user);
  }
  return found;
}

/** The entry kept for a member the group has: a display given now replaces the stored one. */
function keptEntry(entry: GroupMemberEntry, display: string | undefined): GroupMemberEntry {
  if (display === undefined || entry.entity.display === display) return entry;
  return { ...entry, entity: { ...entry.entity, display } };
}

/**
 * The entries of `members` (in their order): the current entry of each member the group has, a new
 * one (joined at `now`) for each other. 400 `invalidValue` naming the values that are no user of
 * the project.
 */
export async function resolveMembers(
  ops: Pick<StorageOperations, 'listUsers'>,
  projectId: string,
  members: ScimMemberField[],
  current: GroupMemberEntry[],
  now: string,
): Promise<GroupMemberEntry[]> {
  const existing = new Map<string, GroupMemberEntry>();
  for (const entry of current) {
    const id = memberUserId(entry);
    if (id !== undefined && !existing.has(id)) existing.set(id, entry);
  }
  const joining = members.filter((m) => !existing.has(m.value)).map((m) => m.value);
  const users = joining.length ? await usersById(ops, projectId, joining) : new Map<string, UserRecord>();
  const unknown = joining.filter((id) => !users.has(id));
  if (unknown.length) {
    const named = unknown.slice(0, 5).map((id) => JSON.stringify(id));
    const more = unknown.length > 5 ? ` and ${unknown.length - 5} more` : '';
    throw new ScimError(400, 'invalidValue', `No user of the project has the id ${named.join(', ')}${more}`);
  }
  return members.map((member) => {
    const entry = existing.get(member.value);
    return entry
      ? keptEntry(entry, member.display)
      : newMemberEntry(users.get(member.value)!, member.display, now);
  });
}
