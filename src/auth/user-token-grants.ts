/**
 * The token endpoint's grants for signed-in users (SMART App Launch): `authorization_code`
 * (RFC 6749 §4.1.3, PKCE RFC 7636 §4.5) and `refresh_token` (RFC 6749 §6, rotated).
 */
import { OAuthError } from '../http/http-error.js';
import type { ClientRecord } from '../storage/types.js';
import { formParam, type FormParams } from './client-authentication.js';
import { allowedScopes } from './client-scopes.js';
import { intersectScopes, splitScopes } from './scopes.js';
import {
  grantUser,
  pkceMatches,
  secretKey,
  userTokens,
  type CodeGrantData,
  type RefreshGrantData,
  type UserGrantConfig,
  type UserTokenResponse,
} from './user-grants.js';

/** One request of a user grant, after its client is authenticated. */
export interface UserGrantRequest {
  params: FormParams;
  client: ClientRecord;
  issuer: string;
  audience: string;
  fhirBase: string;
  /** Access token lifetime, seconds. */
  lifetime: number;
  /** Told what happened, for the audit trail. */
  seen: UserGrantSeen;
}

/** What a user grant learned, for the audit trail. */
export interface UserGrantSeen {
  userId?: string;
  profile?: string;
  /** `rotated`: a refresh token was used and replaced; `reuse`: a used one came again. */
  refresh?: 'rotated' | 'reuse';
  /** The code came again: the tokens issued from it were revoked. */
  codeReuse?: boolean;
}

const invalidGrant = (message: string) => new OAuthError(400, 'invalid_grant', message);

/** Scopes a user token may hold now: granted ∩ the client's current scopes, never a system or admin one. */
export function userScopes(client: ClientRecord, scopes: readonly string[]): string[] {
  const allowed = allowedScopes({ ...client, admin: false, superAdmin: false });
  return intersectScopes(
    scopes.filter((s) => !s.startsWith('system/')),
    allowed.filter((s) => !s.startsWith('system/')),
  );
}

/** `grant_type=authorization_code`: checks the code, its client, `redirect_uri` and PKCE, then issues. */
export async function exchangeCode(
  request: UserGrantRequest,
  config: UserGrantConfig,
): Promise<UserTokenResponse> {
  const { params, client } = request;
  const code = formParam(params, 'code');
  if (!code) throw new OAuthError(400, 'invalid_request', 'code is missing');
  const key = secretKey(code);
  const grant = await config.grants.get('code', key);
  if (!grant || grant.clientId !== client.id) throw invalidGrant('The code is invalid or expired');
  const data = grant.data as CodeGrantData;
  if (grant.used) {
    // RFC 6749 §4.1.2: a code used twice revokes what it gave.
    await revokeCodeTokens(config, grant.projectId, grant.family, data);
    request.seen.codeReuse = true;
    throw invalidGrant('The code was already used');
  }
  if (formParam(params, 'redirect_uri') !== data.redirectUri) {
    throw invalidGrant('redirect_uri does not match the authorization request');
  }
  if (!pkceMatches(formParam(params, 'code_verifier'), data.codeChallenge)) {
    throw invalidGrant('code_verifier does not match the code_challenge');
  }
  // Only now is the code spent: a wrong verifier (an attacker's) does not burn it for the app.
  const used = await config.grants.use('code', key);
  if (!used?.firstUse) {
    await revokeCodeTokens(config, grant.projectId, grant.family, data);
    request.seen.codeReuse = true;
    throw invalidGrant('The code was already used');
  }
  const user = await grantUser(config, grant);
  request.seen.userId = user.id;
  request.seen.profile = `${user.userType}/${user.profileId}`;
  const scopes = userScopes(client, data.scopes);
  if (scopes.length === 0)
    throw new OAuthError(400, 'invalid_scope', 'The client may no longer be granted these scopes');
  const { response, access } = await userTokens(config, {
    client,
    user,
    scopes,
    family: grant.family!,
    issuer: request.issuer,
    audience: request.audience,
    fhirBase: request.fhirBase,
    lifetime: request.lifetime,
    ...(data.patient ? { patient: data.patient } : {}),
    ...(data.nonce ? { nonce: data.nonce } : {}),
  });
  await config.grants.put({
    ...used.grant,
    data: { ...data, accessJti: access.claims.jti, accessExpiresAt: access.claims.exp * 1000 },
  });
  return response;
}

async function revokeCodeTokens(
  config: UserGrantConfig,
  projectId: string,
  family: string | undefined,
  data: CodeGrantData,
): Promise<void> {
  if (family) await config.grants.revoke({ projectId, family });
  if (data.accessJti && data.accessExpiresAt) {
    await config.grants.put({
      kind: 'revoked-token',
      key: data.accessJti,
      projectId,
      clientId: '',
      expiresAt: data.accessExpiresAt,
      data: {},
    });
  }
}

/**
 * `grant_type=refresh_token`: rotates the refresh token (the used one is kept, marked, until it
 * expires; presenting it again revokes its whole family) and issues a new access token, with the
 * original scopes or fewer (`scope`).
 */
export async function refreshTokens(
  request: UserGrantRequest,
  config: UserGrantConfig,
): Promise<UserTokenResponse> {
  const { params, client } = request;
  const token = formParam(params, 'refresh_token');
  if (!token) throw new OAuthError(400, 'invalid_request', 'refresh_token is missing');
  const key = secretKey(token);
  const grant = await config.grants.get('refresh', key);
  if (!grant || grant.clientId !== client.id) throw invalidGrant('The refresh token is invalid or expired');
  request.seen.userId = grant.userId;
  const used = await config.grants.use('refresh', key);
  if (!used) throw invalidGrant('The refresh token is invalid or expired');
  if (!used.firstUse) {
    if (grant.family) await config.grants.revoke({ projectId: grant.projectId, family: grant.family });
    request.seen.refresh = 'reuse';
    throw invalidGrant('The refresh token was already used: every token of its grant is revoked');
  }
  const user = await grantUser(config, grant);
  request.seen.profile = `${user.userType}/${user.profileId}`;
  const data = grant.data as RefreshGrantData;
  let scopes = data.scopes;
  const asked = formParam(params, 'scope');
  if (asked !== undefined) {
    const wanted = splitScopes(asked);
    if (wanted.some((s) => !data.scopes.includes(s))) {
      throw new OAuthError(400, 'invalid_scope', 'A refresh may ask for the granted scopes or fewer');
    }
    scopes = wanted;
  }
  scopes = userScopes(client, scopes);
  if (scopes.length === 0)
    throw new OAuthError(400, 'invalid_scope', 'The client may no longer be granted these scopes');
  const { response } = await userTokens(config, {
    client,
    user,
    // A refresh keeps the refresh scope it was granted, so the new token can be refreshed again.
    scopes: [
      ...new Set([...scopes, ...data.scopes.filter((s) => s === 'offline_access' || s === 'online_access')]),
    ],
    family: grant.family ?? key,
    issuer: request.issuer,
    audience: request.audience,
    fhirBase: request.fhirBase,
    lifetime: request.lifetime,
    ...(data.patient ? { patient: data.patient } : {}),
  });
  request.seen.refresh = 'rotated';
  return response;
}
