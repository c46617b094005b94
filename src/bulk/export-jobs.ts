import { randomUUID } from 'node:crypto';
import { mkdir, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { operationOutcome } from '../http/error-rendering.js';
import { NotFoundError } from '../storage/errors.js';
import type { ExportJobRecord, Storage } from '../storage/types.js';
import type { ExportPool } from './export-pool.js';
import type { ExportProgress, ExportTask, ExportTaskResult } from './export-task.js';
import type { KickoffLimits } from './kickoff-limits.js';
import type { ExportParams, KickoffIssue } from './kickoff-params.js';
import { PlatformError } from '../errors.js';

/** What a job runs, persisted as `ExportJobRecord.params` so that a restart can run it again. */
export interface ExportPlan {
  params: ExportParams;
  types: string[];
  patientIds?: string[];
  newPatientIds?: string[];
  issues: KickoffIssue[];
  /**
   * The export directory of the manager that created the job: a manager resumes and expires only
   * its own jobs, so that two mounts on one store do not interfere.
   */
  exportDir?: string;
}

/** Options of {@link ExportJobManager}. */
export interface ExportJobManagerOptions {
  storage: Storage;
  pool: ExportPool;
  /** Root directory of the export files (one sub-directory per job). */
  exportDir: string;
  /** Split size of output files in bytes. */
  maxFileSize: number;
  /** A job fails (`too-costly`) before its files would exceed this many bytes. @default Infinity */
  maxExportSize?: number;
  /** How long a finished job and its files are kept, ms. */
  retention: number;
  /** How often expired jobs are looked for, ms. */
  cleanupInterval: number;
  /** Limits every kick-off must pass. @default none */
  limits?: KickoffLimits;
  /** Test hook: transforms each task before it runs. */
  taskHook?: (task: ExportTask) => ExportTask;
  /** Receives unexpected failures (a job failing is not one). */
  onError: (error: unknown) => void;
}

const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** True when `id` has the shape of a job id (guards every path built from it). */
export function isJobId(id: string): boolean {
  return JOB_ID.test(id);
}

/** What a project's export jobs hold, for the kick-off limits. */
export interface ExportUsage {
  /** Jobs accepted or in progress. */
  running: number;
  /**
   * Bytes of the project's export files: completed jobs not yet expired, plus what running jobs
   * have written so far (failed and cancelled jobs have none).
   */
  bytes: number;
  /** Epoch ms of the earliest expiry among the completed jobs counted in `bytes`. */
  nextExpiry?: number;
  /** Creation times (epoch ms, ascending) of the project's jobs created at or after `since`. */
  createdSince: number[];
}

const REMOVE = { recursive: true, force: true, maxRetries: 3, retryDelay: 50 } as const;

/** Sum of the sizes of the files in `dir` (0 when it does not exist). */
async function dirBytes(dir: string): Promise<number> {
  const names = await readdir(dir).catch(() => [] as string[]);
  let total = 0;
  for (const name of names)
    total += await stat(path.join(dir, name)).then(
      (s) => s.size,
      () => 0,
    );
  return total;
}

/** What a kick-off asks for. */
export interface KickoffInput {
  projectId: string;
  ownerId: string;
  /** The kick-off request URL (the manifest's `request`). */
  request: string;
  plan: ExportPlan;
}

interface RunningJob {
  controller: AbortController;
  done: Promise<void>;
  progress?: ExportProgress;
}

/**
 * Owns the export jobs of one router: kick-off, running them in the pool, progress, cancel,
 * resume after a restart and retention. Framework-free.
 */
export class ExportJobManager {
  readonly #o: ExportJobManagerOptions;
  readonly #running = new Map<string, RunningJob>();
  readonly #downloads = new Map<string, number>();
  /** Per project: the kick-off in progress, which the next one waits for. */
  readonly #kickoffs = new Map<string, Promise<unknown>>();
  #timer: NodeJS.Timeout | undefined;
  #closing = false;
  #sweeping: Promise<void> | undefined;

  constructor(options: ExportJobManagerOptions) {
    this.#o = options;
  }

  /** Directory of one job's files. */
  jobDir(jobId: string): string {
    if (!isJobId(jobId)) throw new PlatformError('ERR_EXPORT_JOB_INVALID', 'Invalid job id');
    return path.join(this.#o.exportDir, jobId);
  }

  /** Starts the retention timer, resumes interrupted jobs and removes leftovers (see `sweep`). */
  async start(): Promise<void> {
    this.#timer = setInterval(() => {
      void this.sweep();
    }, this.#o.cleanupInterval);
    this.#timer.unref();
    const interrupted = await this.#o.storage.listExportJobs({ status: ['accepted', 'in-progress'] });
    for (const job of interrupted) {
      if (this.#closing) return;
      if (!this.#owns(job)) continue;
      if (!this.#running.has(job.id)) this.#launch(job);
    }
    // Leftovers of jobs removed while this router was down.
    await this.sweep();
  }

  /**
   * What the project's jobs hold (from storage, so every instance counts; a job running here
   * counts its bytes as of now, others as of their last persisted progress).
   */
  async usage(projectId: string, since: number): Promise<ExportUsage> {
    const now = Date.now();
    const usage: ExportUsage = { running: 0, bytes: 0, createdSince: [] };
    for (const job of await this.#o.storage.listExportJobs({ projectId })) {
      const created = Date.parse(job.createdAt);
      if (created >= since) usage.createdSince.push(created);
      if (job.status === 'accepted' || job.status === 'in-progress') {
        usage.running += 1;
        const progress = this.progressOf(job);
        usage.bytes += typeof progress?.bytes === 'number' ? progress.bytes : 0;
      } else if (job.status === 'completed') {
        const expiry = job.expiresAt === undefined ? undefined : Date.parse(job.expiresAt);
        if (expiry !== undefined && expiry <= now) continue;
        const bytes = (job.result as Partial<ExportTaskResult> | undefined)?.bytes;
        // Jobs completed before sizes were recorded: measure their files.
        usage.bytes += typeof bytes === 'number' ? bytes : await dirBytes(this.#dirOf(job));
        if (expiry !== undefined && (usage.nextExpiry === undefined || expiry < usage.nextExpiry))
          usage.nextExpiry = expiry;
      }
    }
    usage.createdSince.sort((a, b) => a - b);
    return usage;
  }

  /**
   * Creates and starts a job once it passes the limits; `transactionTime` is the snapshot time.
   * Kick-offs of one project are counted and created one at a time, so that concurrent kick-offs
   * cannot both pass the limits (in this process).
   */
  async kickoff(input: KickoffInput): Promise<ExportJobRecord> {
    const { limits } = this.#o;
    await limits?.checkFreeSpace();
    return this.#serialized(input.projectId, async () => {
      await limits?.check(input.projectId, (since) => this.usage(input.projectId, since));
      const created = await this.#create(input);
      limits?.record(input.projectId);
      return created;
    });
  }

  #serialized<T>(projectId: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#kickoffs.get(projectId) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const settled = next.catch(() => undefined);
    this.#kickoffs.set(projectId, settled);
    void settled.then(() => {
      if (this.#kickoffs.get(projectId) === settled) this.#kickoffs.delete(projectId);
    });
    return next;
  }

  async #create(input: KickoffInput): Promise<ExportJobRecord> {
    const { storage } = this.#o;
    const snapshot = await storage.exportSnapshot(
      input.projectId,
      input.plan.patientIds ? { patientIds: input.plan.patientIds } : undefined,
    );
    let job: ExportJobRecord;
    try {
      job = await storage.createExportJob({
        id: randomUUID(),
        projectId: input.projectId,
        ownerId: input.ownerId,
        status: 'accepted',
        request: input.request,
        transactionTime: snapshot.takenAt,
        params: { ...input.plan, exportDir: this.#o.exportDir },
        snapshot,
      });
    } catch (error) {
      await storage.releaseSnapshot(snapshot).catch(this.#o.onError);
      throw error;
    }
    this.#launch(job);
    return job;
  }

  /** In-memory progress of a job running here, else the persisted one. */
  progressOf(job: ExportJobRecord): ExportProgress | undefined {
    return this.#running.get(job.id)?.progress ?? (job.progress as ExportProgress | undefined);
  }

  /**
   * The job if `ownerId` in `projectId` may see it and it has not expired; otherwise
   * `NotFoundError` (other projects and principals must not learn it exists).
   */
  async visibleJob(projectId: string, ownerId: string | undefined, jobId: string): Promise<ExportJobRecord> {
    if (!isJobId(jobId)) throw new NotFoundError('No such export job');
    const job = await this.#o.storage.readExportJob(projectId, jobId);
    if (ownerId !== undefined && job.ownerId !== ownerId) throw new NotFoundError('No such export job');
    if (job.status === 'cancelled') throw new NotFoundError('No such export job');
    if (job.expiresAt !== undefined && Date.parse(job.expiresAt) <= Date.now()) {
      throw new NotFoundError('No such export job');
    }
    return job;
  }

  /**
   * Cancels (or deletes, once complete) a job: stops it, removes its files (from the directory of
   * the router that created it) and its record.
   */
  async cancel(job: ExportJobRecord): Promise<void> {
    const running = this.#running.get(job.id);
    if (running) {
      running.controller.abort(new PlatformError('ERR_EXPORT_STOPPED', 'Export cancelled'));
      await running.done;
    }
    // Retries: a terminated worker thread may still be closing a file in the directory.
    await rm(this.#dirOf(job), REMOVE);
    await this.#o.storage.deleteExportJob(job.projectId, job.id).catch((error: unknown) => {
      if (!(error instanceof NotFoundError)) throw error;
    });
    // A job running here released its snapshot when it stopped; one that was not running here
    // (interrupted, not resumed yet) still holds it.
    if (!running && job.snapshot && (job.status === 'accepted' || job.status === 'in-progress')) {
      await this.#o.storage.releaseSnapshot(job.snapshot).catch(this.#o.onError);
    }
  }

  /** Marks a download of `jobId` in flight; call the returned function when it ends. */
  beginDownload(jobId: string): () => void {
    this.#downloads.set(jobId, (this.#downloads.get(jobId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const left = (this.#downloads.get(jobId) ?? 1) - 1;
      if (left > 0) this.#downloads.set(jobId, left);
      else this.#downloads.delete(jobId);
    };
  }

  /**
   * Removes expired jobs and their files, except those with a download in flight, and the
   * directories of jobs that no longer exist (cancelled through another process or router,
   * or lost with a memory store's restart).
   */
  sweep(): Promise<void> {
    this.#sweeping ??= this.#sweep().finally(() => {
      this.#sweeping = undefined;
    });
    return this.#sweeping;
  }

  async #sweep(): Promise<void> {
    try {
      // Directories first: a job's record exists before its directory, so a directory listed here
      // without a record in the list below belongs to no job.
      const dirs = (await readdir(this.#o.exportDir).catch(() => [] as string[])).filter(isJobId);
      const now = Date.now();
      const jobs = await this.#o.storage.listExportJobs();
      for (const job of jobs) {
        if (this.#closing) return;
        if (job.status === 'accepted' || job.status === 'in-progress') continue;
        if (!this.#owns(job) || job.expiresAt === undefined || Date.parse(job.expiresAt) > now) continue;
        if (this.#downloads.has(job.id) || this.#running.has(job.id)) continue;
        await rm(this.jobDir(job.id), REMOVE);
        await this.#o.storage.deleteExportJob(job.projectId, job.id).catch((error: unknown) => {
          if (!(error instanceof NotFoundError)) throw error;
        });
      }
      const known = new Set(jobs.map((job) => job.id));
      for (const id of dirs) {
        if (this.#closing) return;
        if (known.has(id) || this.#running.has(id) || this.#downloads.has(id)) continue;
        await rm(this.jobDir(id), REMOVE);
      }
    } catch (error) {
      if (!this.#closing) this.#o.onError(error);
    }
  }

  #owns(job: ExportJobRecord): boolean {
    return (job.params as Partial<ExportPlan>).exportDir === this.#o.exportDir;
  }

  /** The job's directory under the export directory of the router that created it. */
  #dirOf(job: ExportJobRecord): string {
    const dir = this.jobDir(job.id);
    const own = (job.params as Partial<ExportPlan>).exportDir;
    return typeof own === 'string' && path.isAbsolute(own) ? path.join(own, job.id) : dir;
  }

  #launch(job: ExportJobRecord): void {
    const controller = new AbortController();
    const entry: RunningJob = { controller, done: Promise.resolve() };
    this.#running.set(job.id, entry);
    entry.done = this.#run(job, entry)
      .catch(this.#o.onError)
      .finally(() => {
        this.#running.delete(job.id);
      });
  }

  async #run(job: ExportJobRecord, entry: RunningJob): Promise<void> {
    const { storage } = this.#o;
    const plan = job.params as unknown as ExportPlan;
    const dir = this.jobDir(job.id);
    const signal = entry.controller.signal;
    // Progress is persisted at most once a second, one write at a time.
    let persisting: Promise<unknown> = Promise.resolve();
    let lastPersist = 0;
    try {
      if (!job.snapshot) throw new PlatformError('ERR_EXPORT_JOB_INVALID', 'The job has no snapshot');
      await rm(dir, { recursive: true, force: true });
      await mkdir(dir, { recursive: true });
      if (job.status !== 'in-progress')
        await storage.updateExportJob(job.projectId, job.id, { status: 'in-progress' });
      let task: ExportTask = {
        jobId: job.id,
        projectId: job.projectId,
        params: plan.params,
        types: plan.types,
        snapshot: job.snapshot,
        outputDir: dir,
        maxFileSize: this.#o.maxFileSize,
        issues: plan.issues,
      };
      const { maxExportSize } = this.#o;
      if (maxExportSize !== undefined && Number.isFinite(maxExportSize)) task.maxExportSize = maxExportSize;
      if (plan.patientIds) task.patientIds = plan.patientIds;
      if (plan.newPatientIds) task.newPatientIds = plan.newPatientIds;
      if (storage.descriptor) task.descriptor = storage.descriptor;
      if (this.#o.taskHook) task = this.#o.taskHook(task);
      const result: ExportTaskResult = await this.#o.pool.run(task, {
        signal,
        reader: storage.exportReader,
        onProgress: (progress) => {
          entry.progress = progress;
          const now = Date.now();
          if (now - lastPersist < 1000) return;
          lastPersist = now;
          persisting = persisting
            .then(() => storage.updateExportJob(job.projectId, job.id, { progress: { ...progress } }))
            .catch(() => undefined);
        },
      });
      if (signal.aborted) throw new PlatformError('ERR_EXPORT_STOPPED', 'Export stopped');
      await persisting;
      if (result.tooLarge) {
        await this.#fail(
          job,
          dir,
          operationOutcome(
            'fatal',
            'too-costly',
            `The export would exceed ${String(this.#o.maxExportSize)} bytes; export less (_type, _since, _typeFilter)`,
          ),
        );
        return;
      }
      await storage.updateExportJob(job.projectId, job.id, {
        status: 'completed',
        result: result as unknown as Record<string, unknown>,
        progress: entry.progress ? { ...entry.progress } : undefined,
        expiresAt: new Date(Date.now() + this.#o.retention).toISOString(),
      });
      await storage.releaseSnapshot(job.snapshot).catch(this.#o.onError);
    } catch (error) {
      await persisting;
      // Stopping: the job stays in progress and resumes at next start.
      if (this.#closing) return;
      if (signal.aborted) {
        // Cancelled: the canceller removes the files and the record.
        if (job.snapshot) await storage.releaseSnapshot(job.snapshot).catch(this.#o.onError);
        return;
      }
      await this.#fail(
        job,
        dir,
        operationOutcome('fatal', 'exception', 'The export failed and was stopped; start a new export'),
      );
      this.#o.onError(error);
    }
  }

  /** Ends a job as failed: no file is left behind; the record keeps the outcome until expiry. */
  async #fail(job: ExportJobRecord, dir: string, outcome: Record<string, unknown>): Promise<void> {
    const { storage } = this.#o;
    await rm(dir, REMOVE).catch(() => undefined);
    await storage
      .updateExportJob(job.projectId, job.id, {
        status: 'failed',
        failure: outcome,
        expiresAt: new Date(Date.now() + this.#o.retention).toISOString(),
      })
      .catch(() => undefined);
    if (job.snapshot) await storage.releaseSnapshot(job.snapshot).catch(() => undefined);
  }

  /** Stops the timer and every running job (which stays `in-progress` and resumes at next start). */
  async close(): Promise<void> {
    this.#closing = true;
    if (this.#timer) clearInterval(this.#timer);
    const running = [...this.#running.values()];
    for (const job of running)
      job.controller.abort(new PlatformError('ERR_EXPORT_STOPPED', 'Export service closing'));
    await Promise.all(running.map((job) => job.done));
    await this.#sweeping;
  }
}
