import { Router } from 'express';
import { platformAdmin, type PlatformAdmin } from './platform-admin.js';
import type { AuthenticateUser } from './auth/authorize/user-sign-in.js';
import type { ErrorPaths } from './http/error-paths.js';
import { projectRouter } from './project/router.js';
import { scimRouter } from './scim/router.js';
import { checkPlatformOptions, type FhirPlatformOptions } from './platform-options.js';
import { platformParts, type PlatformParts, type Started } from './platform-parts.js';
import { mountAuthorizationServer, mountFhirRouters, mountProbes } from './platform-routes.js';
import { foregroundRequests } from './http/foreground-requests.js';

export type { FhirPlatformOptions, FhirPlatformPaths } from './platform-options.js';

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

/** The platform's router: probes, the authorization server, then the data routers. */
function mountRouters(parts: PlatformParts, started: Started): FhirPlatform {
  const { paths, auditTrail } = parts;
  const router = Router();
  // Every request is foreground work, which the embedded stores' costly searches give way to.
  router.use(foregroundRequests());
  router.use((req, _res, next) => {
    parts.mounts.set(req, req.baseUrl);
    next();
  });
  const { holds, errorPaths } = mountProbes(router, parts, started);
  const authenticateUser = mountAuthorizationServer(router, parts);
  const scimOptions = { ...parts.options.scim, ...parts.common, authenticate: parts.scimAuthenticate };
  const projectOptions = {
    ...importAddressRule(parts.options.bulk),
    ...parts.options.project,
    ...parts.common,
  };
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
 * The import's private-address setting, for the project router's check of `$settings` import
 * sources: one setting for both places an import URL is judged (registration and connection).
 */
function importAddressRule(bulk: FhirPlatformOptions['bulk']): { allowPrivateImportAddresses?: boolean } {
  const allowed = bulk === false || bulk?.import === false ? undefined : bulk?.import?.allowPrivateAddresses;
  return allowed === undefined ? {} : { allowPrivateImportAddresses: allowed };
}
