/**
 * The roles of a project's SCIM Groups as `Project/{id}/$settings` sets them (`groupRole`
 * parameters) and the `Project` resource shows them: for each group (by `displayName`,
 * case-insensitive), the SMART `user/` scopes its active members may be granted at most when they
 * sign in to an app. See docs/login.md, "Roles".
 */
import { parseResourceScope, splitScopes } from '../auth/access/scopes.js';
import { groupNameKey } from '../common/scim-managed.js';
import { isResourceType } from '../common/resource-types.js';
import type { ProjectGroupRole } from '../storage/types.js';
import { invalidParameter, type ParameterParts } from '../http/fhir-parameters.js';

/** The parts of one `groupRole`. */
const GROUP_ROLE_PARTS = {
  group: { type: 'string', required: true },
  scope: { type: 'string', required: true },
} as const;

/** The `$settings` parameter of the roles: repeated, one per group. */
export const GROUP_ROLE_PARAMETERS = {
  groupRole: { parts: GROUP_ROLE_PARTS, repeats: true },
} as const;

/** The `reset` value that removes every role. */
export const GROUP_ROLES_RESET = 'groupRoles';

/** Most roles a project may hold, and most scopes a role: a setting, not a data set. */
const MAX_ROLES = 1000;
const MAX_ROLE_SCOPES = 100;

/** Why `text` cannot be a role's scope, or undefined when it can (`user/<type or *>.<permissions>`). */
function scopeProblem(text: string): string | undefined {
  if (!text.startsWith('user/')) return `'${text}' is not a user/ scope: a role caps what users are granted`;
  const scope = parseResourceScope(text);
  if (!scope) return `'${text}' is not a SMART resource scope this server grants (user/<type or *>.<cruds>)`;
  if (scope.resourceType !== '*' && !isResourceType(scope.resourceType)) {
    return `'${text}' names no FHIR R4 resource type`;
  }
  return undefined;
}

/** One role, checked (400 at the value at fault). */
function readRole(item: ParameterParts<typeof GROUP_ROLE_PARTS>): ProjectGroupRole {
  const { group, scope } = item.parts;
  const scopes = [...new Set(splitScopes(scope.value))];
  if (scopes.length > MAX_ROLE_SCOPES) {
    throw invalidParameter(scope.expression, `A role holds at most ${MAX_ROLE_SCOPES} scopes`);
  }
  for (const text of scopes) {
    const problem = scopeProblem(text);
    if (problem) throw invalidParameter(scope.expression, `'groupRole' scope ${problem}`);
  }
  return { group: group.value.trim(), scopes };
}

/**
 * The roles among read `$settings` parameters: undefined when none is given (the stored ones stay),
 * else the whole new list. 400 for a scope that is not a `user/` resource scope of an R4 type (or
 * `*`), and for a group named twice (case-insensitively).
 */
export function readGroupRoles(
  items: ParameterParts<typeof GROUP_ROLE_PARTS>[],
): ProjectGroupRole[] | undefined {
  if (items.length === 0) return undefined;
  if (items.length > MAX_ROLES) {
    throw invalidParameter(items[MAX_ROLES]!.expression, `A project holds at most ${MAX_ROLES} roles`);
  }
  const seen = new Set<string>();
  return items.map((item) => {
    const role = readRole(item);
    const key = groupNameKey(role.group);
    if (seen.has(key)) {
      throw invalidParameter(item.parts.group.expression, `The group '${role.group}' has two roles`);
    }
    seen.add(key);
    return role;
  });
}

/** A role as the `Project` resource shows it: the scopes as one space-separated string. */
export interface GroupRoleView {
  group: string;
  scope: string;
}

/** The roles as the `Project` resource shows them. */
export function groupRolesView(roles: readonly ProjectGroupRole[]): GroupRoleView[] {
  return roles.map((role) => ({ group: role.group, scope: role.scopes.join(' ') }));
}
