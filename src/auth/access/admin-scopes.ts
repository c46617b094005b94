/**
 * The administration scopes. They are plain RFC 6749 §3.3 scope tokens (no `/`, so never mistaken for
 * SMART resource scopes) that a token must carry for its principal to hold an administrative role:
 * the client's role says what it may be granted, the token's scope says what it was granted.
 */
import type { ClientRecord } from '../../storage/types.js';

/** Project administration: SCIM users, `$new-client`, client list/read/revoke, `Project` read. */
export const PROJECT_ADMIN_SCOPE = 'project:admin';

/** Platform administration (the super admin): `Project/$init`, administering any project. */
export const PLATFORM_ADMIN_SCOPE = 'platform:admin';

/** Both administration scopes. */
export const ADMIN_SCOPES: readonly string[] = [PROJECT_ADMIN_SCOPE, PLATFORM_ADMIN_SCOPE];

/** True for `project:admin` and `platform:admin`. */
export function isAdminScope(scope: string): boolean {
  return ADMIN_SCOPES.includes(scope);
}

/**
 * The administrative rights of `client` acting with `scopes`: a role counts only when the client holds
 * it and the scopes carry its administration scope.
 */
export function adminRights(
  client: Pick<ClientRecord, 'admin' | 'superAdmin'>,
  scopes: readonly string[],
): { admin: boolean; superAdmin: boolean } {
  return {
    admin: client.admin && scopes.includes(PROJECT_ADMIN_SCOPE),
    superAdmin: client.superAdmin && scopes.includes(PLATFORM_ADMIN_SCOPE),
  };
}
