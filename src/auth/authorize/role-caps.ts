/**
 * The roles of the signed-in user's SCIM Groups at the authorization endpoint (docs/login.md,
 * "Roles"): once the user is known, the pending authorization's scopes are capped, before the
 * consent page shows them.
 */
import type { Request, Response } from 'express';
import type { ClientRecord, UserRecord } from '../../storage/types.js';
import { capScopes, userRoles } from '../access/group-roles.js';
import type { AuthorizationEndpoint } from './authorization-endpoint.js';
import { redirectWith } from './authorization-request.js';
import { setTicketCookie, type TicketGrant } from './pending-authorization.js';

/**
 * Caps the pending authorization's scopes by the roles of `user`'s groups, and keeps what was
 * capped, by which groups, for the audit of the user's answer. When the roles leave none of the
 * data scopes the app asked for, the authorization ends: the refusal is audited, the app is told
 * `access_denied` (RFC 6749 §4.1.2.1) and this resolves false.
 */
export async function capByRoles(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
  grant: TicketGrant,
  client: ClientRecord,
  user: UserRecord,
): Promise<boolean> {
  const roles = await userRoles(endpoint.storage, user);
  if (!roles) return true;
  const { data } = grant;
  const result = capScopes(data.scopes, roles.cap);
  const capping = { groups: roles.groups, capped: result.capped };
  if (!result.noData) {
    data.scopes = result.scopes;
    data.roles = capping;
    return true;
  }
  await endpoint.grants.take('ticket', grant.key);
  setTicketCookie(endpoint, req, res, grant.key, '', 0);
  const refusal = { action: 'consent', result: 'refused', reason: 'roles', scopes: data.scopes } as const;
  endpoint.audit(req, { ...refusal, roles: capping }, client, user);
  res.redirect(
    302,
    redirectWith(data.redirectUri, {
      error: 'access_denied',
      error_description: 'The roles of your groups allow none of the data this app asked for',
      state: data.state,
    }),
  );
  return false;
}
