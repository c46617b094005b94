/**
 * The roles of a project's SCIM Groups (docs/login.md, "Roles"): the project maps a group's
 * `displayName` to the SMART `user/` scopes its active members may be granted at most when they
 * sign in to an app. A user who is an active member (`member.inactive` not true) of one or more
 * mapped groups is capped by the union of their scopes; a user in none is not capped. Sign-in and
 * every refresh read the roles and the membership again.
 */
import { groupNameKey } from '../../common/scim-managed.js';
import { NotFoundError } from '../../storage/errors.js';
import { groupNamesFilter, groupsWithMember } from '../../storage/scim-group-search.js';
import type { ProjectRecord, Storage, StoredResource, UserRecord } from '../../storage/types.js';
import { intersectScopes } from './scopes.js';

/** The roles that cap a user: the mapped groups it is an active member of, and their scopes. */
export interface UserRoles {
  /** The groups' display names, as the groups have them. */
  groups: string[];
  /** The union of their roles' `user/` scopes. */
  cap: string[];
}

/** Whether `group` has `reference` (`Practitioner/…`) as a member that is not inactive. */
function isActiveMember(group: StoredResource, reference: string): boolean {
  const members = Array.isArray(group.member) ? (group.member as unknown[]) : [];
  return members.some((member) => {
    if (typeof member !== 'object' || member === null) return false;
    const { entity, inactive } = member as { entity?: { reference?: unknown }; inactive?: unknown };
    return entity?.reference === reference && inactive !== true;
  });
}

/** The user's project; undefined when it is gone (the user's grants then fail on their own). */
async function projectOf(storage: Storage, user: UserRecord): Promise<ProjectRecord | undefined> {
  try {
    return await storage.readProject(user.projectId);
  } catch (error) {
    if (error instanceof NotFoundError) return undefined;
    throw error;
  }
}

/**
 * The roles that cap `user` now, or undefined when it is an active member of no mapped group (or
 * its project maps none); groups and scopes in the order of the project's roles. One read of the project and one indexed search of the Groups that have
 * the user's profile as a member and one of the mapped names.
 */
export async function userRoles(storage: Storage, user: UserRecord): Promise<UserRoles | undefined> {
  const roles = (await projectOf(storage, user))?.groupRoles ?? [];
  if (roles.length === 0) return undefined;
  const profile = `${user.userType}/${user.profileId}`;
  const found = await groupsWithMember(storage, user.projectId, profile, [
    groupNamesFilter(roles.map((role) => role.group)),
  ]);
  const named = new Map<string, string>();
  for (const group of found) {
    if (typeof group.name === 'string' && isActiveMember(group, profile)) {
      named.set(groupNameKey(group.name), group.name);
    }
  }
  // In the order of the setting, so that the scopes granted are in an order that does not change.
  const groups: string[] = [];
  const cap = new Set<string>();
  for (const role of roles) {
    const name = named.get(groupNameKey(role.group));
    if (name === undefined) continue;
    groups.push(name);
    for (const scope of role.scopes) cap.add(scope);
  }
  return groups.length > 0 ? { groups, cap: [...cap] } : undefined;
}

/** What capping did to the scopes asked for. */
export interface CappedScopes {
  /** The scopes granted. */
  scopes: string[];
  /** The scopes asked for that were narrowed or dropped. */
  capped: string[];
  /** The scopes asked for held data scopes (`user/`, `patient/`) and the cap left none. */
  noData: boolean;
}

const isDataScope = (scope: string) => scope.startsWith('user/') || scope.startsWith('patient/');

/**
 * `scopes` within `cap` (`user/` scopes): each `user/` scope asked for is intersected with the cap
 * (`intersectScopes`: kept as written when one scope of the cap covers it, else narrowed to what
 * each overlapping one permits, else dropped), and so is each `patient/` scope with the same cap read
 * as `patient/` scopes: a launch patient's compartment is within what a `user/` scope reaches for
 * every profile type, so a cap on `user/` access caps `patient/` access too. Other scopes (`openid`,
 * `fhirUser`, `launch/patient`, `offline_access`, …) are kept.
 */
export function capScopes(scopes: readonly string[], cap: readonly string[]): CappedScopes {
  const patientCap = cap.map((scope) => `patient/${scope.slice('user/'.length)}`);
  const granted = new Set<string>();
  const capped: string[] = [];
  for (const scope of scopes) {
    if (!isDataScope(scope)) {
      granted.add(scope);
      continue;
    }
    const within = intersectScopes([scope], scope.startsWith('user/') ? cap : patientCap);
    if (within.length !== 1 || within[0] !== scope) capped.push(scope);
    for (const kept of within) granted.add(kept);
  }
  const result = [...granted];
  return { scopes: result, capped, noData: scopes.some(isDataScope) && !result.some(isDataScope) };
}
