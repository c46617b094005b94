import type { Request, Router } from 'express';
import { tokenRouter } from './auth/token/token-router.js';
import { authorizationRouter } from './auth/authorize/authorization-router.js';
import { introspectionRouter, revocationRouter } from './auth/token/revocation-router.js';
import type { AuthenticateUser } from './auth/authorize/user-sign-in.js';
import { discoveryRouter, smartSecurity } from './auth/discovery/smart-configuration.js';
import { jwksHandler } from './auth/keys/jwks-handler.js';
import { bulkExportRouter } from './bulk/router.js';
import { bulkExportCapability } from './bulk/capability.js';
import { fhirRouter } from './fhir/router.js';
import { mergeSecurity } from './fhir/capability/capability-statement.js';
import {
  livenessHandler,
  readinessHandler,
  storageCheck,
  timedCheck,
  type ReadinessChecks,
} from './http/health.js';
import { notReadyGate, readinessHolds } from './http/readiness-holds.js';
import { errorFormatOf } from './http/error-paths.js';
import { errorSink, requestLogger } from './http/request-logging.js';
import { recordRefusals } from './http/audit-refusals.js';
import { FEDERATION_CALLBACK_PATH, federatedSignIn } from './auth/federation/federated-sign-in.js';
import { PLATFORM_OWNER } from './platform-options.js';
import type { PlatformParts, Started } from './platform-parts.js';

/** The readiness checks of the platform itself (`exportWorkers` only with bulk export). */
const PLATFORM_CHECKS = ['storage', 'exportWorkers', 'signingKeys'];

/** The platform's default `bulk.closeTimeout`, ms (the router's own is 0). */
const PLATFORM_EXPORT_CLOSE_TIMEOUT = 10_000;

/**
 * Health probes (before the request log, which they would flood; unauthenticated, no data), the
 * request log, the not-ready gate and the record of refusals.
 */
export function mountProbes(router: Router, parts: PlatformParts, started: Started) {
  const { paths, storage, readyTimeout, keys, logger } = parts;
  const checks: ReadinessChecks = { storage: storageCheck(storage, readyTimeout) };
  if (parts.options.bulk !== false) checks.exportWorkers = () => started.bulk?.status() ?? 'closed';
  // Tokens need a signing key: the first probe makes one when the store has none.
  checks.signingKeys = timedCheck(() => keys.current(), readyTimeout, 'unavailable');
  const holds = readinessHolds(`${PLATFORM_OWNER}.holdReadiness`, checks, PLATFORM_CHECKS);
  router.get(paths.healthz, livenessHandler());
  router.get(paths.readyz, readinessHandler(checks));
  if (parts.logRequests && logger) router.use(requestLogger(logger));
  const errorPaths = {
    scim: [paths.scim],
    oauth: [paths.token, paths.jwks, paths.revoke, paths.introspect],
  };
  router.use(notReadyGate(holds, errorFormatOf(PLATFORM_OWNER, errorPaths)));
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
export function mountAuthorizationServer(router: Router, parts: PlatformParts): AuthenticateUser {
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
export function mountFhirRouters(router: Router, parts: PlatformParts, started: Started): void {
  const { options, paths, baseUrl, common } = parts;
  if (options.bulk !== false) {
    started.bulk = bulkExportRouter({
      // A shutdown (SIGTERM, `close()`) lets running exports finish for a bounded time rather than
      // run them again from the start later; those still running then resume later.
      closeTimeout: PLATFORM_EXPORT_CLOSE_TIMEOUT,
      ...options.bulk,
      ...common,
      exportDir: options.bulk?.exportDir ?? options.exportDir,
      // `$import` validates strict projects' lines with the FHIR router's validator and terminology.
      import:
        options.bulk?.import === false
          ? false
          : {
              ...(options.fhir?.validator ? { validator: options.fhir.validator } : {}),
              ...(options.fhir?.terminology ? { terminology: options.fhir.terminology } : {}),
              ...options.bulk?.import,
            },
    });
    router.use(paths.fhir, started.bulk);
  }
  const { token: tokenPath, authorize, revoke, introspect } = paths;
  router.use(
    paths.fhir,
    fhirRouter({
      ...options.fhir,
      ...common,
      capabilities: [
        ...(started.bulk
          ? [bulkExportCapability({ import: options.bulk === false || options.bulk?.import !== false })]
          : []),
        {
          // The token URL is absolute; without a configured origin it follows the request's.
          customize: (statement) => {
            // `implementation.url` is the FHIR base as requested (origin, the host's mount path,
            // then paths.fhir): the token URL shares everything before paths.fhir.
            const implementation = statement.implementation as { url?: string } | undefined;
            const fhirBase = implementation?.url ?? baseUrl ?? '';
            const root = fhirBase.endsWith(paths.fhir) ? fhirBase.slice(0, -paths.fhir.length) : fhirBase;
            const rest = (statement.rest as Record<string, unknown>[] | undefined) ?? [];
            if (rest[0]) {
              // Appended to what other contributions declared (their extensions and services).
              const security = { ...(rest[0].security as Record<string, unknown> | undefined) };
              mergeSecurity(
                security,
                smartSecurity(`${root}${tokenPath}`, {
                  authorize: `${root}${authorize}`,
                  revoke: `${root}${revoke}`,
                  introspect: `${root}${introspect}`,
                }),
              );
              rest[0].security = security;
            }
            return statement;
          },
        },
        ...(options.fhir?.capabilities ?? []),
      ],
    }),
  );
}
