import type { GrantStore } from '../../storage/types.js';
import type { AccessTokenClaims } from './access-token.js';

/**
 * Whether an access token of this server is revoked: its own `jti` was (RFC 7009), or it is a user's
 * token whose authorization (`family`) no longer exists: revoked as a whole (a code or refresh token
 * presented again, RFC 6749 §4.1.2 and RFC 9700 §4.14.2; a refresh token revoked, RFC 7009 §2.1; the
 * user or the app leaving) or expired. The two keyed reads run at once.
 */
export async function accessTokenRevoked(
  grants: GrantStore,
  claims: Pick<AccessTokenClaims, 'jti' | 'family' | 'project_id'>,
): Promise<boolean> {
  const { family } = claims;
  const [revoked, authorization] = await Promise.all([
    grants.get('revoked-token', claims.jti),
    family === undefined ? undefined : grants.get('family', family),
  ]);
  if (revoked) return true;
  return family !== undefined && authorization?.projectId !== claims.project_id;
}
