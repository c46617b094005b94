import { errorSink } from '../../http/request-logging.js';
import express, { Router } from 'express';
import { recordSafely } from '../../audit/record-safely.js';
import { asyncHandler } from '../../http/async-handler.js';
import { absoluteUrl } from '../../http/base-url.js';
import { oauthErrorHandler } from '../../http/error-rendering.js';
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
import { handleTokenRequest, type TokenEndpointConfig, type TokenRequest } from './token-endpoint.js';

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

  router.post(
    '/',
    (req, _res, next) => {
      const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
      if (type !== 'application/x-www-form-urlencoded') {
        next(new OAuthError(400, 'invalid_request', 'The body must be application/x-www-form-urlencoded'));
      } else next();
    },
    form,
    asyncHandler(async (req, res) => {
      const { issuer, audience } = tokenIdentity(req, options);
      const fhirBase =
        typeof options.fhirBase === 'function' ? options.fhirBase(req) : (options.fhirBase ?? audience);
      const seen: NonNullable<TokenRequest['seen']> = {};
      const params = (req.body ?? {}) as FormParams;
      const requested = typeof params.scope === 'string' ? params.scope.split(' ').filter(Boolean) : [];
      const audit = (
        result: 'granted' | 'refused',
        scopes: string[],
        error?: string,
        named?: ClientRecord,
      ) => {
        const client = seen.client;
        if (!options.auditTrail) return;
        const user = seen.user;
        if (client?.projectId && user && (user.refresh || user.codeReuse)) {
          // A refresh (or a used refresh token or code coming again) is also the user's event.
          recordSafely(
            options.auditTrail,
            {
              kind: 'authorization',
              action: user.refresh === 'rotated' ? 'refresh' : 'reuse',
              clientId: client.id,
              clientName: client.name,
              result: user.refresh === 'rotated' ? 'granted' : 'refused',
              ...(result === 'granted' ? { scopes } : {}),
              projectId: client.projectId,
              actor: {
                kind: user.userId ? 'user' : 'client',
                id: user.userId ?? client.id,
                ...(user.profile ? { profile: user.profile } : {}),
              },
              ...(req.ip ? { address: req.ip } : {}),
            },
            (failure) => logError(failure, req),
          );
        }
        recordSafely(
          options.auditTrail,
          {
            kind: 'token',
            result,
            scopes,
            ...(error ? { error } : {}),
            projectId: (client ?? named)?.projectId ?? null,
            actor: client
              ? {
                  kind: client.projectId === null ? 'super-admin' : 'client',
                  id: client.id,
                  name: client.name,
                }
              : { kind: 'anonymous', ...(seen.claimedClientId ? { id: seen.claimedClientId } : {}) },
            ...(req.ip ? { address: req.ip } : {}),
          },
          (failure) => logError(failure, req),
        );
      };
      let answer;
      try {
        answer = await handleTokenRequest(
          {
            params,
            authorization: req.headers.authorization,
            tokenUrl: absoluteUrl(req, '', options.baseUrl),
            issuer,
            audience,
            address: req.ip ?? req.socket.remoteAddress ?? 'unknown',
            seen,
            fhirBase,
          },
          config,
        );
      } catch (error) {
        const named =
          options.auditTrail?.enabled && !seen.client && seen.claimedClientId !== undefined
            ? await clientNamed(options.storage, seen.claimedClientId)
            : undefined;
        audit('refused', requested, error instanceof OAuthError ? error.error : 'server_error', named);
        throw error;
      }
      audit('granted', answer.scope.split(' ').filter(Boolean));
      res.set('Cache-Control', 'no-store').set('Pragma', 'no-cache').json(answer);
    }),
  );
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
