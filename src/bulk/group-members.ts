import { patientIdOfReference } from '../fhir/compartment.js';
import { NotFoundError } from '../storage/errors.js';
import type { StorageOperations } from '../storage/types.js';

/** The patients of a Group, for a Group-level export. */
export interface GroupMembers {
  /** Every member patient id (nested Groups resolved), in first-seen order. */
  patientIds: string[];
  /** Members whose `member.period.start` is later than `since`: added to the Group after it. */
  addedSince: string[];
}

interface GroupMember {
  entity?: { reference?: unknown };
  inactive?: unknown;
  period?: { start?: unknown };
}

const GROUP_REFERENCE = /(?:^|\/)Group\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/**
 * Resolves `Group/{groupId}`'s members from `Group.member.entity`: Patient references directly,
 * Group references recursively (each Group visited once, so cycles end). Inactive members are
 * skipped; a nested Group that does not exist is skipped. Throws `NotFoundError` when the Group
 * itself does not exist.
 */
export async function resolveGroupMembers(
  storage: Pick<StorageOperations, 'readResource'>,
  projectId: string,
  groupId: string,
  since?: number,
): Promise<GroupMembers> {
  const patientIds: string[] = [];
  const seenPatients = new Set<string>();
  const added = new Set<string>();
  const old = new Set<string>();
  const visited = new Set<string>();
  // Depth-first over Group references, iterative so that deep nesting cannot exhaust the stack.
  const pending: { id: string; required: boolean; addedAfter: boolean }[] = [
    { id: groupId, required: true, addedAfter: false },
  ];
  while (pending.length > 0) {
    const { id, required, addedAfter } = pending.pop()!;
    if (visited.has(id)) continue;
    visited.add(id);
    let group;
    try {
      group = await storage.readResource(projectId, 'Group', id);
    } catch (error) {
      if (!required && error instanceof NotFoundError) continue;
      throw error;
    }
    const members = Array.isArray(group.member) ? (group.member as GroupMember[]) : [];
    const nested: typeof pending = [];
    for (const member of members) {
      if (member.inactive === true) continue;
      const reference = member.entity?.reference;
      if (typeof reference !== 'string') continue;
      const start = typeof member.period?.start === 'string' ? Date.parse(member.period.start) : NaN;
      const isNew = addedAfter || (since !== undefined && start > since);
      const patientId = patientIdOfReference(reference);
      if (patientId !== undefined) {
        if (!seenPatients.has(patientId)) {
          seenPatients.add(patientId);
          patientIds.push(patientId);
        }
        (isNew ? added : old).add(patientId);
        continue;
      }
      const nestedId = GROUP_REFERENCE.exec(reference)?.[1];
      if (nestedId !== undefined) nested.push({ id: nestedId, required: false, addedAfter: isNew });
    }
    pending.push(...nested.reverse());
  }
  // A patient that is also an older member through another path is not "new".
  return { patientIds, addedSince: patientIds.filter((id) => added.has(id) && !old.has(id)) };
}
