import { errorSink } from '../http/logger.js';
import { checkOptionKeys, type OptionKeys } from '../http/option-keys.js';
import { statfs } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Router, type ErrorRequestHandler, type Request, type RequestHandler } from 'express';
import { requestRecorder } from '../audit/request-recorder.js';
import { isValidId } from '../fhir/resource-types.js';
import { asyncHandler } from '../http/async-handler.js';
import { findPrincipal, getPrincipal, requirePrincipal, requireProjectId } from '../http/authenticate.js';
import { absoluteUrl, requestUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { fhirErrorHandler, operationOutcome, toHttpError } from '../http/error-rendering.js';
import { FhirError } from '../http/http-error.js';
import {
  booleanOption,
  optionError,
  nonNegativeNumber,
  optionalFunction,
  positiveLimit,
  positiveNumber,
} from '../http/options.js';
import { FHIR_JSON, sendFhir } from '../http/protocol-responses.js';
import type { CommonRouterOptions } from '../http/router-options.js';
import { NotFoundError } from '../storage/errors.js';
import type { ExportFileStore } from '../storage/types.js';
import { DirectoryExportFiles } from './directory-export-files.js';
import { findExportFile, sendExportFile } from './downloads.js';
import { exportScope } from './export-audit.js';
import { ExportJobManager } from './export-jobs.js';
import { planExport } from './export-plan.js';
import { ExportPool, type ExportPoolOptions } from './export-pool.js';
import type { ExportTask } from './export-task.js';
import { KickoffLimits } from './kickoff-limits.js';
import { parseKickoff, type ExportLevel, type ExportParams } from './kickoff-params.js';
import { buildManifest } from './manifest.js';

/** Options of {@link bulkExportRouter}. */
export interface BulkExportRouterOptions extends CommonRouterOptions {
  /**
   * Directory of the export files, one sub-directory per job. Give every router its own
   * directory (or share one only between routers on the same storage).
   * @default `<os.tmpdir()>/fhir-platform-kit-exports`
   */
  exportDir?: string;
  /**
   * Where export files are kept: a store every instance reaches, or the directory `exportDir`.
   * Pass `new DirectoryExportFiles(dir)` to keep files on local disk with a PostgreSQL store (then
   * only with a single instance, or a directory every instance shares).
   * @default `storage.exportFiles` (PostgreSQL: in the database), else `exportDir`
   */
  exportFiles?: ExportFileStore;
  /**
   * Milliseconds a running export's lease lasts without renewal, with a store that shares its
   * export queue between instances (PostgreSQL): an instance that dies stops renewing, and
   * another takes the job over once the lease has expired. Ignored by the other stores.
   * @default 30000
   */
  leaseDuration?: number;
  /**
   * Milliseconds between two lease renewals of a running export (shared queue only); each
   * heartbeat also looks for jobs to take over and learns of a cancellation through another
   * instance. Must be below `leaseDuration` (a third of it leaves room for two missed beats).
   * @default 10000
   */
  heartbeatInterval?: number;
  /**
   * Output files are split before they would exceed this many bytes.
   * @default 67108864 (64 MiB)
   */
  maxFileSize?: number;
  /**
   * Hard cap on the files of one export, in bytes: an export that would write more stops, fails
   * with an OperationOutcome `too-costly` and its files are removed. `Infinity` disables it.
   * @default 4294967296 (4 GiB)
   */
  maxExportSize?: number;
  /**
   * Bytes of export files a project may keep: completed exports not yet expired or deleted, plus
   * what its running exports have written so far. While the project is at or over it, a kick-off
   * answers 429 (`too-costly`, `Retry-After` = until the earliest of its exports expires); a running
   * export is not stopped by it (see `maxExportSize`). `Infinity` disables it.
   * @default 1073741824 (1 GiB)
   */
  maxProjectExportSize?: number;
  /**
   * Export kick-offs a project may make in any 60-minute window (accepted ones count, even when
   * cancelled since); one more answers 429 (`throttled`, `Retry-After` = until one leaves the
   * window). `Infinity` disables it.
   * @default 30
   */
  maxKickoffsPerHour?: number;
  /**
   * Free bytes the file system of `exportDir` must have for a kick-off to be accepted; below it
   * kick-offs answer 503 (`transient`, `Retry-After` = `cleanupInterval`). `0` disables the check.
   * @default 1073741824 (1 GiB)
   */
  minFreeSpace?: number;
  /**
   * How free space is measured: bytes available to this process on the file system of `dir`
   * (the export directory). Replace it to test or to measure a quota of your own.
   * @default `fs.promises.statfs(dir)`: `bavail * bsize`
   */
  freeSpaceProbe?: (dir: string) => number | Promise<number>;
  /**
   * Running (accepted or in-progress) exports allowed per project; one more answers 429.
   * @default 2
   */
  maxRunningExports?: number;
  /**
   * Milliseconds a finished export (files and job record) is kept after completion.
   * @default 21600000 (6 hours)
   */
  retention?: number;
  /**
   * Milliseconds between two looks for expired exports.
   * @default 60000
   */
  cleanupInterval?: number;
  /**
   * `Retry-After` (seconds) of a 202 status answer and of a 429 kick-off answer.
   * @default 1
   */
  retryAfter?: number;
  /**
   * The worker pool: an `ExportPool` shared with other routers (not closed by this router), or
   * options of a pool this router owns.
   * @default a pool of its own with default options
   */
  pool?: ExportPool | ExportPoolOptions;
  /**
   * Refuse (`400`) a kick-off without an `Accept` header or without `Prefer: respond-async`, which
   * Bulk Data 2.0.0 requires of clients. Off by default: the IG lets a server accept such requests,
   * and common clients send neither.
   * @default false
   */
  requireAsyncHeaders?: boolean;
  /**
   * Test hook: transforms each task before it runs (e.g. `{ ...task, crash: 'exit' }`).
   * @default undefined
   */
  taskHook?: (task: ExportTask) => ExportTask;
}

/** The router, with its lifecycle. */
export type BulkExportRouter = Router & {
  /** Settles once interrupted jobs have been restarted and leftover files swept. */
  readonly ready: Promise<void>;
  /** Stops the retention timer, the running jobs (they resume at next start) and an owned pool. */
  close(): Promise<void>;
  /**
   * For readiness probes: `'ok'` once interrupted jobs have restarted and while the worker pool
   * can run exports; otherwise what is not ready (`'starting'`, `'closed'`, `'worker-missing'`).
   */
  status(): 'ok' | 'starting' | 'closed' | 'worker-missing';
};

const EXPORT = '(?:\\$|%24)export';
// Routes have no capture groups: Express would decode them and answer a malformed escape with its
// own (HTML) 400 before our handlers run. Segments are taken from `req.path` by `segments()`.
const ROUTES = {
  system: new RegExp(`^/${EXPORT}/?$`),
  patient: new RegExp(`^/Patient/${EXPORT}/?$`),
  group: new RegExp(`^/Group/[^/]+/${EXPORT}/?$`),
  status: new RegExp(`^/${EXPORT}-status/[^/]+/?$`),
  file: new RegExp(`^/${EXPORT}-file/[^/]+/[^/]+$`),
};

/** The decoded path segments of the request (undefined for a malformed escape). */
function segment(req: Request, index: number): string | undefined {
  return decodeParam(req.path.split('/')[index]);
}

/** Bytes available to this process on the file system holding `dir`. */
async function statfsFreeSpace(dir: string): Promise<number> {
  const stats = await statfs(dir);
  return stats.bavail * stats.bsize;
}

const HOUR = 60 * 60 * 1000;
const GIB = 1024 * 1024 * 1024;
const OWNER = 'bulkExportRouter';

const BULK_ROUTER_KEYS: OptionKeys<BulkExportRouterOptions> = {
  storage: true,
  authenticate: true,
  baseUrl: true,
  onError: true,
  logger: true,
  auditTrail: true,
  exportDir: true,
  maxFileSize: true,
  maxExportSize: true,
  maxProjectExportSize: true,
  maxKickoffsPerHour: true,
  minFreeSpace: true,
  freeSpaceProbe: true,
  maxRunningExports: true,
  retention: true,
  cleanupInterval: true,
  retryAfter: true,
  pool: true,
  requireAsyncHeaders: true,
  taskHook: true,
  exportFiles: true,
  leaseDuration: true,
  heartbeatInterval: true,
};

/** Options with every default filled in. */
export interface ResolvedBulkExportRouterOptions
  extends
    Required<Omit<BulkExportRouterOptions, 'baseUrl' | 'pool' | 'taskHook' | 'logger' | 'auditTrail'>>,
    Pick<BulkExportRouterOptions, 'baseUrl' | 'pool' | 'taskHook' | 'logger' | 'auditTrail'> {}

/** An `exportFiles` option: an object with the store's methods. */
function exportFilesOption(value: ExportFileStore | undefined, fallback: ExportFileStore): ExportFileStore {
  if (value === undefined) return fallback;
  const store: unknown = value;
  const methods = ['sink', 'size', 'read', 'bytes', 'remove', 'close'];
  const has = (m: string): boolean => typeof (store as Record<string, unknown>)[m] === 'function';
  if (typeof store !== 'object' || store === null || !methods.every(has)) {
    optionError(
      OWNER,
      'exportFiles',
      'exportFiles must be an ExportFileStore (e.g. new DirectoryExportFiles(dir))',
    );
  }
  return value;
}

/** Fills in defaults and fails fast on bad options. */
export function resolveBulkExportRouterOptions(
  options: BulkExportRouterOptions,
): ResolvedBulkExportRouterOptions {
  checkOptionKeys(OWNER, options, BULK_ROUTER_KEYS);
  const retryAfter = positiveNumber(OWNER, 'retryAfter', options.retryAfter, 1);
  const maxRunningExports = positiveNumber(OWNER, 'maxRunningExports', options.maxRunningExports, 2);
  const maxProjectExportSize = positiveLimit(
    OWNER,
    'maxProjectExportSize',
    options.maxProjectExportSize,
    GIB,
  );
  const maxKickoffsPerHour = positiveLimit(OWNER, 'maxKickoffsPerHour', options.maxKickoffsPerHour, 30);
  const minFreeSpace = nonNegativeNumber(OWNER, 'minFreeSpace', options.minFreeSpace ?? GIB, GIB);
  const freeSpaceProbe = optionalFunction(OWNER, 'freeSpaceProbe', options.freeSpaceProbe, statfsFreeSpace);
  const exportDir = path.resolve(options.exportDir ?? path.join(os.tmpdir(), 'fhir-platform-kit-exports'));
  const retention = positiveNumber(OWNER, 'retention', options.retention, 6 * HOUR);
  const cleanupInterval = positiveNumber(OWNER, 'cleanupInterval', options.cleanupInterval, 60_000);
  const maxFileSize = positiveNumber(OWNER, 'maxFileSize', options.maxFileSize, 64 * 1024 * 1024);
  const maxExportSize = positiveLimit(OWNER, 'maxExportSize', options.maxExportSize, 4 * GIB);
  const exportFiles = exportFilesOption(
    options.exportFiles,
    options.storage?.exportFiles ?? new DirectoryExportFiles(exportDir),
  );
  const leaseDuration = positiveNumber(OWNER, 'leaseDuration', options.leaseDuration, 30_000);
  const heartbeatInterval = positiveNumber(OWNER, 'heartbeatInterval', options.heartbeatInterval, 10_000);
  if (heartbeatInterval >= leaseDuration) {
    optionError(OWNER, 'heartbeatInterval', 'heartbeatInterval must be less than leaseDuration');
  }
  const requireAsyncHeaders = booleanOption(
    OWNER,
    'requireAsyncHeaders',
    options.requireAsyncHeaders ?? false,
    false,
  );
  return {
    ...options,
    onError: errorSink(options),
    retryAfter,
    maxRunningExports,
    maxProjectExportSize,
    maxKickoffsPerHour,
    minFreeSpace,
    freeSpaceProbe,
    exportDir,
    exportFiles,
    leaseDuration,
    heartbeatInterval,
    retention,
    cleanupInterval,
    maxFileSize,
    maxExportSize,
    requireAsyncHeaders,
  };
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
  const { storage, authenticate, baseUrl, onError, exportDir, requireAsyncHeaders } = config;
  const retryAfter = String(Math.ceil(config.retryAfter));
  const ownsPool = !(config.pool instanceof ExportPool);
  const pool = config.pool instanceof ExportPool ? config.pool : new ExportPool(config.pool);
  const jobs = new ExportJobManager({
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
    taskHook: config.taskHook,
    onError,
    ...(config.auditTrail ? { auditTrail: config.auditTrail } : {}),
  });
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
  const errors = fhirErrorHandler(onError);
  const body = jsonBody({ types: [FHIR_JSON, 'application/json'] });
  const route = (
    method: 'get' | 'post' | 'delete',
    pattern: RegExp,
    ...handlers: (RequestHandler | ErrorRequestHandler)[]
  ): void => {
    router[method](pattern, auth, ...handlers, errors);
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
      const { params, issues } = parseKickoff({
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
      try {
        plan = await planExport(storage, projectId, principal, params, issues);
      } catch (error) {
        if (error instanceof NotFoundError)
          throw new FhirError(404, 'not-found', `Group/${groupId} does not exist`);
        throw error;
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
      const { status, message } = toHttpError(error);
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

  const jobParam = (req: Request): string => segment(req, 2) ?? '';

  route(
    'get',
    ROUTES.status,
    asyncHandler(async (req, res) => {
      const principal = getPrincipal(res);
      const job = await jobs.visibleJob(requireProjectId(principal), principal.id, jobParam(req));
      res.set('Cache-Control', 'no-store');
      if (job.status === 'accepted' || job.status === 'in-progress') {
        const progress = jobs.progressOf(job);
        const text = progress
          ? `${progress.resources} resources written, ${progress.typesDone} of ${progress.typesTotal} types done`
          : job.status;
        res.status(202).set('X-Progress', text).set('Retry-After', retryAfter).end();
        return;
      }
      if (job.status === 'failed') {
        sendFhir(res, 500, job.failure ?? operationOutcome('fatal', 'exception', 'The export failed'));
        return;
      }
      const manifest = buildManifest(job, (file) =>
        absoluteUrl(req, `/$export-file/${job.id}/${file}`, baseUrl),
      );
      if (job.expiresAt) res.set('Expires', new Date(job.expiresAt).toUTCString());
      res.status(200).type('application/json').send(JSON.stringify(manifest));
    }),
  );

  route(
    'delete',
    ROUTES.status,
    asyncHandler(async (req, res) => {
      const principal = getPrincipal(res);
      const job = await jobs.visibleJob(requireProjectId(principal), principal.id, jobParam(req));
      await jobs.cancel(job);
      audit?.(req, res, {
        kind: 'export',
        phase: 'cancelled',
        jobId: job.id,
        ...exportScope((job.params as { params?: ExportParams }).params),
      });
      sendFhir(res, 202, information('Export cancelled and removed'));
    }),
  );

  route(
    'get',
    ROUTES.file,
    asyncHandler(async (req, res) => {
      const principal = getPrincipal(res);
      const file = segment(req, 3) ?? '';
      const found = await findExportFile(jobs, principal, jobParam(req), file);
      await sendExportFile(
        req,
        res,
        jobs,
        found,
        audit &&
          ((outcome) => audit(req, res, { kind: 'download', jobId: found.ref.jobId, file, ...outcome })),
      );
    }),
  );

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
      await jobs.close();
      if (ownsPool) await pool.close();
    },
  }) as BulkExportRouter;
}
