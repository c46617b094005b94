import express, { Router } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { absoluteUrl } from '../http/base-url.js';
import { oauthErrorHandler } from '../http/error-rendering.js';
import { HttpError, OAuthError } from '../http/http-error.js';
import { optionError, positiveNumber, requireStorage } from '../http/options.js';
import type { CommonRouterOptions } from '../http/router-options.js';
import { CLIENT_ASSERTION_ALGORITHMS, isSymmetricOrNone } from './client-assertion.js';
import { CLIENT_AUTH_METHODS, type ClientAuthMethod, type FormParams } from './client-authentication.js';
import { clientJwks, type ClientJwksOptions } from './client-jwks.js';
import { failureLimiter, type FailureLimitOptions } from './failure-limiter.js';
import { defaultIssuer } from './issuer.js';
import {
  signingKeys as createSigningKeys,
  type SigningKeys,
  type SigningKeysOptions,
} from './signing-keys.js';
import { handleTokenRequest, type TokenEndpointConfig } from './token-endpoint.js';

/** Options of `tokenRouter`. */
export interface TokenRouterOptions extends Omit<CommonRouterOptions, 'authenticate'> {
  /**
   * `iss` of issued access tokens; `bearerAuth` must be given the same.
   * @default `baseUrl`, or the request's origin
   */
  issuer?: string;
  /**
   * `aud` of issued access tokens; `bearerAuth` must be given the same.
   * @default the issuer
   */
  audience?: string;
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
   * Upper bound on any access token lifetime, seconds (keep `signingKeyOptions.retention` at least this).
   * @default 7776000 (90 days)
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
  /** Clock (epoch ms), for tests. @default Date.now */
  now?: () => number;
}

const OWNER = 'tokenRouter';

/** Resolves and validates `TokenRouterOptions` once. */
export function resolveTokenEndpointConfig(options: TokenRouterOptions): TokenEndpointConfig {
  requireStorage(OWNER, options);
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
  const maxAccessTokenLifetime = positiveNumber(
    OWNER,
    'maxAccessTokenLifetime',
    options.maxAccessTokenLifetime ?? 90 * 24 * 3600,
  );
  return {
    storage: options.storage,
    keys: options.signingKeys ?? createSigningKeys(options.storage, options.signingKeyOptions),
    jwks: clientJwks(options.jwks),
    limiter: failureLimiter(options.rateLimit, { owner: 'tokenRouter', now: options.now ?? Date.now }),
    methods,
    algorithms,
    maxAssertionLifetime: positiveNumber(OWNER, 'maxAssertionLifetime', options.maxAssertionLifetime ?? 300),
    clockTolerance: options.clockTolerance ?? 5,
    accessTokenLifetime,
    maxAccessTokenLifetime,
    now: options.now ?? Date.now,
  };
}

/**
 * The OAuth 2.0 token endpoint for SMART Backend Services (RFC 6749 §4.4 client credentials;
 * SMART App Launch 2.x "Backend Services"). Mount it at the token path (conventionally
 * `/oauth2/token`); it answers `POST /` with `application/x-www-form-urlencoded` parameters and
 * renders errors as RFC 6749 §5.2 JSON.
 */
export function tokenRouter(options: TokenRouterOptions): Router {
  const config = resolveTokenEndpointConfig(options);
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
      const issuer = options.issuer ?? defaultIssuer(req, options.baseUrl);
      const answer = await handleTokenRequest(
        {
          params: (req.body ?? {}) as FormParams,
          authorization: req.headers.authorization,
          tokenUrl: absoluteUrl(req, '', options.baseUrl),
          issuer,
          audience: options.audience ?? issuer,
          address: req.ip ?? req.socket.remoteAddress ?? 'unknown',
        },
        config,
      );
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
  router.use(oauthErrorHandler(options.onError));
  return router;
}
