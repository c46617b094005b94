import { existsSync } from 'node:fs';
import { MessageChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';
import { optionError } from '../common/options.js';
import type { ExportFileSink, ExportReader } from '../storage/types.js';
import { runExport } from './export-runner.js';
import type { ExportProgress, ExportTask, ExportTaskResult } from './export-task.js';
import { defaultWorkerFilename } from './worker-location.js';
import { PlatformError } from '../errors.js';
import { fromCrossing } from './worker-errors.js';

/** Options of {@link ExportPool}. */
export interface ExportPoolOptions {
  /**
   * The worker entry piscina loads. The default finds `export-worker.js` next to the built
   * package, or the tsx shim next to the TypeScript source (see docs/bulk-export.md).
   * @default found next to this module
   */
  workerFilename?: string;
  /**
   * Worker threads at most; exports beyond it wait in the pool's queue.
   * @default 2
   */
  maxThreads?: number;
  /**
   * Milliseconds an idle worker thread is kept.
   * @default 30000
   */
  idleTimeout?: number;
}

const EXPORT_POOL_KEYS: OptionKeys<ExportPoolOptions> = {
  workerFilename: true,
  maxThreads: true,
  idleTimeout: true,
};

/** How one export runs. */
export interface ExportRunOptions {
  /** Aborting terminates the worker running the task (piscina) or stops the main-thread run. */
  signal?: AbortSignal;
  onProgress?: (progress: ExportProgress) => void;
  /** Used when the task has no descriptor: the export then runs in this thread. */
  reader?: ExportReader;
  /** Where a run in this thread writes (default: the directory `task.outputDir`). */
  sink?: ExportFileSink;
}

/**
 * Runs export tasks in a piscina pool of worker threads, each reopening the store from the task's
 * descriptor. Tasks without a descriptor (stores that cannot be reopened in another thread, such as
 * `memoryStorage`) run the same code in the calling thread, streaming from `reader`. Threads start
 * on first use. Ends as piscina's pools do: `close()` drains, `destroy()` terminates.
 */
export class ExportPool {
  readonly #options: ExportPoolOptions;
  #piscina: Piscina<ExportTask, ExportTaskResult> | undefined;
  #closed = false;
  /** Every run accepted and not settled yet (in a worker, queued, or in this thread). */
  readonly #runs = new Set<Promise<unknown>>();
  /** Aborted by `destroy()`: stops the runs in this thread (piscina terminates the others). */
  readonly #destroyed = new AbortController();

  constructor(options: ExportPoolOptions = {}) {
    checkOptionKeys('ExportPool', options, EXPORT_POOL_KEYS);
    if (
      options.maxThreads !== undefined &&
      !(Number.isInteger(options.maxThreads) && options.maxThreads >= 1)
    ) {
      optionError('ExportPool', 'maxThreads', 'maxThreads must be a positive integer');
    }
    this.#options = options;
  }

  /** Worker threads at most (exports beyond it wait). */
  get maxThreads(): number {
    return this.#options.maxThreads ?? 2;
  }

  #pool(): Piscina<ExportTask, ExportTaskResult> {
    if (this.#closed) throw new PlatformError('ERR_EXPORT_POOL_CLOSED', 'ExportPool is closed');
    this.#piscina ??= new Piscina<ExportTask, ExportTaskResult>({
      filename: this.#options.workerFilename ?? defaultWorkerFilename(),
      minThreads: 0,
      maxThreads: this.maxThreads,
      idleTimeout: this.#options.idleTimeout ?? 30_000,
    });
    return this.#piscina;
  }

  /**
   * Runs `task`; rejects when it fails, crashes or is aborted, and with `ERR_EXPORT_POOL_CLOSED`
   * once `close()` or `destroy()` has been called.
   */
  async run(task: ExportTask, options: ExportRunOptions = {}): Promise<ExportTaskResult> {
    if (this.#closed) throw new PlatformError('ERR_EXPORT_POOL_CLOSED', 'ExportPool is closed');
    const run = this.#run(task, options);
    this.#runs.add(run);
    try {
      return await run;
    } finally {
      this.#runs.delete(run);
    }
  }

  async #run(task: ExportTask, options: ExportRunOptions): Promise<ExportTaskResult> {
    if (!task.descriptor) {
      if (!options.reader)
        throw new PlatformError('ERR_EXPORT_TASK_INVALID', 'A task without descriptor needs a reader');
      const destroyed = this.#destroyed.signal;
      return runExport(options.reader, task, {
        signal: options.signal ? AbortSignal.any([options.signal, destroyed]) : destroyed,
        onProgress: options.onProgress,
        ...(options.sink ? { sink: options.sink } : {}),
      });
    }
    const pool = this.#pool();
    const channel = new MessageChannel();
    if (options.onProgress) {
      const onProgress = options.onProgress;
      channel.port1.on('message', (message: ExportProgress) => onProgress(message));
    }
    channel.port1.unref();
    try {
      return await pool.run(
        { ...task, progressPort: channel.port2 },
        { transferList: [channel.port2], signal: options.signal ?? null },
      );
    } catch (error) {
      // The errno code of a worker's failed write or read (see worker-errors.ts).
      throw fromCrossing(error);
    } finally {
      channel.port1.close();
    }
  }

  /**
   * Whether the pool can run exports now, for readiness probes: `'closed'` after `close()` or `destroy()`,
   * `'worker-missing'` when the worker entry cannot be found, else `'ok'` (threads start on demand).
   */
  status(): 'ok' | 'closed' | 'worker-missing' {
    if (this.#closed) return 'closed';
    if (this.#piscina) return 'ok';
    const configured = this.#options.workerFilename;
    if (configured !== undefined) return existsSync(configured) ? 'ok' : 'worker-missing';
    try {
      defaultWorkerFilename();
      return 'ok';
    } catch {
      return 'worker-missing';
    }
  }

  /**
   * Drains the pool, as piscina's `close()`: from now on `run` refuses new exports
   * (`ERR_EXPORT_POOL_CLOSED`, and `status()` is `'closed'`), while the exports already accepted
   * (running in a worker or in this thread, or queued for a thread) go on to their end; then the
   * threads stop. Resolves once they have, however long the exports take: to bound a shutdown, call
   * `destroy()` when the time is up.
   */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#runs]);
    // Nothing runs or waits any more: the threads are idle. (piscina's own close() would race the
    // drain against its `closeTimeout`, 30 s, and emit an `error` event when that wins.)
    const piscina = this.#piscina;
    this.#piscina = undefined;
    if (piscina) await piscina.destroy();
  }

  /**
   * Stops at once, as piscina's `destroy()`: the worker threads are terminated and the exports
   * running or queued in them reject, those running in this thread are aborted (they reject with
   * `ERR_EXPORT_STOPPED`); `run` refuses new exports. Resolves once every run has settled. Files of
   * the stopped exports are left to their caller (the bulk router removes them when it runs the job
   * again).
   */
  async destroy(): Promise<void> {
    this.#closed = true;
    this.#destroyed.abort(new PlatformError('ERR_EXPORT_STOPPED', 'ExportPool destroyed'));
    const piscina = this.#piscina;
    this.#piscina = undefined;
    if (piscina) await piscina.destroy();
    await Promise.allSettled([...this.#runs]);
  }
}
