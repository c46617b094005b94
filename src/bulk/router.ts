import { Router, type ErrorRequestHandler, type Request, type RequestHandler } from 'express';
import { requestRecorder } from '../http/request-recorder.js';
import { isValidId } from '../common/resource-types.js';
import { asyncHandler } from '../http/async-handler.js';
import { findPrincipal, getPrincipal, requirePrincipal, requireProjectId } from '../http/authenticate.js';
import { absoluteUrl, requestUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { fhirErrorHandler, operationOutcome, toHttpError } from '../http/error-rendering.js';
import { fhirJsonOnly } from '../http/fhir-format.js';
import { FhirError } from '../http/http-error.js';
import { FHIR_JSON, sendFhir } from '../http/protocol-responses.js';
import { loadSearchRegistry } from '../search/definitions.js';
import { NotFoundError } from '../storage/errors.js';
import { exportScope } from './export-audit.js';
import { OPERATION_DEFINITION_ROUTE, operationDefinitionRoute } from './operation-definitions.js';
import { ExportJobManager } from './export-jobs.js';
import { canExport, planExport } from './export-plan.js';
import { scopedStorage, userDataAccess } from '../fhir/scoped-storage.js';
import { ExportPool } from './export-pool.js';
import { KickoffLimits } from './kickoff-limits.js';
import { parseKickoff, type ExportLevel } from './kickoff-params.js';
import { jobRoutes } from './job-routes.js';
import {
  resolveBulkExportRouterOptions,
  type BulkExportRouterOptions,
  type ResolvedBulkExportRouterOptions,
} from './router-options.js';
import { resolveTypeFilterChains } from './type-filter-chains.js';
import { fhirErrorOfSearch, searchErrorsAsFhir } from '../fhir/search/search-errors.js';
import { r4StructureValidator } from '../fhir/validation/structure-validator.js';
import { resourceValidation } from '../fhir/validation/resource-validation.js';
import { r4Terminology } from '../terminology/r4-terminology.js';
import { importRoutes } from './import/import-routes.js';
import type { ImportDeps } from './import/import-run.js';
import { sourceFetcher, type SourceFetcher } from './import/source-fetch.js';
import type { ResolvedBulkImportOptions } from './import/import-options.js';
import { importSourceFor } from '../storage/import-source-match.js';

export type { BulkExportRouterOptions } from './router-options.js';

/** The router, with its lifecycle. */
export type BulkExportRouter = Router & {
  /** Settles once interrupted jobs have been restarted and leftover files swept. */
  readonly ready: Promise<void>;
  /**
   * Stops the retention timer and the claims of new work, lets running jobs go on for up to
   * `closeTimeout` ms, stops those still running (they resume at the next start, or on another
   * instance with a shared queue), then drains and closes an owned pool (`ExportPool.close()`: by
   * then nothing of this router runs in it). A shared pool is left open.
   */
  close(): Promise<void>;
  /**
   * For readiness probes: `'ok'` once interrupted jobs have restarted and while the worker pool
   * can run exports; otherwise what is not ready (`'starting'`, `'closed'`, `'worker-missing'`).
   */
  status(): 'ok' | 'starting' | 'closed' | 'worker-missing';
};

const EXPORT = '(?:\\$|%24)export';
const IMPORT = '(?:\\$|%24)import';
// Routes have no capture groups: Express would decode them and answer a malformed escape with its
// own (HTML) 400 before our handlers run. Segments are taken from `req.path` by `segments()`.
const ROUTES = {
  system: new RegExp(`^/${EXPORT}/?$`),
  patient: new RegExp(`^/Patient/${EXPORT}/?$`),
  group: new RegExp(`^/Group/[^/]+/${EXPORT}/?$`),
  status: new RegExp(`^/${EXPORT}-status/[^/]+/?$`),
  import: new RegExp(`^/${IMPORT}/?$`),
  importStatus: new RegExp(`^/${IMPORT}-status/[^/]+/?$`),
  file: new RegExp(`^/${EXPORT}-file/[^/]+/[^/]+$`),
};

/** The decoded path segments of the request (undefined for a malformed escape). */
function segment(req: Request, index: number): string | undefined {
  return decodeParam(req.path.split('/')[index]);
}

function header(req: Request, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

function decodeParam(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  try {
    return decodeURIComponent(value);
  } catch {
    return undefined;
  }
}

function information(text: string): Record<string, unknown> {
  return operationOutcome('information', 'informational', text);
}

/**
 * Bulk Data Access 2.0.0 export (https://hl7.org/fhir/uv/bulkdata/STU2/export.html), mounted under
 * the FHIR base (e.g. `/fhir/R4`) next to the FHIR router: it answers only its own paths and calls
 * `next()` for every other request.
 *
 * - `GET|POST /$export`, `/Patient/$export`, `/Group/{id}/$export`: kick-off, `202` with
 *   `Content-Location` = the status URL;
 * - `GET /$export-status/{job}`: `202` with `X-Progress` and `Retry-After` while running, `200` with
 *   the manifest, or the failure's OperationOutcome; `DELETE` cancels and removes the job;
 * - `GET /$export-file/{job}/{file}`: downloads one manifest file (gzip, `Range`).
 *
 * Jobs run in worker threads (see {@link ExportPool}); interrupted jobs restart when the router is
 * created. Call `close()` when the host shuts down.
 */
export function bulkExportRouter(options: BulkExportRouterOptions): BulkExportRouter {
  const config = resolveBulkExportRouterOptions(options);
  const { storage, authenticate, baseUrl, onError, requireAsyncHeaders } = config;
  const retryAfter = String(Math.ceil(config.retryAfter));
  const ownsPool = !(config.pool instanceof ExportPool);
  const pool = config.pool instanceof ExportPool ? config.pool : new ExportPool(config.pool);
  const fetcher = config.import ? importFetcher(config.import) : undefined;
  const jobs = exportJobManager(config, pool, fetcher);
  // Undefined when no trail records: the events are then not even built.
  const audit = requestRecorder(config.auditTrail, onError);
  let started = false;
  let closed = false;
  const ready = jobs
    .start()
    .catch(onError)
    .finally(() => (started = true));

  const router = Router();
  const auth = requirePrincipal(authenticate, storage);
  const errors = [searchErrorsAsFhir, fhirErrorHandler(onError)];
  const body = jsonBody({ types: [FHIR_JSON, 'application/json'] });
  const route = (
    method: 'get' | 'post' | 'delete',
    pattern: RegExp,
    ...handlers: (RequestHandler | ErrorRequestHandler)[]
  ): void => {
    router[method](pattern, auth, ...handlers, ...errors);
  };

  const kickoff = (level: ExportLevel): RequestHandler =>
    asyncHandler(async (req, res) => {
      const principal = getPrincipal(res);
      const projectId = requireProjectId(principal);
      let groupId: string | undefined;
      if (level === 'group') {
        groupId = segment(req, 2);
        if (groupId === undefined || !isValidId(groupId))
          throw new FhirError(404, 'not-found', 'No such Group');
      }
      // Loaded once per process (the FHIR router warms it); `_typeFilter` is parsed with it.
      const registry = await loadSearchRegistry();
      const { params, issues } = parseKickoff({
        registry,
        level,
        groupId,
        method: req.method,
        query: req.query,
        body: req.body as unknown,
        prefer: header(req, 'prefer'),
        accept: header(req, 'accept'),
        requireAsyncHeaders,
      });
      let plan;
      const access = userDataAccess(principal, storage, projectId);
      try {
        plan = await planExport(storage, projectId, principal, params, issues, access);
      } catch (error) {
        if (error instanceof NotFoundError)
          throw new FhirError(404, 'not-found', `Group/${groupId} does not exist`);
        throw error;
      }
      const searches = plan.params.typeFilterSearches;
      if (searches) {
        // A kick-off the limits refuse pays for no chain search.
        if (searches.some((search) => search.filters.some((f) => f.kind !== 'parameter')))
          await jobs.checkLimits(projectId);
        // Chains and `_has` are answered now, in the caller's view of the store (docs/bulk-export.md).
        const typeFilterSearches = await resolveTypeFilterChains(searches, plan.types, {
          storage: access ? scopedStorage(storage, access) : storage,
          projectId,
          registry,
          canSee: (type) => canExport(principal, type),
          maxMatches: config.maxTypeFilterMatches,
        });
        plan.params = { ...plan.params, typeFilterSearches };
      }
      // Free space, then the per-project limits, checked by the job manager.
      const job = await jobs.kickoff({
        projectId,
        ownerId: principal.id,
        ownerKind: principal.kind,
        request: requestUrl(req, baseUrl),
        plan,
      });
      audit?.(req, res, { kind: 'export', phase: 'kickoff', jobId: job.id, ...exportScope(params) });
      res.set('Content-Location', absoluteUrl(req, `/$export-status/${job.id}`, baseUrl));
      sendFhir(res, 202, information('Export accepted'));
    });

  /**
   * Records a kick-off refused otherwise than by a 401, 403 or 404 (the platform records those as
   * refusals): bad parameters or body (400), limits (429), no disk space (503).
   */
  const refusedKickoff =
    (level: ExportLevel): ErrorRequestHandler =>
    (error, req, res, next) => {
      const { status, message } = toHttpError(fhirErrorOfSearch(error));
      // No principal: refused before the kick-off was looked at (the platform records that).
      if (audit && findPrincipal(res) && status !== 401 && status !== 403 && status !== 404) {
        const groupId = level === 'group' ? segment(req, 2) : undefined;
        audit(req, res, {
          kind: 'export',
          phase: 'kickoff',
          level,
          ...(groupId !== undefined && isValidId(groupId) ? { groupId } : {}),
          status,
          error: message,
        });
      }
      next(error);
    };

  for (const level of ['system', 'patient', 'group'] as const) {
    route('get', ROUTES[level], kickoff(level), refusedKickoff(level));
    route('post', ROUTES[level], body, kickoff(level), refusedKickoff(level));
  }

  // Conformance resources, public as the CapabilityStatement is.
  router.get(
    OPERATION_DEFINITION_ROUTE,
    operationDefinitionRoute((req) => absoluteUrl(req, '', baseUrl)),
    ...errors,
  );
  const job = jobRoutes({ jobs, baseUrl, retryAfter, audit, segment, information });
  // The status answers FHIR JSON (a manifest, an OperationOutcome): 406 for a client wanting XML.
  route('get', ROUTES.status, fhirJsonOnly(), job.status);
  route('delete', ROUTES.status, job.cancel);
  route('get', ROUTES.file, job.file);
  if (config.import && fetcher) {
    const imports = importRoutes({
      jobs,
      baseUrl,
      retryAfter,
      maxInputs: config.import.maxInputs,
      urlProblem: (url) => fetcher.urlProblem(url),
      segment,
      information,
      audit,
    });
    route('post', ROUTES.import, body, imports.kickoff, imports.refused);
    route('get', ROUTES.importStatus, fhirJsonOnly(), imports.status);
    route('delete', ROUTES.importStatus, imports.cancel);
  }

  return Object.assign(router, {
    ready,
    status() {
      if (closed) return 'closed';
      if (!started) return 'starting';
      return pool.status();
    },
    async close(): Promise<void> {
      closed = true;
      await ready;
      await jobs.close(config.closeTimeout);
      if (ownsPool) await pool.close();
    },
  }) as BulkExportRouter;
}

/** The job manager of a router: its pool, where the files go, the queue, and the kick-off limits. */
function exportJobManager(
  config: ResolvedBulkExportRouterOptions,
  pool: ExportPool,
  fetcher: SourceFetcher | undefined,
): ExportJobManager {
  const retryAfter = String(Math.ceil(config.retryAfter));
  const { storage, onError, exportDir } = config;
  return new ExportJobManager({
    storage,
    pool,
    exportDir,
    files: config.exportFiles,
    ...(storage.exportQueue ? { queue: storage.exportQueue } : {}),
    leaseDuration: config.leaseDuration,
    heartbeatInterval: config.heartbeatInterval,
    maxFileSize: config.maxFileSize,
    maxExportSize: config.maxExportSize,
    retention: config.retention,
    cleanupInterval: config.cleanupInterval,
    limits: new KickoffLimits({
      exportDir: config.exportFiles.directory ?? exportDir,
      maxRunning: config.maxRunningExports,
      maxKickoffs: config.maxKickoffsPerHour,
      maxProjectBytes: config.maxProjectExportSize,
      // Free space is that of `exportDir`: files kept elsewhere do not use it.
      minFreeSpace: config.exportFiles.directory === undefined ? 0 : config.minFreeSpace,
      freeSpaceProbe: config.freeSpaceProbe,
      retention: config.retention,
      cleanupInterval: config.cleanupInterval,
      retryAfter,
      onError,
    }),
    onError,
    ...(config.auditTrail ? { auditTrail: config.auditTrail } : {}),
    ...(config.import && fetcher ? { importer: importDeps(config.import, fetcher) } : {}),
  });
}

/** The import source client, under the import options' address policy and limits. */
function importFetcher(options: ResolvedBulkImportOptions): SourceFetcher {
  return sourceFetcher({
    idleTimeout: options.idleTimeout,
    maxJsonBytes: options.maxManifestBytes,
    allowPrivateAddresses: options.allowPrivateAddresses,
  });
}

/** What import runs need: the fetcher, the project's validation, the loader limits. */
function importDeps(
  options: ResolvedBulkImportOptions,
  fetcher: SourceFetcher,
): ImportDeps & { maxRunning: number } {
  return {
    fetcher,
    validation: resourceValidation(
      options.validator ?? r4StructureValidator(),
      options.terminology ?? r4Terminology(),
    ),
    load: {
      batchSize: options.batchSize,
      maxLineLength: options.maxLineLength,
      maxIssues: options.maxErrorsPerFile,
    },
    manifestWait: options.manifestWait,
    attempts: options.attempts,
    maxRunning: options.maxRunning,
    sourceClient: (project, url) => importSourceFor(project.importSources, url),
  };
}
