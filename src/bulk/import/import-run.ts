/*
 * Running one `$import` job, for `ExportJobManager` (../export-jobs.ts), which claims, leases,
 * resumes and expires import jobs as it does exports. The run reads the source's manifest (when the
 * job names one), then loads each input file in turn: pulled over HTTP, streamed through the NDJSON
 * loader of the upload (validation per project, ids kept, every line a write with its version and
 * history), its refused lines written to an error file. Progress is persisted after each file, so
 * that a restarted or taken-over job goes on with the next file (a file interrupted in the middle
 * is loaded again from its first line). A cancel takes effect between two files: each file is
 * loaded whole or not at all.
 */
import { randomInt } from 'node:crypto';
import { PlatformError } from '../../errors.js';
import { NotFoundError } from '../../storage/errors.js';
import { operationOutcome } from '../../http/error-rendering.js';
import type { Principal } from '../../http/principal.js';
import type { OutcomeIssue } from '../../http/outcome.js';
import type { ExportJobChanges, ExportJobRecord, FhirResource, ProjectRecord } from '../../storage/types.js';
import {
  loadNdjson,
  type NdjsonLoadContext,
  type NdjsonLoadOptions,
} from '../../fhir/upload/ndjson-loader.js';
import type { ResourceValidation } from '../../fhir/validation/resource-validation.js';
import { storageTerminologySource } from '../../terminology/storage-source.js';
import { canAccess } from '../../auth/access/access.js';
import type { ImportEvent } from '../../audit/events.js';
import { recordSafely } from '../../audit/record-safely.js';
import { keepLease, refOf, type RunContext, type RunningJob } from '../export-job-run.js';
import { importSource, type ImportInput, type ImportPlan } from './import-params.js';
import { referenceRewriter } from './reference-rewrite.js';
import {
  sourceAuthorizer,
  type SmartClientCredentials,
  type SourceAuthorizer,
  type SourceCredentials,
} from './source-auth.js';
import { SourceFetchError, type SourceFetcher } from './source-fetch.js';
import { fetchWithRetries, ImportFailed, readManifest } from './source-reads.js';

/** What the import runs need besides the manager's run context. */
export interface ImportDeps {
  fetcher: SourceFetcher;
  validation: ResourceValidation;
  /** Loader limits (batch size, line length, depth, errors reported per file). */
  load: Pick<NdjsonLoadOptions, 'batchSize' | 'maxLineLength' | 'maxJsonDepth' | 'maxIssues'>;
  /** Most milliseconds a manifest URL may keep answering 202 (its export still running). */
  manifestWait: number;
  /** Tries of a request that fails transiently (network, 429, 5xx) before the input is given up. */
  attempts: number;
  /** The registered SMART client of the source a URL is under, if the project registered one. */
  sourceClient: (project: ProjectRecord, url: string) => SmartClientCredentials | undefined;
}

/** The run context of an import job. */
export interface ImportRunContext extends RunContext {
  importer: ImportDeps;
}

/** What one input file did. */
export interface ImportFileResult {
  index: number;
  type: string;
  url: string;
  kind: ImportInput['kind'];
  /** Non-blank lines read. */
  lines: number;
  /** Writes applied (resources, or deletes of a `deleted` file). */
  loaded: number;
  /** Lines refused (each an OperationOutcome line of `errorFile`). */
  failed: number;
  /** The error file's name in the job's files, with its line count. */
  errorFile?: { file: string; count: number };
  /** Why the file could not be read at all (then `lines` is what was read before). */
  fetchError?: string;
}

/** The persisted progress of an import job. */
export interface ImportProgress {
  /** The inputs, once known (the manifest read). */
  inputs?: ImportInput[];
  /** The source export's `transactionTime`, when the job read a manifest. */
  sourceTransactionTime?: string;
  /** The files done, in input order. */
  files: ImportFileResult[];
  /** Resources written so far (those of the file being loaded included while it runs here). */
  resources: number;
}

/** Whether a job record is an import (its params are an {@link ImportPlan}). */
export function isImportJob(job: ExportJobRecord): boolean {
  return (job.params as { operation?: unknown }).operation === 'import';
}

/** The progress of an import job as persisted. */
export function importProgressOf(job: ExportJobRecord): ImportProgress {
  const progress = job.progress as Partial<ImportProgress> | undefined;
  return {
    ...(progress?.inputs ? { inputs: progress.inputs } : {}),
    ...(progress?.sourceTransactionTime ? { sourceTransactionTime: progress.sourceTransactionTime } : {}),
    files: progress?.files ?? [],
    resources: progress?.resources ?? 0,
  };
}

/** Ends a run early: stopped, lease lost, cancelled, or the job's record gone. */
class ImportStopped extends PlatformError {
  constructor(message: string) {
    super('ERR_EXPORT_STOPPED', message);
  }
}

export async function runImportJob(
  ctx: ImportRunContext,
  job: ExportJobRecord,
  entry: RunningJob,
): Promise<void> {
  const { storage } = ctx.options;
  const plan = job.params as unknown as ImportPlan;
  const signal = entry.controller.signal;
  const progress = importProgressOf(job);
  (entry as ImportRunningJob).importProgress = progress;
  const stopHeartbeat = keepImportLease(ctx, job, entry);
  try {
    if (job.status !== 'in-progress')
      await storage.updateExportJob(job.projectId, job.id, { status: 'in-progress' });
    const project = await storage.readProject(job.projectId).catch((error: unknown) => {
      if (error instanceof NotFoundError)
        throw new ImportFailed(operationOutcome('error', 'forbidden', 'The project does not exist'), 403);
      throw error;
    });
    const owner: Principal = {
      projectId: job.projectId,
      kind: plan.ownerKind ?? 'client',
      id: job.ownerId,
      scopes: plan.owner.scopes,
      admin: plan.owner.admin,
      superAdmin: false,
    };
    const auth = sourceAuthorizer(credentialsOf(ctx.importer, plan, project), ctx.importer.fetcher);
    if (!progress.inputs) {
      const found = plan.inputs
        ? { inputs: plan.inputs }
        : await readManifest(ctx.importer, plan.manifestUrl ?? '', auth, signal);
      progress.inputs = found.inputs;
      if (found.transactionTime) progress.sourceTransactionTime = found.transactionTime;
      await persist(ctx, job, progress);
    }
    const inputs = progress.inputs;
    const refused = inputs.find((input) => !mayLoad(owner, input));
    if (refused) {
      throw new ImportFailed(
        operationOutcome(
          'error',
          'forbidden',
          `The import's owner may not ${refused.kind === 'deleted' ? 'delete' : 'write'} ${refused.type} resources`,
        ),
        403,
      );
    }
    const loadContext = importLoadContext(ctx.importer, storage, owner, project);
    const rewrite = referenceRewriter(plan.inputSource ?? sourceBase(plan.manifestUrl));
    for (const input of inputs.slice(progress.files.length)) {
      if (signal.aborted) throw signal.reason;
      if (await cancelled(ctx, job, entry)) return;
      const index = progress.files.length;
      const result = await loadInput(ctx, job, {
        index,
        input,
        auth,
        loadContext,
        rewrite,
        signal,
        progress,
      });
      progress.files.push(result);
      await persist(ctx, job, progress);
    }
    if (await cancelled(ctx, job, entry)) return;
    await finishImport(ctx, job, entry, progress);
  } catch (error) {
    await endFailedRun(ctx, job, entry, error);
  } finally {
    stopHeartbeat();
  }
}

/** May `owner` apply this input's writes (create and update; deletes are checked line by line)? */
function mayLoad(owner: Principal, input: ImportInput): boolean {
  // A `deleted` file's type is `Bundle`; each of its lines names the resource it deletes, and the
  // loader authorizes that delete by the resource's own type (a refused one is an error line).
  if (input.kind === 'deleted') return true;
  return canAccess(owner, input.type, 'create') && canAccess(owner, input.type, 'update');
}

/** The source's FHIR base from an export status URL (`…/$export-status/…` and the like): its origin. */
function sourceBase(manifestUrl: string | undefined): string | undefined {
  if (manifestUrl === undefined) return undefined;
  const url = new URL(manifestUrl);
  const at = url.pathname.search(/\/(?:\$|%24)[^/]*$|\/(?:\$|%24)[^/]*\/[^/]+$/);
  return at > 0 ? `${url.origin}${url.pathname.slice(0, at)}` : undefined;
}

function credentialsOf(deps: ImportDeps, plan: ImportPlan, project: ProjectRecord): SourceCredentials {
  if (plan.accessToken !== undefined) return { kind: 'bearer', token: plan.accessToken };
  const url = plan.manifestUrl ?? plan.inputSource ?? plan.inputs?.[0]?.url;
  const client = url === undefined ? undefined : deps.sourceClient(project, url);
  return client ? { kind: 'smart', client } : { kind: 'none' };
}

/** The loader's context: the store, the owner's rights, the project's validation. */
function importLoadContext(
  deps: ImportDeps,
  storage: ImportRunContext['options']['storage'],
  owner: Principal,
  project: ProjectRecord,
): NdjsonLoadContext {
  const source = storageTerminologySource(storage, project.id);
  return {
    storage,
    projectId: project.id,
    principal: owner,
    async validate(resource: FhirResource) {
      if (project.strictMode !== true) return;
      await deps.validation.write(resource, { strict: true, warnings: false }, source);
    },
  };
}

/** Persists the progress (a failed write is retried with the next file's). */
async function persist(ctx: ImportRunContext, job: ExportJobRecord, progress: ImportProgress): Promise<void> {
  await ctx.options.storage
    .updateExportJob(job.projectId, job.id, {
      progress: structuredClone(progress) as unknown as Record<string, unknown>,
    })
    .catch((error: unknown) => {
      if ((error as { name?: string }).name === 'NotFoundError')
        throw new ImportStopped('The import job is gone');
      ctx.options.onError(error);
    });
}

/** Cancelled through this instance or another (the record says so): the run ends between files. */
async function cancelled(ctx: ImportRunContext, job: ExportJobRecord, entry: RunningJob): Promise<boolean> {
  if ((entry as ImportRunningJob).cancelRequested) return true;
  const current = await ctx.options.storage.readExportJob(job.projectId, job.id).catch(() => undefined);
  return current === undefined || current.status === 'cancelled';
}

/** A running import: a cancel asks it to stop after the file it is loading. */
export type ImportRunningJob = RunningJob & { cancelRequested?: boolean; importProgress?: ImportProgress };

interface InputRun {
  index: number;
  input: ImportInput;
  auth: SourceAuthorizer;
  loadContext: NdjsonLoadContext;
  rewrite: ((resource: FhirResource) => FhirResource) | undefined;
  signal: AbortSignal;
  progress: ImportProgress;
}

/** Pulls and loads one input; a file that cannot be read is reported in its result, not thrown. */
async function loadInput(
  ctx: ImportRunContext,
  job: ExportJobRecord,
  run: InputRun,
): Promise<ImportFileResult> {
  const { index, input, signal } = run;
  const result: ImportFileResult = {
    index,
    type: input.type,
    url: input.url,
    kind: input.kind,
    lines: 0,
    loaded: 0,
    failed: 0,
  };
  const before = run.progress.resources;
  let issues: OutcomeIssue[] = [];
  try {
    const response = await fetchWithRetries(
      ctx.importer,
      run.auth,
      new URL(input.url),
      'application/fhir+ndjson',
      signal,
    );
    const name = `${input.type}-${index + 1}`;
    const report = await loadNdjson(
      run.loadContext,
      name,
      countingResources(response.body, run.progress, before),
      {
        ...ctx.importer.load,
        ...(run.rewrite && input.kind === 'output' ? { transform: run.rewrite } : {}),
        ...(input.kind === 'deleted' ? { deletions: true } : {}),
        onError: ctx.options.onError,
      },
    );
    if (signal.aborted) throw signal.reason;
    Object.assign(result, { lines: report.lines, loaded: report.loaded, failed: report.failed });
    issues = report.issues;
  } catch (error) {
    if (signal.aborted || error instanceof ImportStopped) throw signal.reason ?? error;
    if (!(error instanceof SourceFetchError)) throw error;
    result.fetchError = error.message;
    result.failed = Math.max(result.failed, 1);
    issues = [{ severity: 'error', code: 'exception', details: { text: `${input.url}: ${error.message}` } }];
  }
  run.progress.resources = before + result.loaded;
  if (issues.length > 0)
    result.errorFile = await writeErrorFile(ctx, job, index, input, issues, result.failed);
  return result;
}

/** Counts lines as they stream by, for the status's progress (an estimate while a file loads). */
async function* countingResources(
  body: AsyncIterable<Buffer>,
  progress: ImportProgress,
  before: number,
): AsyncIterable<Buffer> {
  let lines = 0;
  for await (const chunk of body) {
    // Newline bytes counted in the Buffer itself: no string copy of every chunk.
    for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) lines++;
    progress.resources = before + lines;
    yield chunk;
  }
}

/** Writes one input's refused lines, one OperationOutcome per line, as a file of the job. */
async function writeErrorFile(
  ctx: ImportRunContext,
  job: ExportJobRecord,
  index: number,
  input: ImportInput,
  issues: OutcomeIssue[],
  failed: number,
): Promise<{ file: string; count: number }> {
  // A name of its own per attempt: a file written by an interrupted run is never overwritten.
  const file = `OperationOutcome-${index + 1}${String(randomInt(1_000_000)).padStart(6, '0')}.ndjson`;
  const handle = await ctx.files.sink(refOf(job)).create(file);
  let count = 0;
  try {
    for (const issue of issues) {
      const outcome = {
        resourceType: 'OperationOutcome',
        issue: [{ ...issue, location: [...(issue.location ?? []), input.url] }],
      };
      await handle.write(`${JSON.stringify(outcome)}\n`);
      count++;
    }
    if (failed > issues.length) {
      const more = operationOutcome(
        'warning',
        'too-costly',
        `${failed - issues.length} more lines of ${input.url} were refused and not listed`,
      );
      await handle.write(`${JSON.stringify(more)}\n`);
      count++;
    }
    await handle.commit();
  } catch (error) {
    await handle.abort().catch(() => undefined);
    throw error;
  }
  return { file, count };
}

/** The record of a completed import: its files' results, its error files (for downloads). */
async function finishImport(
  ctx: ImportRunContext,
  job: ExportJobRecord,
  entry: RunningJob,
  progress: ImportProgress,
): Promise<void> {
  const error = progress.files.flatMap((f) =>
    f.errorFile ? [{ type: 'OperationOutcome', file: f.errorFile.file, count: f.errorFile.count }] : [],
  );
  const changes: ExportJobChanges = {
    status: 'completed',
    progress: structuredClone(progress) as unknown as Record<string, unknown>,
    result: { output: [], error, files: structuredClone(progress.files) },
    expiresAt: new Date(Date.now() + ctx.options.retention).toISOString(),
  };
  const finished =
    ctx.queue && entry.run !== undefined
      ? await ctx.queue.finish(job.projectId, job.id, entry.run, changes)
      : (await ctx.options.storage.updateExportJob(job.projectId, job.id, changes), true);
  if (!finished) return;
  const counts: Record<string, number> = {};
  let deleted = 0;
  for (const file of progress.files) {
    if (file.kind === 'deleted') deleted += file.loaded;
    else counts[file.type] = (counts[file.type] ?? 0) + file.loaded;
  }
  const refused = progress.files.reduce((sum, file) => sum + file.failed, 0);
  auditEnd(ctx, job, { phase: 'completed', counts, deleted, refused });
}

/** Records the end of a job (outside any request), as the principal that kicked it off. */
function auditEnd(
  ctx: RunContext,
  job: ExportJobRecord,
  event: Pick<ImportEvent, 'phase' | 'counts' | 'deleted' | 'refused' | 'error'>,
): void {
  const trail = ctx.options.auditTrail;
  if (!trail?.enabled) return;
  const plan = job.params as unknown as ImportPlan;
  recordSafely(
    trail,
    {
      kind: 'import',
      ...event,
      jobId: job.id,
      source: importSource(plan),
      projectId: job.projectId,
      actor: { kind: plan.ownerKind ?? 'client', id: job.ownerId },
    },
    ctx.options.onError,
  );
}

/**
 * Ends an import job found by a router with `import: false` (kicked off through another instance
 * that has it): failed, with an outcome saying so.
 */
export function refuseImportJob(ctx: RunContext, job: ExportJobRecord, entry: RunningJob): Promise<void> {
  const disabled = new ImportFailed(
    operationOutcome('fatal', 'not-supported', '$import is disabled on the instance that ran this job'),
    500,
  );
  return endFailedRun(ctx, job, entry, disabled);
}

/** How a run that threw ends: stopped (resumes later), cancelled, or failed with its outcome. */
async function endFailedRun(
  ctx: RunContext,
  job: ExportJobRecord,
  entry: RunningJob,
  error: unknown,
): Promise<void> {
  const signal = entry.controller.signal;
  if (ctx.stopping() || signal.aborted || error instanceof ImportStopped) {
    if (ctx.queue && entry.run !== undefined)
      await ctx.queue.release(job.projectId, job.id, entry.run).catch(() => undefined);
    return;
  }
  const outcome =
    error instanceof ImportFailed
      ? error.outcome
      : operationOutcome('fatal', 'exception', 'The import failed and was stopped');
  if (!(error instanceof ImportFailed)) ctx.options.onError(error);
  const changes: ExportJobChanges = {
    status: 'failed',
    failure: outcome,
    result: { httpStatus: error instanceof ImportFailed ? error.status : 500 },
    expiresAt: new Date(Date.now() + ctx.options.retention).toISOString(),
  };
  try {
    const finished =
      ctx.queue && entry.run !== undefined
        ? await ctx.queue.finish(job.projectId, job.id, entry.run, changes)
        : (await ctx.options.storage.updateExportJob(job.projectId, job.id, changes), true);
    if (finished) auditEnd(ctx, job, { phase: 'failed', error: errorText(outcome) });
  } catch (failure) {
    ctx.options.onError(failure);
  }
}

function errorText(outcome: Record<string, unknown>): string {
  const issue = (outcome.issue as { details?: { text?: string } }[] | undefined)?.[0];
  return issue?.details?.text ?? 'The import failed';
}

/**
 * The lease of an import run (queue only), renewed every heartbeat. A lease lost because the job was
 * cancelled lets the file being loaded finish; one lost otherwise (another instance took the job
 * over) stops the run at once.
 */
function keepImportLease(ctx: ImportRunContext, job: ExportJobRecord, entry: ImportRunningJob): () => void {
  return keepLease(
    ctx,
    job,
    entry,
    async () => {
      const current = await ctx.options.storage.readExportJob(job.projectId, job.id).catch(() => undefined);
      if (current?.status === 'cancelled') entry.cancelRequested = true;
      else entry.controller.abort(new ImportStopped('The import job was taken over'));
    },
    () => entry.cancelRequested === true,
  );
}
