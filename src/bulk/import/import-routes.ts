import type { ErrorRequestHandler, Request, RequestHandler } from 'express';
import { canAccess, isSmartUser } from '../../auth/access/access.js';
import { asyncHandler } from '../../http/async-handler.js';
import { R4_RESOURCE_TYPES } from '../../common/resource-types.js';
import type { Principal } from '../../http/principal.js';
import { getPrincipal, requireProjectId } from '../../http/authenticate.js';
import { absoluteUrl, requestUrl } from '../../http/base-url.js';
import { FhirError } from '../../http/http-error.js';
import { findPrincipal } from '../../http/authenticate.js';
import { toHttpError } from '../../http/error-rendering.js';
import type { RequestRecorder } from '../../http/request-recorder.js';
import { fhirErrorOfSearch } from '../../fhir/search/search-errors.js';
import { sendFhir } from '../../http/protocol-responses.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ExportJobRecord } from '../../storage/types.js';
import type { ExportJobManager } from '../export-jobs.js';
import { importSource, parseImportRequest, type ImportPlan } from './import-params.js';
import { importProgressOf, isImportJob, type ImportFileResult } from './import-run.js';

/** What the `$import` routes need of the Bulk Data router. */
export interface ImportRouteDeps {
  jobs: ExportJobManager;
  baseUrl: string | undefined;
  retryAfter: string;
  maxInputs: number;
  /** Whether a URL may be pulled (scheme, address policy): a problem, or undefined. */
  urlProblem: (url: string) => string | undefined;
  segment: (req: Request, index: number) => string | undefined;
  information: (text: string) => Record<string, unknown>;
  /** Records an event; undefined when no audit trail records. */
  audit: RequestRecorder | undefined;
}

/** `POST /$import`, and `GET` / `DELETE /$import-status/{job}`. */
export interface ImportRoutes {
  kickoff: RequestHandler;
  /** Records a kick-off refused otherwise than by a 401, 403 or 404 (those are recorded as refusals). */
  refused: ErrorRequestHandler;
  status: RequestHandler;
  cancel: RequestHandler;
}

/** The import manifest of a completed job (Bulk Data manifest shape, one entry per input file). */
export function importManifest(
  job: ExportJobRecord,
  fileUrl: (file: string) => string,
): Record<string, unknown> {
  const progress = importProgressOf(job);
  const files = (job.result as { files?: ImportFileResult[] } | undefined)?.files ?? progress.files;
  const entry = (f: ImportFileResult) => ({ type: f.type, inputUrl: f.url, count: f.loaded });
  return {
    transactionTime: job.transactionTime,
    request: job.request,
    requiresAccessToken: true,
    output: files.filter((f) => f.kind === 'output').map(entry),
    deleted: files.filter((f) => f.kind === 'deleted').map(entry),
    error: files.flatMap((f) =>
      f.errorFile
        ? [
            {
              type: 'OperationOutcome',
              inputUrl: f.url,
              url: fileUrl(f.errorFile.file),
              count: f.errorFile.count,
            },
          ]
        : [],
    ),
    ...(progress.sourceTransactionTime
      ? { extension: { sourceTransactionTime: progress.sourceTransactionTime } }
      : {}),
  };
}

/** HTTP status of a failed import's status answer: the owner's rights (403), the source (502), or us (500). */
function failureStatus(job: ExportJobRecord): number {
  const status = (job.result as { httpStatus?: unknown } | undefined)?.httpStatus;
  return typeof status === 'number' ? status : 500;
}

/** May `principal` create and update `type` (what loading a file of that type does)? */
function mayWrite(principal: Principal, type: string): boolean {
  return canAccess(principal, type, 'create') && canAccess(principal, type, 'update');
}

export function importRoutes(deps: ImportRouteDeps): ImportRoutes {
  const { jobs, baseUrl, retryAfter, segment, information, audit } = deps;

  const importJob = async (
    req: Request,
    principalId: string,
    projectId: string,
  ): Promise<ExportJobRecord> => {
    const job = await jobs.visibleJob(projectId, principalId, segment(req, 2) ?? '');
    if (!isImportJob(job)) throw new NotFoundError('No such import job');
    return job;
  };

  const kickoff = asyncHandler(async (req, res) => {
    const principal = getPrincipal(res);
    const projectId = requireProjectId(principal);
    if (isSmartUser(principal))
      throw new FhirError(403, 'forbidden', '$import is for backend clients and project administrators');
    // Rights before the body: a token that may import nothing learns nothing of what it sent.
    if (!R4_RESOURCE_TYPES.some((type) => mayWrite(principal, type)))
      throw new FhirError(403, 'forbidden', '$import needs create and update rights on a resource type');
    const request = parseImportRequest(req.body, deps.urlProblem, deps.maxInputs);
    for (const input of request.inputs ?? []) {
      if (!mayWrite(principal, input.type))
        throw new FhirError(403, 'forbidden', `Not allowed to write ${input.type} resources`);
    }
    const plan: ImportPlan = {
      operation: 'import',
      ownerKind: principal.kind,
      owner: { scopes: [...principal.scopes], admin: principal.admin || principal.superAdmin },
      ...request,
    };
    const job = await jobs.kickoffImport({
      projectId,
      ownerId: principal.id,
      request: requestUrl(req, baseUrl),
      plan,
    });
    audit?.(req, res, { kind: 'import', phase: 'kickoff', jobId: job.id, source: importSource(plan) });
    res.set('Content-Location', absoluteUrl(req, `/$import-status/${job.id}`, baseUrl));
    sendFhir(res, 202, information('Import accepted'));
  });

  const refused: ErrorRequestHandler = (error, req, res, next) => {
    const { status, message } = toHttpError(fhirErrorOfSearch(error));
    if (audit && findPrincipal(res) && status !== 401 && status !== 403 && status !== 404)
      audit(req, res, { kind: 'import', phase: 'kickoff', status, error: message });
    next(error);
  };

  const status = asyncHandler(async (req, res) => {
    const principal = getPrincipal(res);
    const job = await importJob(req, principal.id, requireProjectId(principal));
    res.set('Cache-Control', 'no-store');
    if (job.status === 'accepted' || job.status === 'in-progress') {
      const progress = jobs.importProgressOf(job);
      const total = progress.inputs ? String(progress.inputs.length) : '?';
      res
        .status(202)
        .set(
          'X-Progress',
          `${progress.files.length} of ${total} files loaded, ${progress.resources} resources written`,
        )
        .set('Retry-After', retryAfter)
        .end();
      return;
    }
    if (job.status === 'failed') {
      sendFhir(res, failureStatus(job), job.failure ?? information('The import failed'));
      return;
    }
    const manifest = importManifest(job, (file) =>
      absoluteUrl(req, `/$export-file/${job.id}/${file}`, baseUrl),
    );
    if (job.expiresAt) res.set('Expires', new Date(job.expiresAt).toUTCString());
    res.status(200).type('application/json').send(JSON.stringify(manifest));
  });

  const cancel = asyncHandler(async (req, res) => {
    const principal = getPrincipal(res);
    const job = await importJob(req, principal.id, requireProjectId(principal));
    await jobs.cancel(job);
    sendFhir(
      res,
      202,
      information('Import cancelled: the file being loaded is loaded whole, no other file is'),
    );
  });

  return { kickoff, refused, status, cancel };
}
