import type { Authenticate } from './http/principal.js';
import type { TokenRouterOptions } from './auth/token/token-router.js';
import type { AuthorizationRouterOptions } from './auth/authorize/authorization-router.js';
import type { AuthenticateUser } from './auth/authorize/user-sign-in.js';
import type { BulkExportRouterOptions } from './bulk/router.js';
import type { FhirRouterOptions } from './fhir/router-options.js';
import type { ProjectRouterOptions } from './project/router.js';
import type { ScimRouterOptions } from './scim/router.js';
import type { ErrorLogger } from './http/error-rendering.js';
import { componentLogger, type Logger } from './common/logger.js';
import { AUDIT_OPTION_KEYS, type AuditOptions } from './audit/options.js';
import { checkOptionKeys, type OptionKeys } from './common/option-keys.js';
import { booleanOption, optionalFunction, optionError, positiveInteger } from './common/options.js';
import { baseUrlOption, loggingOptions, storageOption } from './http/router-options.js';
import type { FederatedSignInOptions } from './auth/federation/federated-sign-in.js';
import type { Storage } from './storage/types.js';

type Own<T> = Partial<Omit<T, 'storage' | 'authenticate' | 'baseUrl' | 'onError' | 'logger'>>;

/** Mount paths of {@link fhirPlatform}, under the path the host mounts `platform.router` at. */
export interface FhirPlatformPaths {
  /** @default '/fhir/R4' */
  fhir: string;
  /** @default '/scim/v2' */
  scim: string;
  /** @default '/oauth2/token' */
  token: string;
  /** @default '/oauth2/jwks' */
  jwks: string;
  /** The authorization endpoint (SMART App Launch). @default '/oauth2/authorize' */
  authorize: string;
  /** Token revocation (RFC 7009). @default '/oauth2/revoke' */
  revoke: string;
  /** Token introspection (RFC 7662). @default '/oauth2/introspect' */
  introspect: string;
  /** Liveness (`200 {"status":"ok"}`). @default '/healthz' */
  healthz: string;
  /**
   * Readiness (storage reachable, export workers up, a signing key usable, the work given to
   * `holdReadiness` done). @default '/readyz'
   */
  readyz: string;
  /**
   * The federated sign-in's router: the identity providers' `redirect_uri` is this path followed
   * by `/callback`. @default '/oauth2/federation'
   */
  federation: string;
}

/** Options of {@link fhirPlatform}. */
export interface FhirPlatformOptions {
  /**
   * Where everything lives (`await fileStorage({ dir })`, `memoryStorage()`, a PostgreSQL store,
   * …). A promise of a store (`fileStorage()` without `await`) or an object without the `Storage`
   * methods is refused with `ERR_INVALID_OPTION`.
   */
  storage: Storage;
  /**
   * Directory for bulk export files (created when missing).
   * @default required unless `bulk` is `false` or the files go elsewhere (the storage's
   * `exportFiles`, as with PostgreSQL, or `bulk.exportFiles`)
   */
  exportDir?: string;
  /**
   * Public origin (`https://fhir.example.org`), used for absolute URLs, the token `aud` and `iss`:
   * an absolute `http:` or `https:` URL (a path is kept; no query or fragment), else
   * `ERR_INVALID_OPTION`.
   * @default undefined (each request's own origin; set Express `trust proxy` behind a proxy)
   */
  baseUrl?: string;
  /**
   * Resolves callers. The default verifies access tokens from the mounted token endpoint.
   * @default bearerAuth({ storage, baseUrl })
   */
  authenticate?: Authenticate;
  /**
   * Accept HTTP Basic (client id + secret) on the SCIM routes, as Okta offers. Only with the
   * built-in authentication: combined with `authenticate` it is an option error.
   * @default false
   */
  scimBasicAuth?: boolean;
  /**
   * Mount paths, under the path the host mounts `platform.router` at.
   * @default { fhir: '/fhir/R4', scim: '/scim/v2', token: '/oauth2/token', jwks: '/oauth2/jwks', healthz: '/healthz', readyz: '/readyz' }
   */
  paths?: Partial<FhirPlatformPaths>;
  /**
   * Options of the FHIR data plane, `fhirRouter` (docs/fhir.md). Here and in `scim`, `project`,
   * `bulk` and `token`, the shared options above (`storage`, `authenticate`, `baseUrl`, `onError`,
   * `logger`) are set once for every router.
   * @default {}
   */
  fhir?: Own<FhirRouterOptions>;
  /** Options of the SCIM router, `scimRouter` (docs/scim.md). @default {} */
  scim?: Own<ScimRouterOptions>;
  /** Options of `Project/$init` and client registration, `projectRouter` (docs/project-init.md). @default {} */
  project?: Own<ProjectRouterOptions>;
  /**
   * Options of `bulkExportRouter` (docs/bulk-export.md), or `false` to mount no bulk export. An
   * `exportDir` given here wins over the one above.
   * @default {}
   */
  bulk?: Own<BulkExportRouterOptions> | false;
  /** Options of the token endpoint, `tokenRouter` (docs/auth.md). @default {} */
  token?: Own<TokenRouterOptions>;
  /**
   * Options of the authorization endpoint of SMART App Launch, `authorizationRouter` (docs/auth.md),
   * mounted at `paths.authorize`. `authenticateUser` signs users in (the authorization endpoint asks
   * it who the browser's user is); the default is `federatedSignIn` with each project's OpenID
   * Connect identity provider (docs/login.md), its callback mounted at `paths.federation`.
   * @default {} (authenticateUser: federatedSignIn({ storage, ...federation }))
   */
  authorization?: Own<Omit<AuthorizationRouterOptions, 'authenticateUser'>> & {
    authenticateUser?: AuthenticateUser;
  };
  /**
   * Receives every error answered with a 5xx status, and errors of background work (export jobs).
   * @default writes to stderr, unless `logger` is given
   */
  onError?: ErrorLogger;
  /**
   * A pino-compatible logger (`info`/`warn`/`error`/`debug(fields, message)`, optional `child`):
   * every 5xx error is logged through it, and with `logRequests` one line per request. Log lines
   * carry no token, secret, `Authorization` header, query string or body. With `onError` as well,
   * both receive errors.
   * @default undefined
   */
  logger?: Logger;
  /**
   * Log one `info` line per request through `logger` (`method`, `path` without query, `status`,
   * `ms`, `projectId`, `clientId` or `userId`). Health probes are not logged.
   * @default false
   */
  logRequests?: boolean;
  /**
   * Milliseconds `GET /readyz` waits for `storage.ping()`, and for the signing key (loaded, or
   * generated when there is none), before answering 503.
   * @default 2000
   */
  readyTimeout?: number;
  /**
   * The audit trail (docs/audit.md): one trail for every router, closed by `close()`; its errors
   * go to `onError` / `logger` unless `audit.onError` is given. Set `journalDir` for durability
   * (without it a crash loses up to `flushIntervalMs` of events); `{ enabled: false }` records
   * nothing.
   * @default { enabled: true } (no journal)
   */
  audit?: AuditOptions;
  /**
   * Options of the default `federatedSignIn` (`defaultProvider`, `texts`, `renderRefusal`,
   * `lifetime`, `discoveryTtl`, `jwks`); with `authorization.authenticateUser` it is an option
   * error.
   * @default {}
   */
  federation?: Partial<
    Omit<FederatedSignInOptions, 'storage' | 'signingKeys' | 'auditTrail' | 'onError' | 'callbackUrl'>
  >;
}

const DEFAULT_PATHS: FhirPlatformPaths = {
  fhir: '/fhir/R4',
  scim: '/scim/v2',
  token: '/oauth2/token',
  jwks: '/oauth2/jwks',
  authorize: '/oauth2/authorize',
  revoke: '/oauth2/revoke',
  introspect: '/oauth2/introspect',
  healthz: '/healthz',
  readyz: '/readyz',
  federation: '/oauth2/federation',
};

/** The name option errors of {@link fhirPlatform} carry. */
export const PLATFORM_OWNER = 'fhirPlatform';

const PLATFORM_KEYS: OptionKeys<FhirPlatformOptions> = {
  storage: true,
  exportDir: true,
  baseUrl: true,
  authenticate: true,
  scimBasicAuth: true,
  paths: true,
  fhir: true,
  scim: true,
  project: true,
  bulk: true,
  token: true,
  authorization: true,
  onError: true,
  logger: true,
  logRequests: true,
  readyTimeout: true,
  audit: true,
  federation: true,
};

const PATH_KEYS: OptionKeys<FhirPlatformPaths> = {
  fhir: true,
  scim: true,
  token: true,
  jwks: true,
  authorize: true,
  revoke: true,
  introspect: true,
  healthz: true,
  readyz: true,
  federation: true,
};

function normalisePath(name: string, value: unknown): string {
  if (typeof value !== 'string' || !value.startsWith('/') || value.endsWith('/')) {
    optionError(
      PLATFORM_OWNER,
      `paths.${name}`,
      `paths.${name} must start with "/" and not end with "/" (got ${JSON.stringify(value)})`,
    );
  }
  return value;
}

/** What {@link checkPlatformOptions} resolves besides the options themselves. */
export interface PlatformSettings {
  paths: FhirPlatformPaths;
  logRequests: boolean;
  logger: Logger | undefined;
  readyTimeout: number;
  /** The `onError` and `logger` every router gets. */
  logging: { onError?: ErrorLogger; logger?: Logger };
}

/**
 * Checks the options of {@link fhirPlatform}, under its name, before any router sees them (the ones
 * the routers share among them), and resolves the paths, the logging and the readiness timeout.
 */
export function checkPlatformOptions(options: FhirPlatformOptions): PlatformSettings {
  if (!options || typeof options !== 'object') optionError(PLATFORM_OWNER, 'options', 'options are required');
  storageOption(PLATFORM_OWNER, options.storage);
  checkOptionKeys(PLATFORM_OWNER, options, PLATFORM_KEYS);
  optionalFunction(PLATFORM_OWNER, 'authenticate', options.authenticate, undefined);
  if (options.authorization?.authenticateUser && options.federation) {
    optionError(
      PLATFORM_OWNER,
      'federation',
      'federation configures the default sign-in: give it or authorization.authenticateUser',
    );
  }
  baseUrlOption(PLATFORM_OWNER, options.baseUrl);
  loggingOptions(PLATFORM_OWNER, options);
  checkOptionKeys(PLATFORM_OWNER, options.paths, PATH_KEYS, 'paths.');
  checkOptionKeys(PLATFORM_OWNER, options.audit, AUDIT_OPTION_KEYS, 'audit.');
  const { storage } = options;
  const paths: FhirPlatformPaths = { ...DEFAULT_PATHS, ...options.paths };
  for (const [name, value] of Object.entries(paths)) normalisePath(name, value);
  const filesElsewhere =
    storage.exportFiles !== undefined || (options.bulk !== false && options.bulk?.exportFiles !== undefined);
  if (options.bulk !== false && !options.exportDir && !options.bulk?.exportDir && !filesElsewhere) {
    optionError(PLATFORM_OWNER, 'exportDir', 'exportDir is required (or bulk: false)');
  }
  if (options.scimBasicAuth && options.authenticate) {
    // Basic is a mode of the built-in bearerAuth; a host's own authenticate decides alone.
    optionError(
      PLATFORM_OWNER,
      'scimBasicAuth',
      'scimBasicAuth applies to the built-in bearerAuth only; with authenticate, accept Basic in it',
    );
  }
  const logRequests = booleanOption(PLATFORM_OWNER, 'logRequests', options.logRequests, false);
  if (logRequests && !options.logger)
    optionError(PLATFORM_OWNER, 'logRequests', 'logRequests needs a logger');
  const logger = options.logger ? componentLogger(options.logger) : undefined;
  const readyTimeout = positiveInteger(PLATFORM_OWNER, 'readyTimeout', options.readyTimeout, 2000);
  const logging = { ...(options.onError ? { onError: options.onError } : {}), ...(logger ? { logger } : {}) };
  return { paths, logRequests, logger, readyTimeout, logging };
}
