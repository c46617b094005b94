import type { ClientRecord } from '../../storage/types.js';
import { PLATFORM_ADMIN_SCOPE, PROJECT_ADMIN_SCOPE, isAdminScope } from './admin-scopes.js';
import { splitScopes } from './scopes.js';

/**
 * The scopes a client may be granted: its registered `scope` (without administration scopes, which
 * only the role gives), plus, for a project admin, `system/*.*` and `project:admin`, and for the
 * super admin `system/*.*` and `platform:admin`. `system/*.*` is added because an admin role already
 * permits everything in its project (so a generic SMART client asking such a client's token for
 * `system/*.read` is not refused); the admin scopes make the role usable by a token at all.
 */
export function allowedScopes(client: ClientRecord): string[] {
  const scopes = splitScopes(client.scope).filter((scope) => !isAdminScope(scope));
  if ((client.admin || client.superAdmin) && !scopes.includes('system/*.*')) scopes.push('system/*.*');
  if (client.admin) scopes.push(PROJECT_ADMIN_SCOPE);
  if (client.superAdmin) scopes.push(PLATFORM_ADMIN_SCOPE);
  return scopes;
}
