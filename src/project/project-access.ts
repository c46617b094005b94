import type { Principal } from '../http/principal.js';

/**
 * What a principal may do with one project's administration:
 * - `allowed`: the super admin, or an admin of that project;
 * - `forbidden`: a non-admin acting in that project (it knows the project exists);
 * - `hidden`: anyone else (answered 404 so project ids cannot be probed).
 */
export type ProjectAdminAccess = 'allowed' | 'forbidden' | 'hidden';

/** The access `principal` has to the administration of project `projectId`. */
export function projectAdminAccess(principal: Principal, projectId: string): ProjectAdminAccess {
  if (principal.superAdmin) return 'allowed';
  if (principal.projectId !== projectId) return 'hidden';
  return principal.admin ? 'allowed' : 'forbidden';
}

/** Default `$init` policy: only the super admin creates projects. */
export function superAdminOnly(principal: Principal): boolean {
  return principal.superAdmin;
}
