import { Router, type Request } from 'express';
import { platformAdmin, type PlatformAdmin } from './platform-admin.js';
import type { Authenticate } from './http/principal.js';
import { bearerAuth, type BearerAuthOptions } from './auth/access/bearer-auth.js';
import { signingKeys as createSigningKeys, type SigningKeys } from './auth/keys/signing-keys.js';
import { tokenRouter, type TokenRouterOptions } from './auth/token/token-router.js';
import {
  authorizationRouter,
  type AuthorizationRouterOptions,
} from './auth/authorize/authorization-router.js';
import { introspectionRouter, revocationRouter } from './auth/token/revocation-router.js';
import type { AuthenticateUser } from './auth/authorize/user-sign-in.js';
import { MemoryGrants } from './storage/memory-grants.js';
import type { GrantStore } from './storage/types.js';
import { discoveryRouter, smartSecurity } from './auth/discovery/smart-configuration.js';
import { jwksHandler } from './auth/keys/jwks-handler.js';
import { bulkExportRouter, type BulkExportRouterOptions } from './bulk/router.js';
import { bulkExportCapability } from './bulk/capability.js';
import type { ErrorPaths } from './http/error-paths.js';
import { fhirRouter } from './fhir/router.js';
import type { FhirRouterOptions } from './fhir/router-options.js';
import { projectRouter, type ProjectRouterOptions } from './project/router.js';
import { scimRouter, type ScimRouterOptions } from './scim/router.js';
import type { ErrorLogger } from './http/error-rendering.js';
import {
  livenessHandler,
  readinessHandler,
  storageCheck,
  timedCheck,
  type ReadinessChecks,
} from './http/health.js';
import { notReadyGate, readinessHolds } from './http/readiness-holds.js';
import { errorFormatOf } from './http/error-paths.js';
import { componentLogger, type Logger } from './common/logger.js';
import { errorSink, requestLogger } from './http/request-logging.js';
import { AUDIT_OPTION_KEYS, type AuditOptions } from './audit/options.js';
import { recordRefusals } from './http/audit-refusals.js';
import { safeAuditTrail } from './audit/record-safely.js';
import { createAuditTrail } from './audit/trail.js';
import { checkOptionKeys, type OptionKeys } from './common/option-keys.js';
import { booleanOption, optionalFunction, optionError, positiveInteger } from './common/options.js';
import { baseUrlOption, loggingOptions, storageOption } from './http/router-options.js';
import { defaultIssuer } from './auth/token/issuer.js';
import {
  FEDERATION_CALLBACK_PATH,
  federatedSignIn,
  type FederatedSignInOptions,
} from './auth/federation/federated-sign-in.js';
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

/** What {@link fhirPlatform} returns: one router to mount at the host's root, and its lifecycle. */
export interface FhirPlatform {
  router: Router;
  /**
   * Administration without HTTP (init a project, register and revoke clients, create SCIM users),
   * through the same code as the HTTP operations, acting as the super admin.
   */
  admin: PlatformAdmin;
  /**
   * The platform's SCIM mount and token and JWKS endpoints as `ErrorPaths`, for the helpers that
   * answer what no router does (`protectServer`, `notFoundHandler`, `fallbackErrorHandler`) in the
   * same protocol as the routers: relative to where the host mounts `router` (prefix that path).
   */
  errorPaths: Required<ErrorPaths>;
  /** The sign-in the authorization endpoint uses: `authorization.authenticateUser`, or the federated one. */
  authenticateUser: AuthenticateUser;
  /**
   * Resolves when the platform's own background start-up (export job resume) has settled; never
   * rejects. `GET /readyz` answers 200 only after it, and once a signing key is usable and the work
   * given to `holdReadiness` is done.
   */
  ready: Promise<void>;
  /**
   * Holds readiness until `work` resolves: start-up work of the host that requests depend on, such as
   * writing the credentials its clients will use (`ensureSuperAdminClient`) or seeding data. Until
   * then `GET /readyz` answers 503 with the check `name` at `'pending'`, and every other route of
   * the platform answers 503 with `Retry-After: 1` (FHIR `transient`, OAuth
   * `temporarily_unavailable`, SCIM 503), so that no client takes a missing credential for a wrong
   * one. Once `work` resolves the check is `'ok'`; if it rejects, `'failed'`, and both stay at 503
   * until new work is held under the same name. Call it before the server listens; `work` must not
   * depend on the platform's own HTTP routes (use `admin`, or the storage). Load balancers and
   * scripts then wait for `/readyz` and find every configured credential working.
   * @throws InvalidOptionError (`ERR_INVALID_OPTION`) for a `name` that is not a word of letters,
   *   digits, `-` and `_`, or that names one of the platform's own checks (`storage`,
   *   `exportWorkers`, `signingKeys`), or a `work` that is no promise.
   */
  holdReadiness(name: string, work: PromiseLike<unknown>): void;
  /**
   * Shuts down: running exports get up to `bulk.closeTimeout` ms (default 10000) to finish, those
   * still running are stopped (they resume at the next start, or on another instance with a shared
   * queue); then the export workers, timers and the audit trail (the counts of refusals in open
   * windows recorded, its queued events written) stop. Does not close the storage (the host owns
   * it) nor the HTTP server.
   */
  close(): Promise<void>;
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

const OWNER = 'fhirPlatform';

/** The readiness checks of the platform itself (`exportWorkers` only with bulk export). */
const PLATFORM_CHECKS = ['storage', 'exportWorkers', 'signingKeys'];

/** The platform's default `bulk.closeTimeout`, ms (the router's own is 0). */
const PLATFORM_EXPORT_CLOSE_TIMEOUT = 10_000;

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
      OWNER,
      `paths.${name}`,
      `paths.${name} must start with "/" and not end with "/" (got ${JSON.stringify(value)})`,
    );
  }
  return value;
}

/**
 * Mounts every router at the default paths, for hosts that want everything in one call:
 * `app.use(fhirPlatform({ storage, exportDir }).router)`. Hosts that want some surfaces only mount
 * the routers one by one (`tokenRouter`, `scimRouter`, `projectRouter`, `bulkExportRouter`,
 * `fhirRouter`).
 *
 * Every URL the platform advertises or returns (discovery, CapabilityStatement, `Location`,
 * `Content-Location`, manifest, SCIM `meta.location`) and the `iss`/`aud` of the access tokens it
 * issues follow `baseUrl` (or the request's origin) and the path the host mounts the router at:
 * tokens issued under `/api` are refused by a platform mounted elsewhere.
 */
export function fhirPlatform(options: FhirPlatformOptions): FhirPlatform {
  const parts = platformParts(options, checkPlatformOptions(options));
  const started: Started = {};
  try {
    return mountRouters(parts, started);
  } catch (error) {
    // A router refused its options: what was already started (the trail's journal lock and
    // timers, export workers) must not outlive the failed call.
    void started.bulk?.close().catch(() => undefined);
    void parts.auditTrail.close().catch(() => undefined);
    throw error;
  }
}

/** What {@link checkPlatformOptions} resolves besides the options themselves. */
interface PlatformSettings {
  paths: FhirPlatformPaths;
  logRequests: boolean;
  logger: Logger | undefined;
  readyTimeout: number;
  /** The `onError` and `logger` every router gets. */
  logging: { onError?: ErrorLogger; logger?: Logger };
}

/**
 * Checks the options, under this factory's name, before any router sees them (the ones the
 * routers share among them), and resolves the paths, the logging and the readiness timeout.
 */
function checkPlatformOptions(options: FhirPlatformOptions): PlatformSettings {
  if (!options || typeof options !== 'object') optionError(OWNER, 'options', 'options are required');
  storageOption(OWNER, options.storage);
  checkOptionKeys(OWNER, options, PLATFORM_KEYS);
  optionalFunction(OWNER, 'authenticate', options.authenticate, undefined);
  if (options.authorization?.authenticateUser && options.federation) {
    optionError(
      OWNER,
      'federation',
      'federation configures the default sign-in: give it or authorization.authenticateUser',
    );
  }
  baseUrlOption(OWNER, options.baseUrl);
  loggingOptions(OWNER, options);
  checkOptionKeys(OWNER, options.paths, PATH_KEYS, 'paths.');
  checkOptionKeys(OWNER, options.audit, AUDIT_OPTION_KEYS, 'audit.');
  const { storage } = options;
  const paths: FhirPlatformPaths = { ...DEFAULT_PATHS, ...options.paths };
  for (const [name, value] of Object.entries(paths)) normalisePath(name, value);
  const filesElsewhere =
    storage.exportFiles !== undefined || (options.bulk !== false && options.bulk?.exportFiles !== undefined);
  if (options.bulk !== false && !options.exportDir && !options.bulk?.exportDir && !filesElsewhere) {
    optionError(OWNER, 'exportDir', 'exportDir is required (or bulk: false)');
  }
  if (options.scimBasicAuth && options.authenticate) {
    // Basic is a mode of the built-in bearerAuth; a host's own authenticate decides alone.
    optionError(
      OWNER,
      'scimBasicAuth',
      'scimBasicAuth applies to the built-in bearerAuth only; with authenticate, accept Basic in it',
    );
  }
  const logRequests = booleanOption(OWNER, 'logRequests', options.logRequests, false);
  if (logRequests && !options.logger) optionError(OWNER, 'logRequests', 'logRequests needs a logger');
  const logger = options.logger ? componentLogger(options.logger) : undefined;
  const readyTimeout = positiveInteger(OWNER, 'readyTimeout', options.readyTimeout, 2000);
  const logging = { ...(options.onError ? { onError: options.onError } : {}), ...(logger ? { logger } : {}) };
  return { paths, logRequests, logger, readyTimeout, logging };
}

/** What the routers of one platform share: keys, grants, issuers, authentication, the audit trail. */
interface PlatformParts extends PlatformSettings {
  options: FhirPlatformOptions;
  storage: Storage;
  baseUrl: string | undefined;
  /** The path the platform's router is mounted at, per request (set by its first middleware). */
  mounts: WeakMap<Request, string>;
  /** The issuer as the platform computes it: origin (or `baseUrl`) and mount path. */
  platformIssuer: (req: Request) => string;
  issuer: string | ((req: Request) => string);
  audience: string | ((req: Request) => string);
  keys: SigningKeys;
  grants: GrantStore;
  fhirBase: (req: Request) => string;
  authenticate: Authenticate;
  scimAuthenticate: Authenticate;
  auditTrail: ReturnType<typeof safeAuditTrail>;
  /** The options every data router shares. */
  common: {
    storage: Storage;
    authenticate: Authenticate;
    baseUrl: string | undefined;
    onError?: ErrorLogger;
    logger?: Logger;
    auditTrail: ReturnType<typeof safeAuditTrail>;
  };
}

/** What has started and must be stopped if the platform cannot be built (or when it closes). */
interface Started {
  bulk?: ReturnType<typeof bulkExportRouter>;
}

/** Builds the parts the routers share from checked options. */
function platformParts(options: FhirPlatformOptions, settings: PlatformSettings): PlatformParts {
  const { storage, baseUrl } = options;
  const { paths, logging } = settings;
  // The path this router is mounted at, per request (this instance's own map: two platforms in
  // one app never read each other's): tokens are issued by and for `origin + mount`.
  const mounts = new WeakMap<Request, string>();
  const platformIssuer = (req: Request): string => `${defaultIssuer(req, baseUrl)}${mounts.get(req) ?? ''}`;
  const issuer = options.token?.issuer ?? platformIssuer;
  const audience = options.token?.audience ?? issuer;
  // One key set shared by the token endpoint, the verifier and the JWKS endpoint.
  const keys: SigningKeys =
    options.token?.signingKeys ?? createSigningKeys(storage, options.token?.signingKeyOptions);
  // SMART App Launch grants: the store's, or this platform's own memory (one process).
  const grants: GrantStore = options.token?.grants ?? storage.grants ?? new MemoryGrants();
  const fhirBase = (req: Request): string => `${platformIssuer(req)}${paths.fhir}`;
  const verifier: BearerAuthOptions = { storage, baseUrl, signingKeys: keys, issuer, audience, grants };
  const authenticate = options.authenticate ?? bearerAuth(verifier);
  const scimAuthenticate =
    options.authenticate ??
    (options.scimBasicAuth ? bearerAuth({ ...verifier, allowBasic: true }) : authenticate);
  const auditErrors = options.audit?.onError ?? errorSink(logging);
  // Auditing never fails a request: a failure to record goes to the trail's error sink.
  const auditTrail = safeAuditTrail(
    createAuditTrail({ ...options.audit, storage, onError: auditErrors }),
    auditErrors,
  );
  const common = { storage, authenticate, baseUrl, ...logging, auditTrail };
  return {
    ...settings,
    options,
    storage,
    baseUrl,
    mounts,
    platformIssuer,
    issuer,
    audience,
    keys,
    grants,
    fhirBase,
    authenticate,
    scimAuthenticate,
    auditTrail,
    common,
  };
}

/** The platform's router: probes, the authorization server, then the data routers. */
function mountRouters(parts: PlatformParts, started: Started): FhirPlatform {
  const { paths, auditTrail } = parts;
  const router = Router();
  router.use((req, _res, next) => {
    parts.mounts.set(req, req.baseUrl);
    next();
  });
  const { holds, errorPaths } = mountProbes(router, parts, started);
  const authenticateUser = mountAuthorizationServer(router, parts);
  const scimOptions = { ...parts.options.scim, ...parts.common, authenticate: parts.scimAuthenticate };
  const projectOptions = { ...parts.options.project, ...parts.common };
  router.use(paths.scim, scimRouter(scimOptions));
  router.use(paths.fhir, projectRouter(projectOptions));
  const admin = platformAdmin({ project: projectOptions, scim: scimOptions });
  mountFhirRouters(router, parts, started);
  const { bulk } = started;
  return {
    router,
    admin,
    errorPaths,
    authenticateUser,
    ready: bulk ? bulk.ready : Promise.resolve(),
    holdReadiness: (name, work) => holds.hold(name, work),
    close: async () => {
      await bulk?.close();
      await auditTrail.close();
    },
  };
}

/**
 * Health probes (before the request log, which they would flood; unauthenticated, no data), the
 * request log, the not-ready gate and the record of refusals.
 */
function mountProbes(router: Router, parts: PlatformParts, started: Started) {
  const { paths, storage, readyTimeout, keys, logger } = parts;
  const checks: ReadinessChecks = { storage: storageCheck(storage, readyTimeout) };
  if (parts.options.bulk !== false) checks.exportWorkers = () => started.bulk?.status() ?? 'closed';
  // Tokens need a signing key: the first probe makes one when the store has none.
  checks.signingKeys = timedCheck(() => keys.current(), readyTimeout, 'unavailable');
  const holds = readinessHolds(`${OWNER}.holdReadiness`, checks, PLATFORM_CHECKS);
  router.get(paths.healthz, livenessHandler());
  router.get(paths.readyz, readinessHandler(checks));
  if (parts.logRequests && logger) router.use(requestLogger(logger));
  const errorPaths = {
    scim: [paths.scim],
    oauth: [paths.token, paths.jwks, paths.revoke, paths.introspect],
  };
  router.use(notReadyGate(holds, errorFormatOf(OWNER, errorPaths)));
  // Refusals (401/403/404) of every surface; the token endpoint records its own as `token` events,
  // the federated sign-in as `sign-in` events.
  router.use(
    recordRefusals(
      parts.auditTrail,
      (path) => path.startsWith(paths.token) || path.startsWith(`${paths.federation}/`),
    ),
  );
  return { holds, errorPaths };
}

/**
 * The authorization server: token, JWKS, revocation and introspection endpoints, the sign-in of
 * SMART apps' users (the host's, or the federated one with its callback here), the authorization
 * endpoint and discovery. Returns the sign-in in use.
 */
function mountAuthorizationServer(router: Router, parts: PlatformParts): AuthenticateUser {
  const { options, paths, storage, baseUrl, keys, grants, issuer, audience, logging, auditTrail } = parts;
  const { platformIssuer, fhirBase } = parts;
  const tokenOptions = {
    fhirBase,
    ...options.token,
    storage,
    baseUrl,
    signingKeys: keys,
    issuer,
    audience,
    grants,
    ...logging,
    auditTrail,
  };
  router.use(paths.token, tokenRouter(tokenOptions));
  router.get(paths.jwks, jwksHandler({ storage, signingKeys: keys, ...logging }));
  const tokenUrl = (req: Request) => `${platformIssuer(req)}${paths.token}`;
  router.use(paths.revoke, revocationRouter({ ...tokenOptions, tokenUrl }));
  router.use(
    paths.introspect,
    introspectionRouter({ ...tokenOptions, tokenUrl, authenticate: parts.authenticate }),
  );
  let authenticateUser = options.authorization?.authenticateUser;
  if (!authenticateUser) {
    const federation = federatedSignIn({
      ...options.federation,
      storage,
      signingKeys: keys,
      auditTrail,
      onError: errorSink(logging),
      callbackUrl: (req) => `${platformIssuer(req)}${paths.federation}${FEDERATION_CALLBACK_PATH}`,
    });
    router.use(paths.federation, federation.router);
    authenticateUser = federation.authenticateUser;
  }
  router.use(
    paths.authorize,
    authorizationRouter({
      fhirBase,
      ...options.authorization,
      authenticateUser,
      storage,
      baseUrl,
      grants,
      ...logging,
      auditTrail,
    }),
  );
  router.use(
    discoveryRouter({
      options: {
        baseUrl,
        tokenEndpoint: paths.token,
        jwksEndpoint: paths.jwks,
        revocationEndpoint: paths.revoke,
        introspectionEndpoint: paths.introspect,
        authorizationEndpoint: paths.authorize,
        relativeToMount: true,
      },
      fhirPath: paths.fhir,
      smartIssuer: platformIssuer,
      tokenIssuer: issuer,
      signingAlgorithms: async () => [(await keys.current()).alg],
    }),
  );
  return authenticateUser;
}

/** Bulk Data export (unless `bulk: false`), then the FHIR router, whose CapabilityStatement names both. */
function mountFhirRouters(router: Router, parts: PlatformParts, started: Started): void {
  const { options, paths, baseUrl, common } = parts;
  if (options.bulk !== false) {
    started.bulk = bulkExportRouter({
      // A shutdown (SIGTERM, `close()`) lets running exports finish for a bounded time rather than
      // run them again from the start later; those still running then resume later.
      closeTimeout: PLATFORM_EXPORT_CLOSE_TIMEOUT,
      ...options.bulk,
      ...common,
      exportDir: options.bulk?.exportDir ?? options.exportDir,
    });
    router.use(paths.fhir, started.bulk);
  }
  const tokenPath = paths.token;
  router.use(
    paths.fhir,
    fhirRouter({
      ...options.fhir,
      ...common,
      capabilities: [
        ...(started.bulk ? [bulkExportCapability()] : []),
        {
          // The token URL is absolute; without a configured origin it follows the request's.
          customize: (statement) => {
            // `implementation.url` is the FHIR base as requested (origin, the host's mount path,
            // then paths.fhir): the token URL shares everything before paths.fhir.
            const implementation = statement.implementation as { url?: string } | undefined;
            const fhirBase = implementation?.url ?? baseUrl ?? '';
            const root = fhirBase.endsWith(paths.fhir) ? fhirBase.slice(0, -paths.fhir.length) : fhirBase;
            const rest = (statement.rest as Record<string, unknown>[] | undefined) ?? [];
            if (rest[0])
              rest[0].security = {
                ...(rest[0].security as object),
                ...smartSecurity(`${root}${tokenPath}`),
              };
            return statement;
          },
        },
        ...(options.fhir?.capabilities ?? []),
      ],
    }),
  );
}
