import { errorSink } from '../../http/request-logging.js';
import express, { Router, type Request, type RequestHandler } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { absoluteUrl } from '../../http/base-url.js';
import { oauthErrorHandler, type ErrorLogger } from '../../http/error-rendering.js';
import { HttpError, OAuthError } from '../../http/http-error.js';
import { optionError, positiveNumber } from '../../common/options.js';
import {
  checkRouterOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../../http/router-options.js';
import type { ClientRecord, GrantStore, Storage } from '../../storage/types.js';
import { CLIENT_ASSERTION_ALGORITHMS, isSymmetricOrNone } from '../client/client-assertion.js';
import {
  CLIENT_AUTH_METHODS,
  type ClientAuthMethod,
  type FormParams,
} from '../client/client-authentication.js';
import { clientJwks, type ClientJwksOptions } from '../client/client-jwks.js';
import { failureLimiter, type FailureLimitOptions } from '../client/failure-limiter.js';
import { tokenIdentity, type PerRequest } from './issuer.js';
import {
  signingKeys as createSigningKeys,
  type SigningKeys,
  type SigningKeysOptions,
} from '../keys/signing-keys.js';
import { auditTokenRequest, type TokenOutcome } from './token-audit.js';
import { handleTokenRequest, type TokenEndpointConfig, type TokenRequest } from './token-endpoint.js';
import type { TokenResponse } from './token-response.js';

/** Options of `tokenRouter`. */
export interface TokenRouterOptions extends Omit<CommonRouterOptions, 'authenticate'> {
  /**
   * `iss` of issued access tokens, or a function of the request computing it; `bearerAuth` must be
   * given the same. (`fhirPlatform` uses `baseUrl` or the request's origin, followed by the path the
   * platform is mounted at.)
   * @default `baseUrl`, or the request's origin
   */
  issuer?: PerRequest;
  /**
   * `aud` of issued access tokens, or a function of the request; `bearerAuth` must be given the same.
   * @default the issuer
   */
  audience?: PerRequest;
  /**
   * The server signing keys; share one instance with `bearerAuth` and `jwksHandler` when convenient
   * (separate instances over the same storage also agree).
   * @default signingKeys(storage, signingKeyOptions)
   */
  signingKeys?: SigningKeys;
  /**
   * Options of the signing keys created when `signingKeys` is not given.
   * @default {}
   */
  signingKeyOptions?: SigningKeysOptions;
  /**
   * Access token lifetime in seconds, unless the client has its own `accessTokenLifetime`.
   * @default 300
   */
  accessTokenLifetime?: number;
  /**
   * Upper bound, in seconds, on the lifetime of every access token this endpoint issues, whatever
   * `accessTokenLifetime` or the client's own lifetime says (keep `signingKeyOptions.retention` at
   * least this). Not to be confused with `projectRouter`'s `maxClientTokenLifetime`, which bounds
   * what a client may be registered with.
   * @default 7776000 (90 days)
   */
  accessTokenLifetimeCap?: number;
  /**
   * @deprecated the former name of `accessTokenLifetimeCap`, still accepted.
   * @default undefined
   */
  maxAccessTokenLifetime?: number;
  /**
   * Client authentication methods accepted.
   * @default ['private_key_jwt', 'client_secret_basic', 'client_secret_post']
   */
  authMethods?: ClientAuthMethod[];
  /**
   * `alg` values accepted for client assertions; symmetric algorithms and `none` are refused.
   * @default ['RS256', 'RS384', 'RS512', 'ES256', 'ES384', 'ES512']
   */
  assertionAlgorithms?: string[];
  /**
   * Longest accepted client assertion lifetime (`exp` - now), seconds (SMART: 5 minutes).
   * @default 300
   */
  maxAssertionLifetime?: number;
  /**
   * Clock skew tolerated on assertion times, seconds.
   * @default 5
   */
  clockTolerance?: number;
  /**
   * Fetching and caching of clients' `jwks_uri`.
   * @default {}
   */
  jwks?: ClientJwksOptions;
  /**
   * Limits on failed client authentications (per client id and address, and per address) and on
   * client-secret checks running at once; `false` disables them all. See `FailureLimitOptions`.
   * @default { maxFailuresPerClientAddress: 10, maxFailuresPerAddress: 30, windowSeconds: 300, maxConcurrentSecretChecks: 4, maxQueuedSecretChecks: 64 }
   */
  rateLimit?: FailureLimitOptions | false;
  /**
   * Where authorization codes and refresh tokens are (SMART App Launch grants `authorization_code`
   * and `refresh_token`); without any, only `client_credentials` is supported.
   * @default storage.grants
   */
  grants?: GrantStore;
  /**
   * Lifetime of a refresh token granted with `offline_access`, seconds (each refresh issues a new
   * one with a new lifetime).
   * @default 2592000 (30 days)
   */
  refreshTokenLifetime?: number;
  /**
   * Lifetime of a refresh token granted with `online_access`, seconds.
   * @default 43200 (12 hours)
   */
  onlineRefreshTokenLifetime?: number;
  /**
   * The FHIR base URL, or a function of the request: an id_token's `fhirUser` is the absolute URL
   * of the user's profile under it. (`fhirPlatform` uses its FHIR mount.)
   * @default the audience
   */
  fhirBase?: PerRequest;
  /** Clock (epoch ms), for tests. @default Date.now */
  now?: () => number;
}

const OWNER = 'tokenRouter';

const TOKEN_ROUTER_KEYS: OwnOptionKeys<TokenRouterOptions> = {
  issuer: true,
  audience: true,
  signingKeys: true,
  signingKeyOptions: true,
  accessTokenLifetime: true,
  accessTokenLifetimeCap: true,
  maxAccessTokenLifetime: true,
  authMethods: true,
  assertionAlgorithms: true,
  maxAssertionLifetime: true,
  clockTolerance: true,
  jwks: true,
  rateLimit: true,
  grants: true,
  refreshTokenLifetime: true,
  onlineRefreshTokenLifetime: true,
  fhirBase: true,
  now: true,
};

/** Resolves and validates `TokenRouterOptions` once. */
export function resolveTokenEndpointConfig(
  options: TokenRouterOptions,
  owner = OWNER,
  extraKeys: Record<string, true> = {},
): TokenEndpointConfig {
  checkRouterOptions(owner, options, { ...TOKEN_ROUTER_KEYS, ...extraKeys }, { authenticate: false });
  const methods = options.authMethods ?? [...CLIENT_AUTH_METHODS];
  for (const m of methods) {
    if (!CLIENT_AUTH_METHODS.includes(m))
      optionError(OWNER, 'authMethods', `unknown auth method ${String(m)}`);
  }
  const algorithms = options.assertionAlgorithms ?? [...CLIENT_ASSERTION_ALGORITHMS];
  for (const alg of algorithms) {
    if (isSymmetricOrNone(alg))
      optionError(OWNER, 'assertionAlgorithms', `assertion algorithm ${alg} is not allowed`);
  }
  const accessTokenLifetime = positiveNumber(
    OWNER,
    'accessTokenLifetime',
    options.accessTokenLifetime ?? 300,
  );
  if (options.accessTokenLifetimeCap !== undefined && options.maxAccessTokenLifetime !== undefined)
    optionError(
      OWNER,
      'maxAccessTokenLifetime',
      'give accessTokenLifetimeCap only (maxAccessTokenLifetime is its deprecated name)',
    );
  const accessTokenLifetimeCap = positiveNumber(
    OWNER,
    options.maxAccessTokenLifetime === undefined ? 'accessTokenLifetimeCap' : 'maxAccessTokenLifetime',
    options.accessTokenLifetimeCap ?? options.maxAccessTokenLifetime ?? 90 * 24 * 3600,
  );
  const grants = options.grants ?? options.storage.grants;
  return {
    storage: options.storage,
    keys: options.signingKeys ?? createSigningKeys(options.storage, options.signingKeyOptions),
    jwks: clientJwks(options.jwks),
    limiter: failureLimiter(options.rateLimit, {
      owner: 'tokenRouter',
      now: options.now ?? Date.now,
      ...(options.storage.failureCounts ? { shared: options.storage.failureCounts } : {}),
    }),
    methods,
    algorithms,
    maxAssertionLifetime: positiveNumber(OWNER, 'maxAssertionLifetime', options.maxAssertionLifetime ?? 300),
    clockTolerance: options.clockTolerance ?? 5,
    accessTokenLifetime,
    accessTokenLifetimeCap,
    ...(grants ? { grants } : {}),
    refreshTokenLifetime: positiveNumber(
      OWNER,
      'refreshTokenLifetime',
      options.refreshTokenLifetime ?? 30 * 24 * 3600,
    ),
    onlineRefreshTokenLifetime: positiveNumber(
      OWNER,
      'onlineRefreshTokenLifetime',
      options.onlineRefreshTokenLifetime ?? 12 * 3600,
    ),
    now: options.now ?? Date.now,
  };
}

/**
 * The client a refused token request named, so that its refusal is recorded in that client's
 * project (brute force against a project's client is for its administrators to see); undefined
 * for an id that names no client, or when the store cannot say: the refusal then goes to the
 * platform log. (A store that fails here failed the request too, which reports it.)
 */
async function clientNamed(storage: Storage, clientId: string): Promise<ClientRecord | undefined> {
  try {
    return await storage.readClient(clientId);
  } catch {
    return undefined; // NotFoundError: no such client
  }
}

/** Only form bodies (RFC 6749 §4.4.2: `application/x-www-form-urlencoded`). */
const formOnly: RequestHandler = (req, _res, next) => {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') {
    next(new OAuthError(400, 'invalid_request', 'The body must be application/x-www-form-urlencoded'));
  } else next();
};

/** The token request of an HTTP request, as `handleTokenRequest` takes it. */
function tokenRequestOf(
  options: TokenRouterOptions,
  req: Request,
  seen: NonNullable<TokenRequest['seen']>,
): TokenRequest {
  const { issuer, audience } = tokenIdentity(req, options);
  const fhirBase =
    typeof options.fhirBase === 'function' ? options.fhirBase(req) : (options.fhirBase ?? audience);
  return {
    params: (req.body ?? {}) as FormParams,
    authorization: req.headers.authorization,
    tokenUrl: absoluteUrl(req, '', options.baseUrl),
    issuer,
    audience,
    address: req.ip ?? req.socket.remoteAddress ?? 'unknown',
    seen,
    fhirBase,
  };
}

/** How a refused request is recorded: the scopes it asked for, its error, the client it named. */
async function refusalOf(
  options: TokenRouterOptions,
  request: TokenRequest,
  error: unknown,
): Promise<TokenOutcome> {
  const { seen = {}, params } = request;
  const named =
    options.auditTrail?.enabled && !seen.client && seen.claimedClientId !== undefined
      ? await clientNamed(options.storage, seen.claimedClientId)
      : undefined;
  return {
    result: 'refused',
    scopes: typeof params.scope === 'string' ? params.scope.split(' ').filter(Boolean) : [],
    error: error instanceof OAuthError ? error.error : 'server_error',
    ...(named ? { named } : {}),
  };
}

/** Answers a token request (RFC 6749 §5.1, never cached) and records it in the audit trail. */
function answerTokenRequest(
  options: TokenRouterOptions,
  config: TokenEndpointConfig,
  logError: ErrorLogger,
): RequestHandler {
  return asyncHandler(async (req, res) => {
    const seen: NonNullable<TokenRequest['seen']> = {};
    const request = tokenRequestOf(options, req, seen);
    const trail = options.auditTrail;
    const audit = trail ? { trail, logError, req, seen } : undefined;
    let answer: TokenResponse;
    try {
      answer = await handleTokenRequest(request, config);
    } catch (error) {
      const refusal = await refusalOf(options, request, error);
      if (audit) auditTokenRequest(audit, refusal);
      throw error;
    }
    if (audit)
      auditTokenRequest(audit, { result: 'granted', scopes: answer.scope.split(' ').filter(Boolean) });
    res.set('Cache-Control', 'no-store').set('Pragma', 'no-cache').json(answer);
  });
}

/**
 * The OAuth 2.0 token endpoint for SMART Backend Services (RFC 6749 §4.4 client credentials;
 * SMART App Launch 2.x "Backend Services"). Mount it at the token path (conventionally
 * `/oauth2/token`); it answers `POST /` with `application/x-www-form-urlencoded` parameters and
 * renders errors as RFC 6749 §5.2 JSON.
 */
export function tokenRouter(options: TokenRouterOptions): Router {
  const config = resolveTokenEndpointConfig(options);
  const logError = errorSink(options);
  const router = Router();
  const form = express.urlencoded({ extended: false, limit: '64kb', parameterLimit: 100 });
  router.post('/', formOnly, form, answerTokenRequest(options, config, logError));
  router.all('/', (_req, _res, next) => {
    next(
      new HttpError(405, 'ERR_METHOD_NOT_ALLOWED', 'The token endpoint accepts POST only', {
        headers: { Allow: 'POST' },
      }),
    );
  });
  router.use(oauthErrorHandler(logError));
  return router;
}
