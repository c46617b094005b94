/**
 * The token endpoint's grants for signed-in users (SMART App Launch): `authorization_code`
 * (RFC 6749 §4.1.3, PKCE RFC 7636 §4.5) and `refresh_token` (RFC 6749 §6, rotated).
 *
 * Each request is checked whole before it changes anything: a refusal (a wrong `redirect_uri` or
 * verifier, a scope beyond the grant, a client that may no longer have the scopes) leaves the code
 * or refresh token as it was (RFC 6749 §6). Then the tokens are issued, and the code or refresh token
 * is spent last. Presented again (a replay, or a second request racing the first), it revokes its
 * whole authorization: `userTokens` extends the authorization before handing tokens out and every
 * use of them reads it, so the tokens of the request that won the race die too.
 */
import type { RoleCapping } from '../../audit/events.js';
import { OAuthError } from '../../http/http-error.js';
import type { ClientRecord, GrantRecord, UserRecord } from '../../storage/types.js';
import { formParam, type FormParams } from '../client/client-authentication.js';
import { allowedScopes } from '../access/client-scopes.js';
import { capScopes, userRoles } from '../access/group-roles.js';
import { intersectScopes, scopeImplied, splitScopes } from '../access/scopes.js';
import {
  grantUser,
  pkceMatches,
  secretKey,
  userTokens,
  type CodeGrantData,
  type IssuedUserTokens,
  type RefreshGrantData,
  type UserGrantConfig,
  type UserTokenInput,
} from './user-grants.js';
import type { TokenResponse } from './token-response.js';

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
  /** The roles of the user's groups capped the refresh: which groups, and what they capped. */
  roles?: RoleCapping;
  /** The refresh was refused because those roles allow none of its data scopes. */
  refusedByRoles?: boolean;
}

/** A code or refresh token as presented: its record, with the authorization it belongs to. */
type PresentedGrant = GrantRecord & { family: string };

const invalidGrant = (message: string) => new OAuthError(400, 'invalid_grant', message);

const noLongerGrantable = () =>
  new OAuthError(400, 'invalid_scope', 'The client may no longer be granted these scopes');

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
): Promise<TokenResponse> {
  const grant = await presentedCode(request, config);
  const data = grant.data as CodeGrantData;
  const user = await grantUser(config, grant);
  request.seen.profile = `${user.userType}/${user.profileId}`;
  const scopes = userScopes(request.client, data.scopes);
  if (scopes.length === 0) throw noLongerGrantable();
  const issued = await userTokens(config, {
    ...tokenInput(request, grant, user),
    scopes,
    ...(data.nonce ? { nonce: data.nonce } : {}),
  });
  await spend(config, request, grant, issued);
  return issued.response;
}

/**
 * The code of the request, once its client, `redirect_uri` and `code_verifier` match (a wrong guess
 * does not burn it). A code used already revokes what it gave (RFC 6749 §4.1.2).
 */
async function presentedCode(request: UserGrantRequest, config: UserGrantConfig): Promise<PresentedGrant> {
  const { params, client } = request;
  const code = formParam(params, 'code');
  if (!code) throw new OAuthError(400, 'invalid_request', 'code is missing');
  const grant = await config.grants.get('code', secretKey(code));
  if (!grant?.family || grant.clientId !== client.id) throw invalidGrant('The code is invalid or expired');
  request.seen.userId = grant.userId;
  const presented = { ...grant, family: grant.family };
  if (grant.used) await reused(config, request, presented);
  const data = grant.data as CodeGrantData;
  if (formParam(params, 'redirect_uri') !== data.redirectUri) {
    throw invalidGrant('redirect_uri does not match the authorization request');
  }
  if (!pkceMatches(formParam(params, 'code_verifier'), data.codeChallenge)) {
    throw invalidGrant('code_verifier does not match the code_challenge');
  }
  return presented;
}

/**
 * The scopes within the roles of the user's groups as they are now (docs/login.md, "Roles"), told
 * to the audit; `invalid_scope` when the roles leave none of the data scopes.
 */
async function withinRoles(
  config: UserGrantConfig,
  request: UserGrantRequest,
  user: UserRecord,
  scopes: string[],
): Promise<string[]> {
  const roles = await userRoles(config.storage, user);
  if (!roles) return scopes;
  const result = capScopes(scopes, roles.cap);
  request.seen.roles = { groups: roles.groups, capped: result.capped };
  if (!result.noData) return result.scopes;
  request.seen.refusedByRoles = true;
  throw new OAuthError(
    400,
    'invalid_scope',
    "The roles of the user's groups allow none of this grant's data",
  );
}

/**
 * `grant_type=refresh_token`: rotates the refresh token (the used one is kept, marked, until it
 * expires; presenting it again revokes its whole authorization) and issues a new access token with
 * the grant's scopes or, with `scope`, those asked for, which the grant must imply, within the roles
 * of the user's groups as they are now. The new refresh token keeps the grant's scopes (RFC 6749 §6):
 * a role narrows each access token, never the grant.
 */
export async function refreshTokens(
  request: UserGrantRequest,
  config: UserGrantConfig,
): Promise<TokenResponse> {
  const grant = await presentedRefreshToken(request, config);
  const data = grant.data as RefreshGrantData;
  const asked = askedScopes(request.params, data.scopes);
  const user = await grantUser(config, grant);
  request.seen.profile = `${user.userType}/${user.profileId}`;
  const allowed = userScopes(request.client, asked);
  if (allowed.length === 0) throw noLongerGrantable();
  const scopes = await withinRoles(config, request, user, allowed);
  const issued = await userTokens(config, {
    ...tokenInput(request, grant, user),
    // The new access token names the refresh scope it was granted, as the first one did.
    scopes: [...new Set([...scopes, ...data.scopes.filter(isRefreshScope)])],
    grantScopes: data.scopes,
  });
  await spend(config, request, grant, issued);
  request.seen.refresh = 'rotated';
  return issued.response;
}

const isRefreshScope = (scope: string) => scope === 'offline_access' || scope === 'online_access';

/** The refresh token of the request, its client's; one used already revokes its authorization. */
async function presentedRefreshToken(
  request: UserGrantRequest,
  config: UserGrantConfig,
): Promise<PresentedGrant> {
  const token = formParam(request.params, 'refresh_token');
  if (!token) throw new OAuthError(400, 'invalid_request', 'refresh_token is missing');
  const grant = await config.grants.get('refresh', secretKey(token));
  if (!grant?.family || grant.clientId !== request.client.id) {
    throw invalidGrant('The refresh token is invalid or expired');
  }
  request.seen.userId = grant.userId;
  const presented = { ...grant, family: grant.family };
  if (grant.used) await reused(config, request, presented);
  return presented;
}

/**
 * The scopes a refresh asks for: without `scope`, its grant's; with one, only scopes the grant
 * implies (SMART App Launch 2.x "Refresh access token": a subset of the scopes granted in the
 * original launch; `scopeImplied` says which), else `invalid_scope`.
 */
function askedScopes(params: FormParams, granted: readonly string[]): readonly string[] {
  const scope = formParam(params, 'scope');
  if (scope === undefined) return granted;
  const asked = splitScopes(scope);
  if (asked.length === 0) throw new OAuthError(400, 'invalid_scope', 'scope is empty');
  if (!asked.every((s) => scopeImplied(granted, s))) {
    throw new OAuthError(400, 'invalid_scope', 'A refresh may ask only for scopes its grant implies');
  }
  return asked;
}

/** What every user token of a request shares. */
function tokenInput(
  request: UserGrantRequest,
  grant: PresentedGrant,
  user: UserTokenInput['user'],
): Omit<UserTokenInput, 'scopes'> {
  const { patient } = grant.data as { patient?: string };
  return {
    client: request.client,
    user,
    family: grant.family,
    issuer: request.issuer,
    audience: request.audience,
    fhirBase: request.fhirBase,
    lifetime: request.lifetime,
    ...(patient ? { patient } : {}),
  };
}

/**
 * Spends the code or refresh token the tokens were just issued for. Gone meanwhile (expired, or its
 * authorization revoked): `invalid_grant`. Spent meanwhile by a request racing this one: reuse, which
 * revokes the authorization, with the tokens of both requests.
 */
async function spend(
  config: UserGrantConfig,
  request: UserGrantRequest,
  grant: PresentedGrant,
  issued: IssuedUserTokens,
): Promise<void> {
  const used = await config.grants.use(grant.kind, grant.key);
  if (used?.firstUse) return;
  if (issued.refreshKey) await config.grants.take('refresh', issued.refreshKey);
  if (used) await reused(config, request, grant);
  throw invalidGrant(
    grant.kind === 'code' ? 'The code is invalid or expired' : 'The refresh token is invalid or expired',
  );
}

/**
 * A code or refresh token used already came again: its whole authorization is revoked (RFC 6749
 * §4.1.2 for codes, RFC 9700 §4.14.2 for rotated refresh tokens): every refresh token of it, and
 * every access token issued from it (they name it). Audited as `reuse`.
 */
async function reused(
  config: UserGrantConfig,
  request: UserGrantRequest,
  grant: PresentedGrant,
): Promise<never> {
  await config.grants.revoke({ projectId: grant.projectId, family: grant.family });
  if (grant.kind === 'code') {
    request.seen.codeReuse = true;
    throw invalidGrant('The code was already used');
  }
  request.seen.refresh = 'reuse';
  throw invalidGrant('The refresh token was already used: every token of its grant is revoked');
}
