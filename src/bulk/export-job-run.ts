import { setTimeout as sleep } from 'node:timers/promises';
import type { ExportEvent } from '../audit/events.js';
import { recordSafely } from '../audit/record-safely.js';
import { PlatformError } from '../errors.js';
import { operationOutcome } from '../http/error-rendering.js';
import type {
  ExportFileStore,
  ExportFilesRef,
  ExportJobChanges,
  ExportJobQueue,
  ExportJobRecord,
} from '../storage/types.js';
import { DirectoryExportFiles } from './directory-export-files.js';
import { exportCounts, exportScope, outcomeText } from './export-audit.js';
import type { ExportJobManagerOptions, ExportPlan } from './export-job-types.js';
import type { ExportProgress, ExportTask, ExportTaskResult } from './export-task.js';
import type { PartialManifestState } from './partial-manifest.js';

/*
 * Running one export job, for `ExportJobManager` (./export-jobs.ts): the task in the pool, its
 * progress, the lease that keeps it (with a shared queue), and how it ends (completed, failed,
 * stopped).
 */

/** What a run needs from the manager that launched it. */
export interface RunContext {
  options: ExportJobManagerOptions;
  files: ExportFileStore;
  queue: ExportJobQueue | undefined;
  /** Milliseconds a lease lasts without renewal. */
  lease: number;
  /** Milliseconds between two lease renewals. */
  heartbeat: number;
  /**
   * Whether the manager is stopping its running jobs, to resume them later (read at each step: it
   * changes while a run goes on). Not while it only drains: a run that ends then ends as usual.
   */
  stopping(): boolean;
}

/** A job running in this process. */
export interface RunningJob {
  controller: AbortController;
  done: Promise<void>;
  progress?: ExportProgress;
  /** The lease token of this run (queue only). */
  run?: string;
}

/** Where a job's files are (those of one run, with a shared queue). */
export function refOf(job: ExportJobRecord, run?: string): ExportFilesRef {
  return { projectId: job.projectId, jobId: job.id, ...(run !== undefined ? { run } : {}) };
}

/** Retries of the write that records a job's failure (about a minute in all). */
const FAIL_RETRIES = 15;

/** Waits `ms` (without holding the process open); false when `signal` aborts first. */
async function pause(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  try {
    await sleep(ms, undefined, { ref: false, ...(signal ? { signal } : {}) });
    return true;
  } catch {
    return false;
  }
}

/**
 * The OperationOutcome a failed job keeps: `transient` when the files or the store could not be
 * written (a full disk, an I/O error: the same export may succeed later), else `exception`.
 */
function failureOutcome(error: unknown): Record<string, unknown> {
  const code = (error as { code?: unknown } | null)?.code;
  const io = typeof code === 'string' && (/^E[A-Z0-9]+$/.test(code) || code === 'ERR_STORAGE_UNAVAILABLE');
  return io
    ? operationOutcome(
        'fatal',
        'transient',
        'The export could not write its files (disk full or I/O error) and was stopped; start a new export',
      )
    : operationOutcome('fatal', 'exception', 'The export failed and was stopped; start a new export');
}

/** Ends a job run: lease lost, job cancelled elsewhere, or this manager closing. */
class RunStopped extends PlatformError {
  constructor(message: string) {
    super('ERR_EXPORT_STOPPED', message);
  }
}

/**
 * Renews the lease of a run every `heartbeatInterval`; when the lease is lost (the job was
 * cancelled or taken over) calls `lost` (by default: aborts the run), and aborts the run when the
 * lease could not be renewed for nearly a lease duration. `paused()` true skips a beat (an import
 * finishing its file after a cancel).
 */
export function keepLease(
  ctx: RunContext,
  job: ExportJobRecord,
  entry: RunningJob,
  lost: () => void | Promise<void> = () =>
    entry.controller.abort(new RunStopped('The export job was cancelled or taken over')),
  paused: () => boolean = () => false,
): () => void {
  const queue = ctx.queue;
  const run = entry.run;
  if (!queue || run === undefined) return () => undefined;
  let renewedAt = Date.now();
  let renewing = false;
  const timer = setInterval(() => {
    if (renewing || paused()) return;
    renewing = true;
    void (async () => {
      try {
        if (await queue.renew(job.projectId, job.id, run, ctx.lease)) renewedAt = Date.now();
        else await lost();
      } catch (error) {
        // Stop before the lease can expire: another instance may claim the job from then on.
        if (Date.now() - renewedAt >= ctx.lease - ctx.heartbeat) {
          entry.controller.abort(new RunStopped('The job lease could not be renewed'));
        }
        ctx.options.onError(error);
      } finally {
        renewing = false;
      }
    })();
  }, ctx.heartbeat);
  timer.unref();
  return () => clearInterval(timer);
}

/** Writes the end of a run: with a queue, only while this run holds the lease. */
async function finish(
  ctx: RunContext,
  job: ExportJobRecord,
  run: string | undefined,
  changes: ExportJobChanges,
): Promise<boolean> {
  if (ctx.queue && run !== undefined) return ctx.queue.finish(job.projectId, job.id, run, changes);
  await ctx.options.storage.updateExportJob(job.projectId, job.id, changes);
  return true;
}

export async function runJob(ctx: RunContext, job: ExportJobRecord, entry: RunningJob): Promise<void> {
  const { storage } = ctx.options;
  const plan = job.params as unknown as ExportPlan;
  const files = ctx.files;
  const ref = refOf(job, entry.run);
  const signal = entry.controller.signal;
  const stopHeartbeat = keepLease(ctx, job, entry);
  const progressWriter = new ProgressWriter(
    (progress) => storage.updateExportJob(job.projectId, job.id, { progress }),
    plan.params.allowPartialManifests === true,
  );
  try {
    if (!job.snapshot) throw new PlatformError('ERR_EXPORT_JOB_INVALID', 'The job has no snapshot');
    // Files of an interrupted run (this process's, or a dead instance's) go first.
    await files.remove(ref);
    if (job.status !== 'in-progress')
      await storage.updateExportJob(job.projectId, job.id, { status: 'in-progress' });
    const task: ExportTask = {
      jobId: job.id,
      projectId: job.projectId,
      params: plan.params,
      types: plan.types,
      snapshot: job.snapshot,
      maxFileSize: ctx.options.maxFileSize,
      issues: plan.issues,
    };
    if (entry.run !== undefined) task.run = entry.run;
    if (files.descriptor) task.files = files.descriptor;
    else if (files instanceof DirectoryExportFiles) task.outputDir = files.jobDir(job.id);
    const { maxExportSize } = ctx.options;
    if (maxExportSize !== undefined && Number.isFinite(maxExportSize)) task.maxExportSize = maxExportSize;
    if (plan.patientIds) task.patientIds = plan.patientIds;
    if (plan.newPatientIds) task.newPatientIds = plan.newPatientIds;
    // A worker needs to reopen both the store and the files; otherwise the run stays here.
    if (storage.descriptor && (task.files || task.outputDir)) task.descriptor = storage.descriptor;
    const result: ExportTaskResult = await ctx.options.pool.run(task, {
      signal,
      reader: storage.exportReader,
      sink: files.sink(ref),
      onProgress: (progress) => {
        entry.progress = progress;
        progressWriter.update(progress);
      },
    });
    if (signal.aborted) throw new PlatformError('ERR_EXPORT_STOPPED', 'Export stopped');
    await progressWriter.settle();
    if (result.tooLarge) {
      await fail(
        ctx,
        job,
        entry.run,
        operationOutcome(
          'fatal',
          'too-costly',
          `The export would exceed ${String(ctx.options.maxExportSize)} bytes; export less (_type, _since, _typeFilter)`,
        ),
        signal,
      );
      return;
    }
    const finished = await finish(ctx, job, entry.run, {
      status: 'completed',
      result: result as unknown as Record<string, unknown>,
      progress: progressWriter.final(entry.progress),
      expiresAt: new Date(Date.now() + ctx.options.retention).toISOString(),
    });
    if (finished) {
      auditEnd(ctx, job, { phase: 'completed', counts: exportCounts(result) });
      await storage.releaseSnapshot(job.snapshot).catch(ctx.options.onError);
    }
  } catch (error) {
    await progressWriter.settle();
    // Stopping: the job stays in progress and resumes at next start (or on another instance).
    if (ctx.stopping()) {
      if (ctx.queue && entry.run !== undefined)
        await ctx.queue.release(job.projectId, job.id, entry.run).catch(() => undefined);
      return;
    }
    if (signal.aborted) {
      // Cancelled here: the canceller removes the files and the record. Lease lost: the job is
      // gone, or another instance runs it now.
      if (job.snapshot && !(signal.reason instanceof RunStopped))
        await storage.releaseSnapshot(job.snapshot).catch(ctx.options.onError);
      return;
    }
    // A run whose job was cancelled through another instance fails on its next write: not a failure.
    if (ctx.queue && entry.run !== undefined) {
      const held = await ctx.queue.renew(job.projectId, job.id, entry.run, ctx.lease).catch(() => true);
      if (!held) return;
    }
    await fail(ctx, job, entry.run, failureOutcome(error), signal);
    ctx.options.onError(error);
  } finally {
    stopHeartbeat();
  }
}

/**
 * Persists a run's progress at most once a second, one write at a time. With partial manifests
 * (`allowPartialManifests`) it also seals their pages: each write with files committed since the
 * last one seals a page of them, and a progress held back by the interval is written when it
 * ends, so that a file committed just before a long read is listed. Only what was written is ever
 * answered, so the pages a status request sees never change; the completed job keeps them.
 */
class ProgressWriter {
  #persisting: Promise<unknown> = Promise.resolve();
  #last = 0;
  #timer: NodeJS.Timeout | undefined;
  #latest: ExportProgress | undefined;
  #pages: Required<PartialManifestState> | undefined;

  constructor(
    private readonly write: (progress: Record<string, unknown>) => Promise<unknown>,
    partial: boolean,
  ) {
    if (partial) this.#pages = { committed: [], pageEnds: [] };
  }

  update(progress: ExportProgress): void {
    const wait = 1000 - (Date.now() - this.#last);
    if (wait <= 0) {
      this.#persist(progress);
      return;
    }
    this.#latest = progress;
    if (this.#pages && !this.#timer) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        if (this.#latest) this.#persist(this.#latest);
      }, wait);
      this.#timer.unref();
    }
  }

  #persist(progress: ExportProgress): void {
    this.#last = Date.now();
    this.#latest = undefined;
    const pages = this.#pages;
    const committed = progress.committed ?? [];
    if (pages && committed.length > (pages.pageEnds.at(-1) ?? 0))
      this.#pages = { committed, pageEnds: [...pages.pageEnds, committed.length] };
    const persisted = { ...progress, ...this.#pages };
    this.#persisting = this.#persisting.then(() => this.write(persisted)).catch(() => undefined);
  }

  /** Drops a held-back progress and waits for the writes under way. */
  async settle(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#persisting;
  }

  /** The progress the job ends with: its pages as last written. */
  final(progress: ExportProgress | undefined): Record<string, unknown> | undefined {
    return progress && { ...progress, ...this.#pages };
  }
}

/**
 * Records an event of a job that ends outside any request (completion, failure), once: where the
 * run that holds the job writes its end. The agent is the principal that kicked it off.
 */
function auditEnd(
  ctx: RunContext,
  job: ExportJobRecord,
  event: Pick<ExportEvent, 'phase' | 'counts' | 'error'>,
): void {
  const trail = ctx.options.auditTrail;
  if (!trail?.enabled) return;
  const plan = job.params as Partial<ExportPlan>;
  recordSafely(
    trail,
    {
      kind: 'export',
      ...event,
      jobId: job.id,
      ...exportScope(plan.params),
      projectId: job.projectId,
      actor: { kind: plan.ownerKind ?? 'client', id: job.ownerId },
    },
    ctx.options.onError,
  );
}

/**
 * Ends a job as failed: no file is left behind; the record keeps the outcome until expiry. When
 * the store cannot record the failure (it failed too: a full disk, the database unreachable),
 * the write is retried for about a minute, so that the status answers the failure once the store
 * recovers rather than "in progress" until a restart. Stopped by closing (the job then resumes
 * at the next start, its snapshot kept).
 */
async function fail(
  ctx: RunContext,
  job: ExportJobRecord,
  run: string | undefined,
  outcome: Record<string, unknown>,
  signal?: AbortSignal,
): Promise<void> {
  const { storage } = ctx.options;
  // Without a shared queue this process owns the job: its files go before the status says
  // `failed`, so a client that sees the failure never finds a file of it. With a queue, only the
  // run that still holds the lease (known once `finish` succeeds) may remove them.
  if (!ctx.queue) await ctx.files.remove(refOf(job)).catch(() => undefined);
  const changes: ExportJobChanges = {
    status: 'failed',
    failure: outcome,
    expiresAt: new Date(Date.now() + ctx.options.retention).toISOString(),
  };
  let finished: boolean | undefined;
  for (let attempt = 0, delay = 250; finished === undefined; attempt++, delay = Math.min(2 * delay, 5000)) {
    try {
      finished = await finish(ctx, job, run, changes);
    } catch {
      if (attempt >= FAIL_RETRIES) finished = !ctx.queue;
      else if (!(await pause(delay, signal)) || ctx.stopping()) return;
    }
  }
  if (!finished) return;
  auditEnd(ctx, job, { phase: 'failed', error: outcomeText(outcome) ?? 'The export failed' });
  if (ctx.queue) await ctx.files.remove(refOf(job)).catch(() => undefined);
  if (job.snapshot) await storage.releaseSnapshot(job.snapshot).catch(() => undefined);
}
