import { AsyncLocalStorage } from 'node:async_hooks';
import { StorageClosedError, StorageError } from '../errors.js';
import type { StoredResource } from '../types.js';
import { Clock, type Tick } from './clock.js';
import type { Mutation, ResourceEntry } from './mutation.js';
import { Layer } from './layer.js';
import { BaseState, type StateView } from './state.js';

/** What an adapter plugs into the engine: where committed batches and resource bodies live. */
export interface EngineBackend {
  /**
   * Makes a batch durable. Called by one writer at a time, in commit order, with the committed
   * state the batch applies to. Returns, aligned with `mutations`, the locator of each resource
   * body (stored as `ResourceEntry.ref`); other items are ignored. Throwing rejects the batch.
   */
  persist(mutations: readonly Mutation[], base: BaseState): Promise<unknown[]>;
  /** Keeps the bodies of committed entries readable until the returned function is called. */
  pin(entries: readonly ResourceEntry[]): () => void;
  /** Reads the body of a committed (pinned) entry as a fresh object. */
  readBody(entry: ResourceEntry): Promise<StoredResource>;
  /**
   * Housekeeping (compaction) run by the writer after a batch is applied and acknowledged,
   * before the next batch. Failures are ignored (it runs again after the next batch).
   */
  maintain?(base: BaseState): Promise<void>;
}

/** What an operation that writes sees: the state with every earlier pending write applied. */
export interface WriteContext {
  view: StateView;
  emit(m: Mutation): void;
  now(): Tick;
}

/** How operations reach the state: the committed store, or one transaction. */
export interface OpContext {
  /** A view to read from; read it synchronously (it may change across awaits). */
  view(): StateView;
  /** Runs `plan` against the latest state; its emitted mutations commit together, or none on throw. */
  write<T>(plan: (w: WriteContext) => T): Promise<T>;
  pin(entries: readonly ResourceEntry[]): () => void;
  readBody(entry: ResourceEntry): Promise<StoredResource>;
  /**
   * The committed state, to build search postings from without holding the writer; undefined when
   * called from a transaction function, absent in a transaction's own context (see `exclusive`).
   */
  committed?(): BaseState | undefined;
  /**
   * Runs `fn` holding the writer, on the committed state (see `Engine.exclusive`); absent inside a
   * transaction, which holds the writer itself.
   */
  exclusive?<T>(fn: (base: BaseState) => Promise<T>): Promise<T> | undefined;
}

interface WriteJob {
  kind: 'write';
  plan: (w: WriteContext) => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

interface TransactionJob {
  kind: 'transaction';
  fn: (ctx: OpContext) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * The shared in-memory engine behind memoryStorage and fileStorage. All writes go through one
 * serialized commit path: queued writes are planned one after the other against the state plus
 * the writes planned before them (so uniqueness and preconditions hold across a batch), the
 * whole batch is persisted by the backend (group commit), then applied and acknowledged.
 * A transaction holds the writer while its function runs, so what it reads stays true until it
 * commits.
 */
export class Engine {
  readonly base = new BaseState();
  readonly clock = new Clock();
  private readonly queue: (WriteJob | TransactionJob)[] = [];
  private draining: Promise<void> | undefined;
  private closed = false;
  /** Marks code running inside a transaction function; `open` is cleared when it ends. */
  private readonly inTransaction = new AsyncLocalStorage<{ open: boolean }>();

  constructor(private readonly backend: EngineBackend) {}

  get isClosed(): boolean {
    return this.closed;
  }

  /** The context for plain (non-transaction) operations. */
  readonly root: OpContext = {
    view: () => {
      this.assertOpen();
      return this.base;
    },
    write: <T>(plan: (w: WriteContext) => T) => this.enqueueWrite(plan),
    pin: (entries) => this.pinEntries(entries),
    readBody: (entry) => this.readBody(entry),
    committed: () => (this.inTransaction.getStore()?.open ? undefined : this.base),
    exclusive: (fn) => this.exclusive(fn),
  };

  /**
   * Runs `fn` holding the writer without writing: the committed state stays as it is while it
   * awaits (search postings are finished so). Undefined when called from a transaction function, whose
   * transaction holds the writer (waiting for it would never end).
   */
  exclusive<T>(fn: (base: BaseState) => Promise<T>): Promise<T> | undefined {
    if (this.inTransaction.getStore()?.open) return undefined;
    return this.transaction(() => fn(this.base));
  }

  assertOpen(): void {
    if (this.closed) throw new StorageClosedError('The storage is closed');
  }

  /** Runs `plan` in the writer, between batches: it sees exactly the committed state. */
  enqueueWrite<T>(plan: (w: WriteContext) => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.assertOpen();
      this.assertNotInTransaction();
      this.queue.push({ kind: 'write', plan, resolve: resolve as (v: unknown) => void, reject });
      this.kick();
    });
  }

  transaction<T>(fn: (ctx: OpContext) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.assertOpen();
      this.assertNotInTransaction();
      this.queue.push({
        kind: 'transaction',
        fn: fn,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
      this.kick();
    });
  }

  /** Waits for queued writes, then refuses new ones. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.drained();
    this.closed = true;
  }

  /** Resolves once the writer queue is empty. */
  async drained(): Promise<void> {
    while (this.draining) await this.draining;
  }

  private assertNotInTransaction(): void {
    // A write through the store (not `tx`) inside a transaction function would wait for the
    // transaction forever: fail fast instead.
    // Only while the transaction runs: work it started that outlives it may write normally.
    if (this.inTransaction.getStore()?.open) {
      throw new StorageError(
        'ERR_STORAGE_IN_TRANSACTION',
        'Inside a transaction, write through the transaction view (tx), not the store',
      );
    }
  }

  private pinEntries(entries: readonly ResourceEntry[]): () => void {
    const committed = entries.filter((e) => e.json === undefined);
    return committed.length > 0 ? this.backend.pin(committed) : () => undefined;
  }

  private readBody(entry: ResourceEntry): Promise<StoredResource> {
    if (entry.json !== undefined) return Promise.resolve(JSON.parse(entry.json) as StoredResource);
    return this.backend.readBody(entry);
  }

  private kick(): void {
    if (this.draining) return;
    this.draining = this.drain();
  }

  private async drain(): Promise<void> {
    for (;;) {
      const head = this.queue[0];
      if (!head) {
        // Cleared in the same tick the queue is seen empty, so a job queued by a caller that
        // resumes right after its acknowledgement always finds the writer idle and kicks it.
        this.draining = undefined;
        return;
      }
      if (head.kind === 'transaction') {
        this.queue.shift();
        await this.runTransaction(head);
        continue;
      }
      const jobs: WriteJob[] = [];
      while (this.queue[0]?.kind === 'write') jobs.push(this.queue.shift() as WriteJob);
      const batch = new Layer(this.base);
      const context = this.writeContext(batch);
      const accepted: { job: WriteJob; result: unknown }[] = [];
      for (const job of jobs) {
        const mark = batch.mutations.length;
        try {
          accepted.push({ job, result: job.plan(context) });
        } catch (error) {
          batch.rollbackTo(mark);
          job.reject(error);
        }
      }
      try {
        await this.commit(batch.mutations);
        for (const { job, result } of accepted) job.resolve(result);
      } catch (error) {
        for (const { job } of accepted) job.reject(error);
      }
      if (batch.mutations.length > 0) await this.maintain();
    }
  }

  private async maintain(): Promise<void> {
    try {
      await this.backend.maintain?.(this.base);
    } catch {
      // Housekeeping only: the store stays correct without it, and it is retried later.
    }
  }

  private writeContext(layer: Layer): WriteContext {
    return { view: layer, emit: (m) => layer.apply(m), now: () => this.clock.next() };
  }

  private async runTransaction(job: TransactionJob): Promise<void> {
    const layer = new Layer(this.base);
    const context = this.writeContext(layer);
    let open = true;
    const assertActive = (): void => {
      if (!open) throw new StorageError('ERR_STORAGE_TRANSACTION_ENDED', 'The transaction has ended');
    };
    const ctx: OpContext = {
      view: () => {
        assertActive();
        return layer;
      },
      // eslint-disable-next-line @typescript-eslint/require-await -- async turns a throw into a rejection
      write: async <T>(plan: (w: WriteContext) => T): Promise<T> => {
        assertActive();
        const mark = layer.mutations.length;
        try {
          return plan(context);
        } catch (error) {
          layer.rollbackTo(mark);
          throw error;
        }
      },
      pin: (entries) => this.pinEntries(entries),
      readBody: (entry) => this.readBody(entry),
    };
    let result: unknown;
    const marker = { open: true };
    try {
      result = await this.inTransaction.run(marker, () => job.fn(ctx));
    } catch (error) {
      job.reject(error);
      return;
    } finally {
      open = false;
      marker.open = false;
      // On Node 20 an enabled AsyncLocalStorage makes every promise of the process run a hook (about
      // 8% of a transaction Bundle load's time): keep it enabled only while a transaction function
      // runs (transactions run one at a time; `run` enables it again). Promises still carry their
      // marker, now closed, and the check only matters while a transaction is open.
      this.inTransaction.disable();
    }
    try {
      await this.commit(layer.mutations);
      job.resolve(result);
    } catch (error) {
      job.reject(error);
    }
    if (layer.mutations.length > 0) await this.maintain();
  }

  private async commit(mutations: readonly Mutation[]): Promise<void> {
    if (mutations.length === 0) return;
    const refs = await this.backend.persist(mutations, this.base);
    mutations.forEach((m, i) => this.base.apply(m, refs[i]));
  }
}
