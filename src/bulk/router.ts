import { createReadStream } from 'node:fs';
import { mkdir, statfs } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { Router, type NextFunction, type Request, type RequestHandler } from 'express';
import { isValidId } from '../fhir/resource-types.js';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal, requirePrincipal, requireProjectId } from '../http/authenticate.js';
import { absoluteUrl, requestUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { defaultErrorLogger, fhirErrorHandler, operationOutcome } from '../http/error-rendering.js';
import { FhirError } from '../http/http-error.js';
import type { CommonRouterOptions } from '../http/router-options.js';
import { NotFoundError } from '../storage/errors.js';
import { ExportJobManager } from './export-jobs.js';
import { canExport, planExport } from './export-plan.js';
import { ExportPool, type ExportPoolOptions } from './export-pool.js';
import type { ExportTask } from './export-task.js';
import { parseKickoff, type ExportLevel } from './kickoff-params.js';
import { buildManifest, findJobFile } from './manifest.js';
import { InvalidOptionError } from '../errors.js';

/** Options of {@link bulkExportRouter}. */
export interface BulkExportRouterOptions extends CommonRouterOptions {
  /**
   * Directory of the export files, one sub-directory per job. Give every router its own
   * directory (or share one only between routers on the same storage).
   * @default `<os.tmpdir()>/fhir-platform-kit-exports`
   */
  exportDir?: string;
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

const FILE_NAME = /^[A-Za-z]+-[0-9]+\.ndjson$/;

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0)
    throw new InvalidOptionError(`bulkExportRouter: ${name} must be a positive number`);
  return value;
}

/** A size or count limit: a positive number, or `Infinity` for none. */
function limit(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || Number.isNaN(value) || value <= 0)
    throw new InvalidOptionError(`bulkExportRouter: ${name} must be a positive number or Infinity`);
  return value;
}

/** Bytes available to this process on the file system holding `dir`. */
async function statfsFreeSpace(dir: string): Promise<number> {
  const stats = await statfs(dir);
  return stats.bavail * stats.bsize;
}

const HOUR = 60 * 60 * 1000;
const GIB = 1024 * 1024 * 1024;

/** Whole seconds until `at` (epoch ms), at least 1. */
function secondsUntil(at: number, now: number): string {
  return String(Math.max(1, Math.ceil((at - now) / 1000)));
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

function information(text: string): string {
  return JSON.stringify(operationOutcome('information', 'informational', text));
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
  const { storage, authenticate, baseUrl } = options;
  const onError = options.onError ?? defaultErrorLogger;
  const retryAfter = String(Math.ceil(positive('retryAfter', options.retryAfter, 1)));
  const maxRunning = positive('maxRunningExports', options.maxRunningExports, 2);
  const maxProjectBytes = limit('maxProjectExportSize', options.maxProjectExportSize, GIB);
  const maxKickoffs = limit('maxKickoffsPerHour', options.maxKickoffsPerHour, 30);
  const minFreeSpace = options.minFreeSpace ?? GIB;
  if (typeof minFreeSpace !== 'number' || !Number.isFinite(minFreeSpace) || minFreeSpace < 0)
    throw new InvalidOptionError('bulkExportRouter: minFreeSpace must be a finite number >= 0');
  if (options.freeSpaceProbe !== undefined && typeof options.freeSpaceProbe !== 'function')
    throw new InvalidOptionError('bulkExportRouter: freeSpaceProbe must be a function');
  const freeSpaceProbe = options.freeSpaceProbe ?? statfsFreeSpace;
  const exportDir = path.resolve(options.exportDir ?? path.join(os.tmpdir(), 'fhir-platform-kit-exports'));
  const retention = positive('retention', options.retention, 6 * HOUR);
  const cleanupInterval = positive('cleanupInterval', options.cleanupInterval, 60_000);
  const maxFileSize = positive('maxFileSize', options.maxFileSize, 64 * 1024 * 1024);
  const maxExportSize = limit('maxExportSize', options.maxExportSize, 4 * GIB);
  const requireAsyncHeaders = options.requireAsyncHeaders ?? false;
  if (typeof requireAsyncHeaders !== 'boolean')
    throw new InvalidOptionError('bulkExportRouter: requireAsyncHeaders must be a boolean');
  const ownsPool = !(options.pool instanceof ExportPool);
  const pool = options.pool instanceof ExportPool ? options.pool : new ExportPool(options.pool);
  const jobs = new ExportJobManager({
    storage,
    pool,
    exportDir,
    maxFileSize,
    maxExportSize,
    retention,
    cleanupInterval,
    taskHook: options.taskHook,
    onError,
  });
  const ready = jobs.start().catch(onError);

  /** Refuses a kick-off while the export directory's file system is short of space. */
  const checkFreeSpace = async (): Promise<void> => {
    if (minFreeSpace === 0) return;
    let free: number;
    try {
      await mkdir(exportDir, { recursive: true });
      free = await freeSpaceProbe(exportDir);
    } catch (error) {
      // Unknown free space (statfs unsupported, …) does not block exports.
      onError(error);
      return;
    }
    if (free < minFreeSpace) {
      throw new FhirError(503, 'transient', 'Not enough free disk space for exports; retry later', {
        headers: { 'Retry-After': String(Math.ceil(cleanupInterval / 1000)) },
      });
    }
  };

  /** Kick-offs accepted by this router per project (epoch ms, ascending), over the last hour. */
  const recentKickoffs = new Map<string, number[]>();
  const kickoffsSince = (projectId: string, since: number): number[] => {
    const times = (recentKickoffs.get(projectId) ?? []).filter((t) => t >= since);
    if (times.length > 0) recentKickoffs.set(projectId, times);
    else recentKickoffs.delete(projectId);
    return times;
  };

  /** The kick-off limits of a project, checked in order; throws the 429 of the first reached. */
  const checkLimits = async (projectId: string): Promise<void> => {
    const now = Date.now();
    const usage = await jobs.usage(projectId, now - HOUR);
    if (usage.running >= maxRunning) {
      throw new FhirError(429, 'throttled', 'Too many exports are running for this project; retry later', {
        headers: { 'Retry-After': retryAfter },
      });
    }
    // Accepted kick-offs are counted here (they stay counted when cancelled and deleted) and in
    // storage (jobs created by other processes).
    let until: number | undefined;
    for (const times of [kickoffsSince(projectId, now - HOUR), usage.createdSince]) {
      if (times.length < maxKickoffs) continue;
      const leaves = (times[times.length - maxKickoffs] ?? now) + HOUR;
      until = Math.max(until ?? 0, leaves);
    }
    if (until !== undefined) {
      throw new FhirError(429, 'throttled', 'Too many export kick-offs for this project in the last hour', {
        headers: { 'Retry-After': secondsUntil(until, now) },
      });
    }
    if (usage.bytes >= maxProjectBytes) {
      // Running exports finish, then expire after `retention`.
      const frees = usage.nextExpiry ?? now + retention;
      throw new FhirError(
        429,
        'too-costly',
        'The export files of this project exceed its quota; delete finished exports or retry later',
        { headers: { 'Retry-After': secondsUntil(frees + cleanupInterval, now) } },
      );
    }
  };

  const kickoffs = new Map<string, Promise<unknown>>();
  const serialized = <T>(projectId: string, fn: () => Promise<T>): Promise<T> => {
    const previous = kickoffs.get(projectId) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const settled = next.catch(() => undefined);
    kickoffs.set(projectId, settled);
    void settled.then(() => {
      if (kickoffs.get(projectId) === settled) kickoffs.delete(projectId);
    });
    return next;
  };

  const router = Router();
  const auth = requirePrincipal(authenticate, storage);
  const errors = fhirErrorHandler(onError);
  const body = jsonBody({ types: ['application/fhir+json', 'application/json'] });
  const route = (method: 'get' | 'post' | 'delete', pattern: RegExp, ...handlers: RequestHandler[]): void => {
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
      await checkFreeSpace();
      // Count and create one kick-off at a time per project, so concurrent kick-offs cannot
      // both pass the limits (in this process).
      const job = await serialized(projectId, async () => {
        await checkLimits(projectId);
        const created = await jobs.kickoff({
          projectId,
          ownerId: principal.id,
          request: requestUrl(req, baseUrl),
          plan,
        });
        recentKickoffs.set(projectId, [...kickoffsSince(projectId, Date.now() - HOUR), Date.now()]);
        return created;
      });
      res
        .status(202)
        .set('Content-Location', absoluteUrl(req, `/$export-status/${job.id}`, baseUrl))
        .type('application/fhir+json')
        .send(information('Export accepted'));
    });

  for (const level of ['system', 'patient', 'group'] as const) {
    route('get', ROUTES[level], kickoff(level));
    route('post', ROUTES[level], body, kickoff(level));
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
        res
          .status(500)
          .type('application/fhir+json')
          .send(JSON.stringify(job.failure ?? operationOutcome('fatal', 'exception', 'The export failed')));
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
      res.status(202).type('application/fhir+json').send(information('Export cancelled and removed'));
    }),
  );

  route(
    'get',
    ROUTES.file,
    asyncHandler(async (req, res, next: NextFunction) => {
      const principal = getPrincipal(res);
      const file = segment(req, 3) ?? '';
      const job = await jobs.visibleJob(requireProjectId(principal), undefined, jobParam(req));
      // Only a name listed in the job's manifest is ever joined to the job directory.
      const entry = job.status === 'completed' && FILE_NAME.test(file) ? findJobFile(job, file) : undefined;
      if (!entry) throw new NotFoundError('No such export file');
      const allowed =
        entry.kind === 'output'
          ? canExport(principal, entry.type)
          : principal.id === job.ownerId || canExport(principal, entry.type);
      if (!allowed) throw new FhirError(403, 'forbidden', `The access token does not cover ${entry.type}`);
      const dir = jobs.jobDir(job.id);
      const end = jobs.beginDownload(job.id);
      res.on('close', end);
      res.type('application/fhir+ndjson').set('Cache-Control', 'private, no-store');
      // gzip is applied to whole-file downloads only; a Range request is answered uncompressed, so
      // that byte offsets always refer to the stored file.
      if (req.headers.range === undefined && req.acceptsEncodings('gzip', 'identity') === 'gzip') {
        const stream = createReadStream(path.join(dir, file));
        await new Promise<void>((resolve, reject) => {
          stream.once('open', () => resolve());
          stream.once('error', reject);
        }).catch(() => {
          end();
          throw new NotFoundError('No such export file');
        });
        res.status(200).set('Content-Encoding', 'gzip').set('Vary', 'Accept-Encoding');
        await pipeline(stream, createGzip(), res).catch(() => undefined);
        return;
      }
      res.set('Vary', 'Accept-Encoding');
      res.sendFile(file, { root: dir, dotfiles: 'deny', cacheControl: false }, (error?: Error) => {
        if (!error || res.headersSent) return;
        end();
        next(new NotFoundError('No such export file'));
      });
    }),
  );

  return Object.assign(router, {
    ready,
    async close(): Promise<void> {
      await ready;
      await jobs.close();
      if (ownsPool) await pool.close();
    },
  }) as BulkExportRouter;
}
