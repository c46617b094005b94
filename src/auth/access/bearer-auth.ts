import { unauthorized } from '../../http/authenticate.js';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import type { Authenticate } from '../../http/principal.js';
import { requireStorage } from '../../storage/storage-shape.js';
import type { GrantStore, Storage } from '../../storage/types.js';
import {
  failureLimiter,
  resolveFailureLimitOptions,
  type FailureLimitOptions,
} from '../client/failure-limiter.js';
import {
  SIGNING_ALGORITHMS,
  signingKeys as createSigningKeys,
  type SigningKeys,
  type SigningKeysOptions,
} from '../keys/signing-keys.js';
import type { PerRequest } from '../token/issuer.js';
import { basicCredentials, type BasicCredentialsCheck } from './basic-credentials.js';
import { bearerPrincipal, type BearerTokenCheck } from './bearer-token.js';

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

/** What checking a bearer token needs, from the options. */
function bearerCheck(options: BearerAuthOptions): BearerTokenCheck {
  const { storage, baseUrl, issuer, audience } = options;
  return {
    storage,
    keys: options.signingKeys ?? createSigningKeys(storage, options.signingKeyOptions),
    grants: options.grants ?? storage.grants,
    algorithms: options.algorithms ?? [...SIGNING_ALGORITHMS],
    clockTolerance: options.clockTolerance ?? 5,
    now: options.now ?? Date.now,
    identity: { baseUrl, issuer, audience },
  };
}

/** `rateLimit` checked even when Basic is off, so a bad option fails at start-up either way. */
function checkRateLimit(options: BearerAuthOptions): void {
  const rateLimit = options.rateLimit ?? {};
  if (rateLimit !== false) resolveFailureLimitOptions(rateLimit, 'bearerAuth');
}

/** The Basic check of `allowBasic`, with its failure limits (shared by instances when the store can). */
function basicCheck(options: BearerAuthOptions): BasicCredentialsCheck {
  const { storage } = options;
  const now = options.now ?? Date.now;
  const limiter = failureLimiter(options.rateLimit ?? {}, {
    owner: 'bearerAuth',
    now,
    ...(storage.failureCounts ? { shared: storage.failureCounts } : {}),
  });
  return basicCredentials(storage, limiter, (options.basicCacheSeconds ?? 300) * 1000, now);
}

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
  const bearer = bearerCheck(options);
  checkRateLimit(options);
  const basic = options.allowBasic ? basicCheck(options) : undefined;
  return async (req) => {
    const header = req.headers.authorization;
    if (!header) return undefined;
    const token = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
    if (token !== undefined) return bearerPrincipal(bearer, req, token);
    if (basic && /^Basic(\s|$)/i.test(header)) {
      return basic.principal(header, req.ip ?? req.socket.remoteAddress ?? 'unknown');
    }
    if (/^Bearer(\s|$)/i.test(header)) throw unauthorized('Malformed bearer token', 'invalid_token');
    return undefined;
  };
}
