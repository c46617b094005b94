import { createHash } from 'node:crypto';
import type { Request } from 'express';
import { unauthorized } from '../../http/authenticate.js';
import { HttpError } from '../../http/http-error.js';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { requireStorage } from '../../storage/storage-shape.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, GrantStore, Storage, UserRecord } from '../../storage/types.js';
import {
  AccessTokenError,
  clientPrincipalKind,
  verifyAccessToken,
  type AccessTokenClaims,
} from './access-token.js';
import { accessTokenRevoked } from './access-token-revocation.js';
import { adminRights } from './admin-scopes.js';
import { parseBasicAuthorization } from '../client/client-authentication.js';
import { allowedScopes } from './client-scopes.js';
import { verifyClientSecret } from '../client/client-secret.js';
import {
  FailureLimitError,
  failureLimiter,
  resolveFailureLimitOptions,
  type FailureLimitAttempt,
  type FailureLimitOptions,
} from '../client/failure-limiter.js';
import { tokenIdentity, type PerRequest } from '../token/issuer.js';
import type { Authenticate, Principal } from '../../http/principal.js';
import { intersectScopes, splitScopes } from './scopes.js';
import {
  SIGNING_ALGORITHMS,
  signingKeys as createSigningKeys,
  type SigningKeys,
  type SigningKeysOptions,
} from '../keys/signing-keys.js';

/** Options of `bearerAuth`. */
export interface BearerAuthOptions {
  /** Where clients, projects and signing keys live. */
  storage: Storage;
  /**
   * Public origin (`https://fhir.example.org`), the default issuer.
   * @default undefined (the request's origin)
   */
  baseUrl?: string;
  /**
   * Expected `iss` (or a function of the request computing it); the same as the token router's.
   * @default `baseUrl`, or the request's origin
   */
  issuer?: PerRequest;
  /**
   * Expected `aud` (or a function of the request); the same as the token router's.
   * @default the issuer
   */
  audience?: PerRequest;
  /**
   * The server signing keys (an instance shared with `tokenRouter`, or a new one over `storage`).
   * @default signingKeys(storage, signingKeyOptions)
   */
  signingKeys?: SigningKeys;
  /**
   * Options of the signing keys created when `signingKeys` is not given.
   * @default {}
   */
  signingKeyOptions?: SigningKeysOptions;
  /**
   * Accepted access token `alg` values.
   * @default ['ES256', 'RS256']
   */
  algorithms?: string[];
  /**
   * Clock skew tolerated on `exp`/`iat`, seconds.
   * @default 5
   */
  clockTolerance?: number;
  /**
   * Also accept `Authorization: Basic` with a client id and secret, as some SCIM provisioning
   * clients (Okta) offer. Enable it only on the routes that need it.
   * @default false
   */
  allowBasic?: boolean;
  /**
   * Seconds a successful Basic check is remembered (secret hashing is slow by design). The client is
   * still read on every request, so revocation and secret changes apply at once.
   * @default 300
   */
  basicCacheSeconds?: number;
  /**
   * Limits on failed Basic authentications (per client id and address, and per address) and on
   * secret checks running at once, as the token endpoint's; `false` disables them all. Used only
   * with `allowBasic`. See `FailureLimitOptions`.
   * @default { maxFailuresPerClientAddress: 10, maxFailuresPerAddress: 30, windowSeconds: 300, maxConcurrentSecretChecks: 4, maxQueuedSecretChecks: 64 }
   */
  rateLimit?: FailureLimitOptions | false;
  /**
   * Where revoked access token ids and the authorizations of user tokens are (the token and
   * revocation endpoints'): a revoked token, or a user's token whose authorization was revoked, is
   * refused. Pass the same store as those endpoints.
   * @default storage.grants
   */
  grants?: GrantStore;
  /** Clock (epoch ms), for tests. @default Date.now */
  now?: () => number;
}

const BASIC_CACHE_MAX = 1000;

const BEARER_AUTH_KEYS: OptionKeys<BearerAuthOptions> = {
  storage: true,
  baseUrl: true,
  issuer: true,
  audience: true,
  signingKeys: true,
  signingKeyOptions: true,
  algorithms: true,
  clockTolerance: true,
  allowBasic: true,
  basicCacheSeconds: true,
  rateLimit: true,
  grants: true,
  now: true,
};

/**
 * An `Authenticate` for access tokens issued by `tokenRouter` (`Authorization: Bearer <jwt>`,
 * RFC 6750): checks the signature by a current server key, `alg`, `typ`, `iss`, `aud` and `exp`,
 * then reads the client on every request so a revoked or deleted client (or a deleted project) stops
 * at once, and the token's revocation (its `jti`, and for a user's token its authorization). Granted scopes are re-intersected with the client's current ones, and the principal is an
 * admin (or super admin) only when the client still is one and the token carries `project:admin`
 * (`platform:admin`). Basic credentials act with every scope the client may have. No credentials resolve
 * `undefined` (401); a bad token throws 401 `invalid_token`.
 */
export function bearerAuth(options: BearerAuthOptions): Authenticate {
  requireStorage('bearerAuth', options);
  checkOptionKeys('bearerAuth', options, BEARER_AUTH_KEYS);
  const { storage } = options;
  const keys = options.signingKeys ?? createSigningKeys(storage, options.signingKeyOptions);
  const algorithms = options.algorithms ?? [...SIGNING_ALGORITHMS];
  const clockTolerance = options.clockTolerance ?? 5;
  const now = options.now ?? Date.now;
  const grants = options.grants ?? storage.grants;
  const basicCacheMs = (options.basicCacheSeconds ?? 300) * 1000;
  // key: sha256(client id, secret, stored hash) -> expiry; a changed secret hash misses the cache.
  const basicCache = new Map<string, number>();
  const rateLimit = options.rateLimit ?? {};
  // Validated even when Basic is off, so a bad option fails at start-up either way.
  if (rateLimit !== false) resolveFailureLimitOptions(rateLimit, 'bearerAuth');
  const limiter = failureLimiter(options.allowBasic ? rateLimit : false, {
    owner: 'bearerAuth',
    now,
    ...(storage.failureCounts ? { shared: storage.failureCounts } : {}),
  });

  async function activeClient(
    clientId: string,
    error: (message: string) => HttpError,
  ): Promise<ClientRecord> {
    let client: ClientRecord;
    try {
      client = await storage.readClient(clientId);
    } catch (e) {
      if (e instanceof NotFoundError) throw error('The client no longer exists');
      throw e;
    }
    if (client.revoked) throw error('The client is revoked');
    if (client.projectId === null) {
      if (!client.superAdmin) throw error('The client belongs to no project');
    } else {
      try {
        await storage.readProject(client.projectId);
      } catch (e) {
        if (e instanceof NotFoundError) throw error('The client project no longer exists');
        throw e;
      }
    }
    return client;
  }

  /** The client's role counts only when `scopes` carry its administration scope (and it still holds it). */
  function principalOf(client: ClientRecord, scopes: string[]): Principal {
    return {
      projectId: client.projectId,
      kind: clientPrincipalKind(client),
      id: client.id,
      scopes,
      ...adminRights(client, scopes),
    };
  }

  async function fromBearer(req: Request, token: string): Promise<Principal> {
    const { issuer, audience } = tokenIdentity(req, options);
    const invalid = (message: string) => unauthorized(message, 'invalid_token');
    let claims;
    try {
      claims = await verifyAccessToken(keys, token, {
        issuer,
        audience,
        algorithms,
        clockTolerance,
        now: now(),
      });
    } catch (error) {
      if (error instanceof AccessTokenError) throw invalid('The access token is invalid or expired');
      throw error;
    }
    // The revocation lookups (keyed reads; round trips on PostgreSQL) run beside the client's
    // reads rather than before them. A revoked token is refused as revoked whatever the client
    // check says, as when the lookup came first.
    const [revoked, checked] = await Promise.all([
      grants ? accessTokenRevoked(grants, claims) : false,
      activeClient(claims.client_id, invalid).then(
        (client) => ({ client }),
        (error: unknown) => ({ error }),
      ),
    ]);
    if (revoked) throw invalid('The access token is revoked');
    if ('error' in checked) throw checked.error;
    const { client } = checked;
    if (client.projectId !== claims.project_id) throw invalid('The access token does not match its client');
    const granted = splitScopes(claims.scope);
    const scopes = intersectScopes(granted, allowedScopes(client));
    if (claims.principal_kind === 'user') return userPrincipal(client, claims, scopes, invalid);
    return principalOf(client, scopes);
  }

  /**
   * A user's token counts only while the user exists and is active in the client's project: SCIM
   * deactivating or deleting the user ends every token of theirs at its next use.
   */
  async function userPrincipal(
    client: ClientRecord,
    claims: AccessTokenClaims,
    scopes: string[],
    invalid: (message: string) => HttpError,
  ): Promise<Principal> {
    const projectId = client.projectId;
    if (projectId === null) throw invalid('The access token does not match its client');
    let user: UserRecord;
    try {
      user = await storage.readUser(projectId, claims.sub);
    } catch (e) {
      if (e instanceof NotFoundError) throw invalid('The user no longer exists');
      throw e;
    }
    if (!user.active) throw invalid('The user is not active');
    if (claims.fhirUser !== `${user.userType}/${user.profileId}`)
      throw invalid('The access token does not match its user');
    return {
      projectId,
      kind: 'user',
      id: user.id,
      scopes,
      admin: false,
      superAdmin: false,
      clientId: client.id,
      fhirUser: claims.fhirUser,
      ...(claims.patient === undefined ? {} : { patientId: claims.patient }),
    };
  }

  /** The limiter's refusals: 429 over a failure limit, 503 when too many secret checks are queued. */
  function limitError(error: FailureLimitError): HttpError {
    const headers = { 'Retry-After': String(error.retryAfterSeconds) };
    return error.reason === 'busy'
      ? new HttpError(503, 'ERR_SECRET_CHECKS_BUSY', error.message, { headers, cause: error })
      : new HttpError(429, 'ERR_TOO_MANY_FAILURES', error.message, { headers, cause: error });
  }

  async function fromBasic(id: string, secret: string, address: string): Promise<Principal> {
    let attempt: FailureLimitAttempt;
    try {
      attempt = await limiter.begin(address, id);
    } catch (error) {
      throw error instanceof FailureLimitError ? limitError(error) : error;
    }
    let failed = false;
    try {
      return await checkBasic(id, secret);
    } catch (error) {
      if (error instanceof FailureLimitError) throw limitError(error);
      failed = error instanceof HttpError && error.status === 401;
      throw error;
    } finally {
      await attempt.end(failed);
    }
  }

  async function checkBasic(id: string, secret: string): Promise<Principal> {
    const refuse = (message: string) =>
      new HttpError(401, 'ERR_UNAUTHORIZED', message, {
        headers: { 'WWW-Authenticate': 'Basic realm="fhir-platform-kit", Bearer realm="fhir-platform-kit"' },
      });
    let client: ClientRecord;
    try {
      client = await activeClient(id, (message) => new HttpError(401, 'ERR_UNAUTHORIZED', message));
    } catch (error) {
      if (error instanceof HttpError) throw refuse('Invalid client credentials');
      throw error;
    }
    if (!client.secretHash) throw refuse('Invalid client credentials');
    const secretHash = client.secretHash;
    const cacheKey = createHash('sha256').update(`${id}\0${secret}\0${secretHash}`).digest('base64url');
    const cachedUntil = basicCache.get(cacheKey);
    if (cachedUntil === undefined || cachedUntil <= now()) {
      if (!(await limiter.checkSecret(() => verifyClientSecret(secret, secretHash))))
        throw refuse('Invalid client credentials');
      basicCache.delete(cacheKey);
      if (basicCache.size >= BASIC_CACHE_MAX) {
        const oldest = basicCache.keys().next();
        if (!oldest.done) basicCache.delete(oldest.value);
      }
      basicCache.set(cacheKey, now() + basicCacheMs);
    }
    return principalOf(client, allowedScopes(client));
  }

  return async (req) => {
    const header = req.headers.authorization;
    if (!header) return undefined;
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (bearer) return fromBearer(req, bearer[1]!);
    if (options.allowBasic && /^Basic(\s|$)/i.test(header)) {
      let credentials: { id: string; secret: string } | undefined;
      try {
        credentials = parseBasicAuthorization(header);
      } catch {
        credentials = undefined;
      }
      if (!credentials || credentials.id === '')
        throw new HttpError(401, 'ERR_UNAUTHORIZED', 'Malformed Basic credentials', {
          headers: { 'WWW-Authenticate': 'Basic realm="fhir-platform-kit"' },
        });
      return fromBasic(credentials.id, credentials.secret, req.ip ?? req.socket.remoteAddress ?? 'unknown');
    }
    if (/^Bearer(\s|$)/i.test(header)) throw unauthorized('Malformed bearer token', 'invalid_token');
    return undefined;
  };
}
