import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { PlatformError } from '../errors.js';
import { NotFoundError } from '../storage/errors.js';
import type {
  ExportFileStore,
  ExportFilesRef,
  ExportJobQueue,
  ExportJobRecord,
  NewExportJob,
} from '../storage/types.js';
import { DirectoryExportFiles, isJobId } from './directory-export-files.js';
import { refOf, runJob, type RunContext, type RunningJob } from './export-job-run.js';
import type { ExportProgress, ExportTaskResult } from './export-task.js';
import type { ExportJobManagerOptions, ExportPlan, KickoffInput } from './export-job-types.js';
import type { ExportUsage } from './kickoff-limits.js';
import {
  importProgressOf,
  isImportJob,
  refuseImportJob,
  runImportJob,
  type ImportProgress,
  type ImportRunningJob,
} from './import/import-run.js';
import type { ImportPlan } from './import/import-params.js';
import { FhirError } from '../http/http-error.js';

export { isJobId } from './directory-export-files.js';

/**
 * Owns the export jobs of one router: kick-off, running them in the pool, progress, cancel,
 * resume after a restart and retention. Framework-free.
 *
 * With a shared {@link ExportJobQueue} (the PostgreSQL store), jobs are not tied to the process
 * that accepted them: each run holds a lease on its job, renewed every `heartbeatInterval`; the
 * same heartbeat looks for jobs whose lease expired (their instance died) and takes them over, and
 * a run whose lease cannot be renewed (the job was cancelled through another instance) stops.
 */
export class ExportJobManager {
  readonly #o: ExportJobManagerOptions;
  readonly #files: ExportFileStore;
  readonly #queue: ExportJobQueue | undefined;
  readonly #lease: number;
  readonly #heartbeat: number;
  /** Prefix of this manager's lease tokens (host, process, manager), for people reading the table. */
  readonly #runPrefix = `${os.hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;
  readonly #running = new Map<string, ImportRunningJob>();
  readonly #downloads = new Map<string, number>();
  /** Per project: the kick-off in progress, which the next one waits for. */
  readonly #kickoffs = new Map<string, Promise<unknown>>();
  #timer: NodeJS.Timeout | undefined;
  #claimTimer: NodeJS.Timeout | undefined;
  #claiming: Promise<boolean> | undefined;
  #closing = false;
  /** Closing and done waiting: the jobs still running are being stopped (to resume later). */
  #stopping = false;
  #sweeping: Promise<void> | undefined;
  /** What each run of this manager's jobs reads from it. */
  readonly #runContext: RunContext;

  constructor(options: ExportJobManagerOptions) {
    this.#o = options;
    this.#files = options.files ?? new DirectoryExportFiles(options.exportDir);
    this.#queue = options.queue;
    this.#lease = options.leaseDuration ?? 30_000;
    this.#heartbeat = options.heartbeatInterval ?? 10_000;
    this.#runContext = {
      options,
      files: this.#files,
      queue: this.#queue,
      lease: this.#lease,
      heartbeat: this.#heartbeat,
      stopping: () => this.#stopping,
    };
  }

  /** Where the export files are. */
  get files(): ExportFileStore {
    return this.#files;
  }

  /** Starts the retention timer, resumes interrupted jobs and removes leftovers (see `sweep`). */
  async start(): Promise<void> {
    this.#timer = setInterval(() => {
      void this.sweep();
    }, this.#o.cleanupInterval);
    this.#timer.unref();
    if (this.#queue) {
      this.#claimTimer = setInterval(() => {
        void this.#claimWork();
      }, this.#heartbeat);
      this.#claimTimer.unref();
      // Reported once: the sweep would fail the same way (a store that cannot be reached).
      if (!(await this.#claimWork())) return;
    } else {
      const interrupted = await this.#o.storage.listExportJobs({ status: ['accepted', 'in-progress'] });
      for (const job of interrupted) {
        if (this.#closing) return;
        if (!this.#owns(job)) continue;
        if (!this.#running.has(job.id)) this.#launch(job);
      }
    }
    // Leftovers of jobs removed while this router was down.
    await this.sweep();
  }

  /**
   * Claims runnable jobs (new ones, or those of a dead instance) while threads are free; answers
   * false when that failed (the error is reported).
   */
  #claimWork(): Promise<boolean> {
    this.#claiming ??= (async () => {
      const queue = this.#queue;
      if (!queue) return true;
      try {
        while (!this.#closing && this.#running.size < this.#o.pool.maxThreads) {
          const run = this.#newRun();
          const job = await queue.claim(run, this.#lease);
          if (!job) break;
          if (this.#closing || this.#running.has(job.id)) {
            await queue.release(job.projectId, job.id, run);
            break;
          }
          this.#launch(job, run);
        }
        return true;
      } catch (error) {
        if (!this.#closing) this.#o.onError(error);
        return false;
      }
    })().finally(() => {
      this.#claiming = undefined;
    });
    return this.#claiming;
  }

  #newRun(): string {
    return `${this.#runPrefix}/${randomUUID()}`;
  }

  /**
   * What the project's jobs hold (from storage, so every instance counts; a job running here
   * counts its bytes as of now, others as of their last persisted progress).
   */
  async usage(projectId: string, since: number): Promise<ExportUsage> {
    const now = Date.now();
    const usage: ExportUsage = { running: 0, bytes: 0, createdSince: [] };
    for (const job of await this.#o.storage.listExportJobs({ projectId })) {
      if (isImportJob(job)) continue;
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
        usage.bytes += typeof bytes === 'number' ? bytes : await this.#filesOf(job).bytes(refOf(job));
        if (expiry !== undefined && (usage.nextExpiry === undefined || expiry < usage.nextExpiry))
          usage.nextExpiry = expiry;
      }
    }
    usage.createdSince.sort((a, b) => a - b);
    return usage;
  }

  /**
   * The kick-off limits as they stand now (free space, then the project's): throws the 503 or 429
   * `kickoff` would. For a kick-off about to do costly work first (a `_typeFilter` chain's
   * searches); `kickoff` checks again, atomically with the job's creation.
   */
  async checkLimits(projectId: string): Promise<void> {
    const { limits } = this.#o;
    await limits?.checkFreeSpace();
    await limits?.check(projectId, (since) => this.usage(projectId, since));
  }

  /**
   * Creates and starts a job once it passes the limits; `transactionTime` is the snapshot time.
   * Kick-offs of one project are counted and created one at a time, so that concurrent kick-offs
   * cannot both pass the limits (in this process, and with a shared queue across instances).
   */
  async kickoff(input: KickoffInput): Promise<ExportJobRecord> {
    const { limits } = this.#o;
    await limits?.checkFreeSpace();
    // With a shared queue every kick-off of this manager holds a database connection for the
    // project lock: one at a time, so that kick-offs can never take the whole connection pool.
    return this.#serialized(this.#queue ? '' : input.projectId, async () => {
      // With a shared queue the job is created leased to a run of this instance, which starts it.
      const run = this.#queue ? this.#newRun() : undefined;
      const create = async (): Promise<ExportJobRecord> => {
        await limits?.check(input.projectId, (since) => this.usage(input.projectId, since));
        const created = await this.#create(input, run);
        limits?.record(input.projectId);
        return created;
      };
      const job = this.#queue ? await this.#queue.withProjectLock(input.projectId, create) : await create();
      await this.#start(job, run);
      return job;
    });
  }

  /**
   * Creates and starts an import job (`$import`): at most `importer.maxRunning` of a project run or
   * wait at once (429 beyond). No snapshot: an import writes, it reads nothing of the store.
   */
  async kickoffImport(input: {
    projectId: string;
    ownerId: string;
    request: string;
    plan: ImportPlan;
  }): Promise<ExportJobRecord> {
    const importer = this.#o.importer;
    if (!importer) throw new FhirError(404, 'not-supported', '$import is not enabled on this server');
    return this.#serialized(this.#queue ? '' : input.projectId, async () => {
      const run = this.#queue ? this.#newRun() : undefined;
      const create = async (): Promise<ExportJobRecord> => {
        const jobs = await this.#o.storage.listExportJobs({
          projectId: input.projectId,
          status: ['accepted', 'in-progress'],
        });
        if (jobs.filter(isImportJob).length >= importer.maxRunning) {
          throw new FhirError(
            429,
            'throttled',
            `The project already runs ${importer.maxRunning} imports; wait for one to end`,
            { headers: { 'Retry-After': '60' } },
          );
        }
        const params = { ...input.plan, exportDir: this.#o.exportDir };
        return this.#createRecord(this.#newJob(input, new Date().toISOString(), params), run);
      };
      const job = this.#queue ? await this.#queue.withProjectLock(input.projectId, create) : await create();
      await this.#start(job, run);
      return job;
    });
  }

  /** A new job's record, accepted, of `input`'s project and owner. */
  #newJob(
    input: { projectId: string; ownerId: string; request: string },
    transactionTime: string,
    params: object,
  ): NewExportJob {
    return {
      id: randomUUID(),
      projectId: input.projectId,
      ownerId: input.ownerId,
      status: 'accepted',
      request: input.request,
      transactionTime,
      params: params as Record<string, unknown>,
    };
  }

  /** Stores a new job: with a shared queue, leased to the run `run` of this instance. */
  #createRecord(job: NewExportJob, run: string | undefined): Promise<ExportJobRecord> {
    if (this.#queue && run !== undefined) return this.#queue.createLeased(job, run, this.#lease);
    return this.#o.storage.createExportJob(job);
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

  async #create(input: KickoffInput, run: string | undefined): Promise<ExportJobRecord> {
    const { storage } = this.#o;
    const snapshot = await storage.exportSnapshot(
      input.projectId,
      input.plan.patientIds ? { patientIds: input.plan.patientIds } : undefined,
    );
    try {
      const params = {
        ...input.plan,
        exportDir: this.#o.exportDir,
        ...(input.ownerKind !== undefined ? { ownerKind: input.ownerKind } : {}),
      };
      return await this.#createRecord({ ...this.#newJob(input, snapshot.takenAt, params), snapshot }, run);
    } catch (error) {
      await storage.releaseSnapshot(snapshot).catch(this.#o.onError);
      throw error;
    }
  }

  /** Runs a new job here (with a queue, under the lease `run` it was created with). */
  async #start(job: ExportJobRecord, run: string | undefined): Promise<void> {
    if (!this.#closing) {
      this.#launch(job, run);
      return;
    }
    // Closing: the job is accepted all the same; this manager at its next start (or, with a shared
    // queue, another instance once the lease is given up) runs it.
    if (this.#queue && run !== undefined)
      await this.#queue.release(job.projectId, job.id, run).catch(this.#o.onError);
  }

  /** In-memory progress of a job running here, else the persisted one. */
  progressOf(job: ExportJobRecord): ExportProgress | undefined {
    return this.#running.get(job.id)?.progress ?? (job.progress as ExportProgress | undefined);
  }

  /** An import's progress: the in-memory one of a run here, else the persisted one. */
  importProgressOf(job: ExportJobRecord): ImportProgress {
    return this.#running.get(job.id)?.importProgress ?? importProgressOf(job);
  }

  /**
   * The job if `ownerId` in `projectId` may see it and it has not expired; otherwise
   * `NotFoundError` (other projects and principals must not learn it exists).
   */
  async visibleJob(projectId: string, ownerId: string | undefined, jobId: string): Promise<ExportJobRecord> {
    if (!isJobId(jobId)) throw new NotFoundError('No such export job');
    // One answer for an unknown job and someone else's: the job's existence does not leak.
    const job = await this.#o.storage.readExportJob(projectId, jobId).catch((error: unknown) => {
      throw error instanceof NotFoundError && !error.deleted
        ? new NotFoundError('No such export job')
        : error;
    });
    if (ownerId !== undefined && job.ownerId !== ownerId) throw new NotFoundError('No such export job');
    if (job.status === 'cancelled') throw new NotFoundError('No such export job');
    if (job.expiresAt !== undefined && Date.parse(job.expiresAt) <= Date.now()) {
      throw new NotFoundError('No such export job');
    }
    return job;
  }

  /**
   * Cancels (or deletes, once complete) a job: stops it, removes its files (from the directory of
   * the router that created it) and its record. A job running on another instance stops at its
   * next heartbeat, when it finds its record gone.
   */
  async cancel(job: ExportJobRecord): Promise<void> {
    if (isImportJob(job)) {
      await this.#cancelImport(job);
      return;
    }
    const running = this.#running.get(job.id);
    if (running) {
      running.controller.abort(new PlatformError('ERR_EXPORT_STOPPED', 'Export cancelled'));
      await running.done;
    }
    await this.#filesOf(job).remove(refOf(job));
    await this.#o.storage.deleteExportJob(job.projectId, job.id).catch((error: unknown) => {
      if (!(error instanceof NotFoundError)) throw error;
    });
    // A job running here released its snapshot when it stopped; one that was not running here
    // (interrupted, not resumed yet, or running elsewhere) still holds it.
    if (!running && job.snapshot && (job.status === 'accepted' || job.status === 'in-progress')) {
      await this.#o.storage.releaseSnapshot(job.snapshot).catch(this.#o.onError);
    }
  }

  /**
   * Cancels an import: its record says `cancelled` at once (the status then answers 404), and the
   * run, here or on another instance, stops once the file it is loading is loaded whole. The record
   * and its error files go at the next sweep after `retention`.
   */
  async #cancelImport(job: ExportJobRecord): Promise<void> {
    const running = this.#running.get(job.id);
    if (running) running.cancelRequested = true;
    await this.#o.storage.updateExportJob(job.projectId, job.id, {
      status: 'cancelled',
      expiresAt: new Date(Date.now() + this.#o.retention).toISOString(),
    });
  }

  /**
   * Marks a download of a job's files in flight; call the returned function when it ends. With a
   * shared queue the mark is also kept in the store (renewed every `heartbeatInterval`), so that
   * no instance's expiry sweep removes the files while another instance serves them.
   */
  async beginDownload(ref: ExportFilesRef): Promise<() => void> {
    const { jobId } = ref;
    const queue = this.#queue;
    let renewal: NodeJS.Timeout | undefined;
    if (queue) {
      await queue.holdForDownload(ref.projectId, jobId, this.#lease);
      renewal = setInterval(() => {
        queue.holdForDownload(ref.projectId, jobId, this.#lease).catch(this.#o.onError);
      }, this.#heartbeat);
      renewal.unref();
    }
    this.#downloads.set(jobId, (this.#downloads.get(jobId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      if (renewal) clearInterval(renewal);
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
      const leftovers = (await this.#files.jobIds?.()) ?? [];
      const now = Date.now();
      const jobs = await this.#o.storage.listExportJobs();
      for (const job of jobs) {
        if (this.#closing) return;
        if (job.status === 'accepted' || job.status === 'in-progress') continue;
        if (!this.#owns(job) || job.expiresAt === undefined || Date.parse(job.expiresAt) > now) continue;
        if (this.#downloads.has(job.id) || this.#running.has(job.id)) continue;
        if (this.#queue) {
          // Shared: another instance may be serving the files; the store knows.
          if (await this.#queue.deleteIfUnheld(job.projectId, job.id)) await this.#files.remove(refOf(job));
          continue;
        }
        await this.#files.remove(refOf(job));
        await this.#o.storage.deleteExportJob(job.projectId, job.id).catch((error: unknown) => {
          if (!(error instanceof NotFoundError)) throw error;
        });
      }
      const known = new Set(jobs.map((job) => job.id));
      for (const id of leftovers) {
        if (this.#closing) return;
        if (known.has(id) || this.#running.has(id) || this.#downloads.has(id)) continue;
        await this.#files.remove({ projectId: '', jobId: id });
      }
    } catch (error) {
      if (!this.#closing) this.#o.onError(error);
    }
  }

  /** Whether this manager resumes and expires the job (any job with a shared queue). */
  #owns(job: ExportJobRecord): boolean {
    return this.#queue !== undefined || (job.params as Partial<ExportPlan>).exportDir === this.#o.exportDir;
  }

  /** The file store of the job: with directories, that of the router that created it. */
  #filesOf(job: ExportJobRecord): ExportFileStore {
    const own = (job.params as Partial<ExportPlan>).exportDir;
    if (!(this.#files instanceof DirectoryExportFiles) || typeof own !== 'string' || !path.isAbsolute(own))
      return this.#files;
    return own === this.#files.directory ? this.#files : new DirectoryExportFiles(own);
  }

  #launch(job: ExportJobRecord, run?: string): void {
    const controller = new AbortController();
    const entry: RunningJob = { controller, done: Promise.resolve(), ...(run ? { run } : {}) };
    this.#running.set(job.id, entry);
    const importer = this.#o.importer;
    let running: Promise<void>;
    if (!isImportJob(job)) running = runJob(this.#runContext, job, entry);
    else if (importer) running = runImportJob({ ...this.#runContext, importer }, job, entry);
    else running = refuseImportJob(this.#runContext, job, entry);
    entry.done = running.catch(this.#o.onError).finally(() => {
      this.#running.delete(job.id);
      // A thread is free: take the next waiting job, if any.
      if (this.#queue && !this.#closing) void this.#claimWork();
    });
  }

  /**
   * Stops the timers and the claims of new work, lets the running jobs go on for up to `drainMs`
   * milliseconds, then stops those still running: they stay `in-progress` and resume at the next
   * start (with a shared queue their leases are released, for another instance to take over at
   * once). Jobs kicked off meanwhile are accepted and left for that next run.
   * @param drainMs 0 stops the running jobs at once
   * @default drainMs 0
   */
  async close(drainMs = 0): Promise<void> {
    this.#closing = true;
    if (this.#timer) clearInterval(this.#timer);
    if (this.#claimTimer) clearInterval(this.#claimTimer);
    await this.#claiming;
    if (drainMs > 0 && this.#running.size > 0) {
      const drained = Promise.all([...this.#running.values()].map((job) => job.done));
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([drained, new Promise<void>((resolve) => (timer = setTimeout(resolve, drainMs)))]);
      clearTimeout(timer);
    }
    this.#stopping = true;
    const running = [...this.#running.values()];
    for (const job of running)
      job.controller.abort(new PlatformError('ERR_EXPORT_STOPPED', 'Export service closing'));
    await Promise.all(running.map((job) => job.done));
    await this.#sweeping;
  }
}
