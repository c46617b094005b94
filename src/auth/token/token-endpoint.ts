import { isResourceType } from '../../common/resource-types.js';
import { OAuthError } from '../../http/http-error.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, GrantStore, Storage } from '../../storage/types.js';
import { issueAccessToken } from '../access/access-token.js';
import {
  authenticateClient,
  formParam,
  invalidClient,
  parseClientCredentials,
  type ClientAuthMethod,
  type ClientCredentials,
  type FormParams,
} from '../client/client-authentication.js';
import type { ClientJwks } from '../client/client-jwks.js';
import { allowedScopes } from '../access/client-scopes.js';
import { verifyClientSecret } from '../client/client-secret.js';
import { FailureLimitError, type FailureLimiter } from '../client/failure-limiter.js';
import { intersectScopes, splitScopes } from '../access/scopes.js';
import type { SigningKeys } from '../keys/signing-keys.js';
import { exchangeCode, refreshTokens, type UserGrantSeen } from './user-token-grants.js';
import { secretKey } from './user-grants.js';
import type { TokenResponse } from './token-response.js';

/** One token request, as the router hands it over. */
export interface TokenRequest {
  params: FormParams;
  authorization: string | undefined;
  /** Absolute URL of the token endpoint (the `aud` client assertions must carry). */
  tokenUrl: string;
  /** `iss` of the token. */
  issuer: string;
  /** `aud` of the token. */
  audience: string;
  /** Remote address, for failure limiting. */
  address: string;
  /**
   * Set by `handleTokenRequest` as it learns them (for the audit event): the client id the caller
   * claimed, then the client once authenticated.
   */
  seen?: { claimedClientId?: string; client?: ClientRecord; grantType?: string; user?: UserGrantSeen };
  /** The FHIR base URL (the `fhirUser` of an id_token is absolute under it). @default audience */
  fhirBase?: string;
}

/** Resolved configuration of a token endpoint. */
export interface TokenEndpointConfig {
  storage: Storage;
  keys: SigningKeys;
  jwks: ClientJwks;
  limiter: FailureLimiter;
  methods: readonly ClientAuthMethod[];
  algorithms: readonly string[];
  maxAssertionLifetime: number;
  clockTolerance: number;
  accessTokenLifetime: number;
  accessTokenLifetimeCap: number;
  /**
   * Where codes and refresh tokens are (SMART App Launch): without it, only `client_credentials`
   * is supported.
   */
  grants?: GrantStore;
  /** Refresh token lifetime for `offline_access`, seconds. */
  refreshTokenLifetime: number;
  /** Refresh token lifetime for `online_access`, seconds. */
  onlineRefreshTokenLifetime: number;
  /** Clock (epoch ms). */
  now: () => number;
}

/**
 * Requested ∩ allowed. An admin client's allowed scopes include `project:admin` (the super admin's
 * `platform:admin`): a request that names other scopes only gets a token without the role.
 */
// A SMART resource scope's context and resource type, whatever its permission part.
const SMART_SCOPE_TYPE = /^(?:system|user|patient)\/([^.]*)\./;

/**
 * Checks a `scope` parameter before anything is granted: present but empty, or naming a resource
 * type FHIR R4 does not define (`system/Foo.read`), is `invalid_scope` (RFC 6749 §5.2) rather
 * than silently narrowed away.
 */
function checkRequestedScope(params: FormParams): void {
  const raw = params.scope;
  if (raw === undefined || Array.isArray(raw)) return;
  if (splitScopes(raw).length === 0) throw new OAuthError(400, 'invalid_scope', 'scope is empty');
  for (const scope of splitScopes(raw)) {
    const type = SMART_SCOPE_TYPE.exec(scope)?.[1];
    if (type !== undefined && type !== '*' && !isResourceType(type)) {
      throw new OAuthError(400, 'invalid_scope', `Unknown resource type in scope ${scope}`);
    }
  }
}

function grantedScopes(client: ClientRecord, requested: string | undefined): string[] {
  const allowed = allowedScopes(client);
  // No scope requested: grant what the client may have (RFC 6749 §3.3 lets the server pick a default).
  if (requested === undefined) return allowed;
  const wanted = splitScopes(requested);
  const granted = intersectScopes(wanted, allowed);
  if (wanted.length > 0 && granted.length === 0) {
    throw new OAuthError(400, 'invalid_scope', 'None of the requested scopes may be granted to this client');
  }
  return granted;
}

/** The limiter's refusals as OAuth errors: 429 `slow_down`, or 503 `temporarily_unavailable` when busy. */
function limitError(error: FailureLimitError): OAuthError {
  const headers = { 'Retry-After': String(error.retryAfterSeconds) };
  return error.reason === 'busy'
    ? new OAuthError(503, 'temporarily_unavailable', error.message, { headers, cause: error })
    : new OAuthError(429, 'slow_down', error.message, { headers, cause: error });
}

async function admit(limiter: FailureLimiter, address: string, clientId: string | undefined) {
  try {
    return await limiter.begin(address, clientId);
  } catch (error) {
    throw error instanceof FailureLimitError ? limitError(error) : error;
  }
}

/**
 * Answers a `client_credentials` token request (RFC 6749 §4.4, SMART Backend Services): authenticates
 * the client, grants requested ∩ allowed scopes and signs an access token. Throws `OAuthError`.
 * Failed authentications are counted per address, and secret failures per client id and address
 * too (`FailureLimiter`); a caller over a limit gets 429 `slow_down`, and a secret check that finds
 * the concurrency cap and its queue full gets 503 `temporarily_unavailable`, both with `Retry-After`.
 */
export async function handleTokenRequest(
  request: TokenRequest,
  config: TokenEndpointConfig,
): Promise<TokenResponse> {
  const { params } = request;
  const grantType = formParam(params, 'grant_type');
  if (!grantType) throw new OAuthError(400, 'invalid_request', 'grant_type is missing');
  if (request.seen) request.seen.grantType = grantType;
  if ((grantType === 'authorization_code' || grantType === 'refresh_token') && config.grants) {
    return userGrant(grantType, request, config, config.grants);
  }
  if (grantType !== 'client_credentials') {
    throw new OAuthError(
      400,
      'unsupported_grant_type',
      config.grants
        ? 'grant_type must be client_credentials, authorization_code or refresh_token'
        : 'Only grant_type=client_credentials is supported',
    );
  }
  const scope = formParam(params, 'scope');
  checkRequestedScope(params);
  const client = await authenticateRequestClient(request, config, false);
  if (request.seen) request.seen.client = client;
  const scopes = grantedScopes(client, scope);
  // Admins may always have `system/*.*` and their administration scope, so only others end up here.
  if (scopes.length === 0) {
    throw new OAuthError(400, 'unauthorized_client', 'The client may be granted no scope');
  }
  const lifetime = accessLifetime(client, config);
  const issued = await issueAccessToken(config.keys, {
    client,
    scopes,
    issuer: request.issuer,
    audience: request.audience,
    lifetime,
    now: config.now(),
  });
  return {
    access_token: issued.token,
    token_type: 'bearer',
    expires_in: issued.expiresIn,
    scope: issued.claims.scope,
  };
}

function accessLifetime(client: ClientRecord, config: TokenEndpointConfig): number {
  const own = client.accessTokenLifetime;
  return Math.min(
    own !== undefined && Number.isFinite(own) && own > 0 ? own : config.accessTokenLifetime,
    config.accessTokenLifetimeCap,
  );
}

/** `authorization_code` and `refresh_token` (SMART App Launch): a public client names itself only. */
async function userGrant(
  grantType: 'authorization_code' | 'refresh_token',
  request: TokenRequest,
  config: TokenEndpointConfig,
  grants: GrantStore,
): Promise<TokenResponse> {
  const client = await (grantType === 'refresh_token' && anonymousRequest(request)
    ? refreshingPublicClient(request, config, grants)
    : authenticateRequestClient(request, config, true));
  if (client.projectId === null)
    throw new OAuthError(400, 'unauthorized_client', 'The client belongs to no project');
  const seen: UserGrantSeen = {};
  if (request.seen) request.seen.user = seen;
  const userRequest = {
    params: request.params,
    client,
    issuer: request.issuer,
    audience: request.audience,
    fhirBase: request.fhirBase ?? request.audience,
    lifetime: accessLifetime(client, config),
    seen,
  };
  const userConfig = {
    storage: config.storage,
    grants,
    keys: config.keys,
    refreshTokenLifetime: config.refreshTokenLifetime,
    onlineRefreshTokenLifetime: config.onlineRefreshTokenLifetime,
    now: config.now,
  };
  return grantType === 'authorization_code'
    ? exchangeCode(userRequest, userConfig)
    : refreshTokens(userRequest, userConfig);
}

/** No credentials and no `client_id`: a public client refreshing (RFC 6749 §6 asks it for neither). */
function anonymousRequest(request: TokenRequest): boolean {
  return request.params.client_id === undefined && withoutCredentials(request.params, request.authorization);
}

/** The client a refresh token was issued to, when it is a public one (else `invalid_client`). */
async function refreshingPublicClient(
  request: TokenRequest,
  config: TokenEndpointConfig,
  grants: GrantStore,
): Promise<ClientRecord> {
  const token = formParam(request.params, 'refresh_token');
  const grant = token === undefined ? undefined : await grants.get('refresh', secretKey(token));
  if (!grant) throw new OAuthError(400, 'invalid_grant', 'The refresh token is invalid or expired');
  if (request.seen) request.seen.claimedClientId = grant.clientId;
  const client = await publicClient(config.storage, grant.clientId);
  if (request.seen) request.seen.client = client;
  return client;
}

/** Whether the request carries no client credentials at all (a public client's request). */
function withoutCredentials(params: FormParams, authorization: string | undefined): boolean {
  return (
    authorization === undefined &&
    params.client_secret === undefined &&
    params.client_assertion === undefined &&
    params.client_assertion_type === undefined
  );
}

/**
 * A public client (registered `public`) names itself by `client_id` alone (RFC 6749 §2.3, §3.2.1);
 * it must still be active in an existing project. Every failure is `invalid_client`.
 */
async function publicClient(storage: Storage, clientId: string): Promise<ClientRecord> {
  let client: ClientRecord;
  try {
    client = await storage.readClient(clientId);
  } catch (error) {
    if (error instanceof NotFoundError) throw invalidClient('Unknown client', false);
    throw error;
  }
  if (!client.public) throw invalidClient('A confidential client must authenticate', false);
  if (client.revoked) throw invalidClient('The client is revoked', false);
  try {
    await storage.readProject(client.projectId ?? '');
  } catch (error) {
    if (error instanceof NotFoundError)
      throw invalidClient('The client project no longer exists', false, error);
    throw error;
  }
  return client;
}

/**
 * Authenticates the client of a token request (failures counted by the limiter, see
 * `handleTokenRequest`); with `allowPublic`, a request without credentials names a public client.
 * The revocation and introspection endpoints authenticate their callers the same way.
 */
export async function authenticateRequestClient(
  request: TokenRequest,
  config: TokenEndpointConfig,
  allowPublic: boolean,
): Promise<ClientRecord> {
  const { params } = request;
  const publicId = formParam(params, 'client_id');
  if (allowPublic && publicId !== undefined && withoutCredentials(params, request.authorization)) {
    if (request.seen) request.seen.claimedClientId = publicId;
    const client = await publicClient(config.storage, publicId);
    if (request.seen) request.seen.client = client;
    return client;
  }
  let credentials: ClientCredentials;
  try {
    credentials = parseClientCredentials(params, request.authorization);
  } catch (error) {
    // No usable credentials: counted against the address only.
    if (error instanceof OAuthError && error.error === 'invalid_client') {
      try {
        await config.limiter.recordFailure(request.address);
      } catch (limited) {
        if (limited instanceof FailureLimitError) throw limitError(limited);
        throw limited;
      }
    }
    throw error;
  }

  // Secrets can be guessed, so their failures also count per client id and address; a signed
  // assertion cannot, so private_key_jwt counts against the address only.
  if (request.seen) request.seen.claimedClientId = credentials.clientId;
  const secretMethod = credentials.method !== 'private_key_jwt';
  const attempt = await admit(
    config.limiter,
    request.address,
    secretMethod ? credentials.clientId : undefined,
  );
  let failed = false;
  let client: ClientRecord;
  try {
    client = await authenticateClient(credentials, {
      storage: config.storage,
      keysFor: (c) => config.jwks.keysFor(c),
      tokenUrl: request.tokenUrl,
      algorithms: config.algorithms,
      maxAssertionLifetime: config.maxAssertionLifetime,
      clockTolerance: config.clockTolerance,
      methods: config.methods,
      verifySecret: (secret, hash) => config.limiter.checkSecret(() => verifyClientSecret(secret, hash)),
      now: config.now(),
    });
  } catch (error) {
    if (error instanceof FailureLimitError) throw limitError(error);
    failed = error instanceof OAuthError && error.error === 'invalid_client';
    throw error;
  } finally {
    await attempt.end(failed);
  }
  if (request.seen) request.seen.client = client;
  return client;
}
