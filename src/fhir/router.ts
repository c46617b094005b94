import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import { fhirErrorHandler } from '../http/error-rendering.js';
import { FhirError } from '../http/http-error.js';
import { loadSearchRegistry } from '../search/definitions.js';
import { mountBundleRoute } from './bundle/bundle-route.js';
import { mountEverything } from './everything/everything-route.js';
import { mountHistoryRoutes } from './history/history-routes.js';
import { mountInstanceRoutes } from './instance-routes.js';
import { mountMetadata } from './capability/metadata-route.js';
import { fhirRouteDeps, setVersionHeaders } from './route-deps.js';
import { resolveFhirRouterOptions, type FhirRouterOptions } from './router-options.js';
import { refuseScimOwnedWrites } from './scim-owned-writes.js';
import { searchErrorsAsFhir } from './search/search-errors.js';
import { r4StructureValidator } from './validation/structure-validator.js';
import { mountTypeRoutes } from './type-routes.js';
import { mountValidate } from './validate/validate-route.js';
import { mountTerminologyRoutes } from './terminology/terminology-routes.js';
import { foregroundRequests } from '../http/foreground-requests.js';

/**
 * The FHIR R4 data plane, mounted by default at `/fhir/R4`:
 *
 * - `GET /metadata`: the CapabilityStatement (public, no authentication).
 * - `POST /{type}` (server-assigned id; `If-None-Exist` conditional create), `GET|PUT|PATCH|DELETE
 *   /{type}/{id}` (`ETag` / `If-Match` versioning; `If-None-Match` / `If-Modified-Since` conditional
 *   read; JSON Patch or FHIRPath Patch; a `Binary` read whose request accepts no FHIR JSON answers
 *   the Binary's own content), `PUT|DELETE /{type}?…` (conditional update and delete),
 *   `GET /{type}?…` and `POST /{type}/_search` (form body) searchset Bundles (a `total` when `_total`
 *   asks for one, an exact one at most `searchLimits.maxAccurateTotal`), included resources and
 *   keyset paging links.
 * - `GET /{type}/{id}/_history/{vid}` (vread of any version the store keeps; 410 for a deletion) and
 *   the `history` Bundles of `GET /_history`, `/{type}/_history` and `/{type}/{id}/_history`
 *   (`_since`, `_at`, `_count`, `next` links by cursor).
 * - `POST /` with a `batch` or `transaction` Bundle (JSON), or with `multipart/form-data` NDJSON files.
 * - `POST /{type}/$validate`, `GET|POST /{type}/{id}/$validate`: the checks of a write, answered as
 *   an OperationOutcome.
 * - `Patient/$everything`, and the terminology operations `ValueSet/$expand`, `$validate-code`,
 *   `CodeSystem/$lookup`, `$validate-code`, `$subsumes` (src/fhir/terminology).
 *
 * Every request acts in the principal's project (403 without one) and asks `canAccess` per type and
 * action; a write to a resource the identity provider owns through SCIM (a SCIM Group) answers
 * 409; every error is an OperationOutcome. Projects with `strictMode` validate writes against the
 * R4 structure definitions and their terminology bindings. See docs/fhir.md.
 * @see https://hl7.org/fhir/R4/http.html
 */
export function fhirRouter(options: FhirRouterOptions): Router {
  const resolved = resolveFhirRouterOptions(options, r4StructureValidator);
  // Every entry point below reads and writes through this store: what SCIM owns, FHIR only reads.
  const config = { ...resolved, storage: refuseScimOwnedWrites(resolved.storage) };
  // Warmed now, so that the first search or `/metadata` does not wait for it (about 0.4 s). Not
  // awaited; a failure is retried, and reported, by the first request that needs the registry.
  loadSearchRegistry().catch(() => undefined);
  const router = express.Router();
  // Foreground work (as the platform counts it), for a router mounted on its own.
  router.use(foregroundRequests());
  const deps = fhirRouteDeps(config);
  const { guard, secured, contextOf, base, audit, auditAccess } = deps;

  // --- metadata (public) ---
  mountMetadata(router, config, base);

  // --- vread and history: before the type and instance routes, which would take `_history` for a type or id ---
  mountHistoryRoutes(router, {
    storage: config.storage,
    guard,
    secured,
    securedRead: deps.securedRead,
    contextOf,
    base,
    search: deps.search,
    auditAccess: audit ? auditAccess : undefined,
    setVersionHeaders,
  });

  // --- system level: batch / transaction Bundle, or multipart NDJSON upload ---
  mountBundleRoute(router, deps);

  // --- Patient/$everything and Patient/{id}/$everything (before `/:type/:id`) ---
  mountEverything(router, {
    secured,
    contextOf,
    base,
    paging: deps.search,
    bodyLimit: config.bodyLimit,
    audit: audit && ((req, res, details) => auditAccess(req, res, details)),
  });

  // --- terminology: ValueSet/$expand, CodeSystem/$lookup, … (before `/:type/:id`) ---
  mountTerminologyRoutes(router, { secured, contextOf, body: deps.body });
  // --- [type]/$validate and [type]/[id]/$validate (before `/:type/:id`) ---
  mountValidate(router, deps);

  // --- type level: search (GET, or POST _search with a form body), create, conditional writes ---
  mountTypeRoutes(router, deps);

  // --- instance level: read, update, delete, patch ---
  mountInstanceRoutes(router, deps);

  if (!config.fallthrough) {
    router.use((_req: Request, _res: Response, next: NextFunction) => {
      next(new FhirError(404, 'not-found', 'No FHIR route for this URL'));
    });
  }
  router.use(searchErrorsAsFhir, fhirErrorHandler(config.onError));
  return router;
}
