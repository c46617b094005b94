import type { Request, RequestHandler } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal, requireProjectId } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { operationOutcome } from '../http/error-rendering.js';
import type { RequestRecorder } from '../http/request-recorder.js';
import { sendFhir } from '../http/protocol-responses.js';
import { findExportFile, sendExportFile } from './downloads.js';
import { exportScope } from './export-audit.js';
import type { ExportJobManager } from './export-jobs.js';
import type { ExportParams } from './kickoff-params.js';
import { buildManifest } from './manifest.js';
import { findPartialFile, manifestPage, pageParameter } from './partial-manifest.js';
import type { ExportJobRecord } from '../storage/types.js';
import { NotFoundError } from '../storage/errors.js';

/** What the routes of a kicked-off job need of the Bulk Data router. */
export interface JobRouteDeps {
  jobs: ExportJobManager;
  baseUrl: string | undefined;
  /** `Retry-After` of a status answer while the job runs (whole seconds). */
  retryAfter: string;
  /** Records an event; undefined when no audit trail records. */
  audit: RequestRecorder | undefined;
  /** The decoded path segment at `index` (undefined for a malformed escape). */
  segment: (req: Request, index: number) => string | undefined;
  /** An OperationOutcome with one `information` issue. */
  information: (text: string) => Record<string, unknown>;
}

/** The three routes of a job, each a handler behind the router's authentication. */
export interface JobRoutes {
  /** `GET /$export-status/{job}`: 202 with `X-Progress` while running, the manifest, or the failure. */
  status: RequestHandler;
  /** `DELETE /$export-status/{job}`: cancels the job and removes its files. */
  cancel: RequestHandler;
  /** `GET /$export-file/{job}/{file}`: one file of the manifest (gzip, `Range`). */
  file: RequestHandler;
}

/** The status, cancel and download handlers (Bulk Data 2.0.0 "Status Request", "Delete", "File Request"). */
export function jobRoutes(deps: JobRouteDeps): JobRoutes {
  const { jobs, baseUrl, retryAfter, audit, segment, information } = deps;
  const jobParam = (req: Request): string => segment(req, 2) ?? '';

  const progressText = (job: ExportJobRecord): string => {
    const progress = jobs.progressOf(job);
    return progress
      ? `${progress.resources} resources written, ${progress.typesDone} of ${progress.typesTotal} types done`
      : job.status;
  };

  const status = asyncHandler(async (req, res) => {
    const principal = getPrincipal(res);
    const job = await jobs.visibleJob(requireProjectId(principal), principal.id, jobParam(req));
    res.set('Cache-Control', 'no-store');
    const running = job.status === 'accepted' || job.status === 'in-progress';
    const partial = (job.params as { params?: ExportParams }).params?.allowPartialManifests;
    if (partial && job.status !== 'failed') {
      const page = manifestPage(
        job,
        pageParameter(req.query.page),
        (file) => absoluteUrl(req, `/$export-file/${job.id}/${file}`, baseUrl),
        (n) => absoluteUrl(req, `/$export-status/${job.id}?page=${String(n)}`, baseUrl),
      );
      if (page.manifest) {
        if (running) res.set('X-Progress', progressText(job)).set('Retry-After', retryAfter);
        else if (job.expiresAt) res.set('Expires', new Date(job.expiresAt).toUTCString());
        res.status(page.status).type('application/json').send(JSON.stringify(page.manifest));
        return;
      }
    }
    if (running) {
      res.status(202).set('X-Progress', progressText(job)).set('Retry-After', retryAfter).end();
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
  });

  const cancel = asyncHandler(async (req, res) => {
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
  });

  const file = asyncHandler(async (req, res) => {
    const principal = getPrincipal(res);
    const name = segment(req, 3) ?? '';
    // A running job's files are not in the completed manifest that findExportFile looks up.
    const found = await findExportFile(jobs, principal, jobParam(req), name).catch(async (error: unknown) => {
      if (!(error instanceof NotFoundError)) throw error;
      return (await findPartialFile(jobs, principal, jobParam(req), name)) ?? Promise.reject(error);
    });
    await sendExportFile(
      req,
      res,
      jobs,
      found,
      audit &&
        ((outcome) => audit(req, res, { kind: 'download', jobId: found.ref.jobId, file: name, ...outcome })),
    );
  });

  return { status, cancel, file };
}
