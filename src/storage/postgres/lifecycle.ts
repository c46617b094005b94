import type pg from 'pg';
import type { Pool } from 'pg';
import { StorageClosedError, StorageUnavailableError } from '../errors.js';
import { mapPgError, type ExecutionKind, type Executor, type Query, type SearchRun } from './executor.js';

// The PostgreSQL store's lifecycle: calls wait for the migrations, `close()` waits for the calls
// in flight (for a bounded time), and the clients a stuck close must end.

/**
 * Open/close bookkeeping: calls wait for the migrations, and `close()` waits for calls in flight.
 * Migrations that failed because the database was out of reach run again on the next call (each
 * call meanwhile fails with `StorageUnavailableError`); any other failure stays.
 */
export class Lifecycle {
  private closed = false;
  private inFlight = 0;
  private idle: (() => void) | undefined;
  private ready: Promise<void>;
  private retryReady = false;

  constructor(
    private readonly migrate: () => Promise<void>,
    readonly closeTimeoutMs: number,
  ) {
    this.ready = this.start();
  }

  private start(): Promise<void> {
    const ready = this.migrate().catch((error: unknown) => {
      const mapped = mapPgError(error);
      if (mapped instanceof StorageUnavailableError) this.retryReady = true;
      throw mapped;
    });
    // Surfaced by the first call (and by every later one); not an unhandled rejection meanwhile.
    ready.catch(() => undefined);
    return ready;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  assertOpen(): void {
    if (this.closed) throw new StorageClosedError('The storage is closed');
  }

  async track<T>(fn: () => Promise<T>): Promise<T> {
    this.assertOpen();
    this.inFlight += 1;
    try {
      if (this.retryReady) {
        this.retryReady = false;
        this.ready = this.start();
      }
      await this.ready;
      return await fn();
    } finally {
      this.inFlight -= 1;
      if (this.inFlight === 0) this.idle?.();
    }
  }

  /**
   * Refuses new calls and resolves once the calls in flight have settled, true; or false once
   * `closeTimeoutMs` has passed with calls still in flight (0: waits as long as they take).
   */
  async close(): Promise<boolean> {
    this.closed = true;
    let settled = true;
    if (this.inFlight > 0) {
      const idle = new Promise<void>((resolve) => (this.idle = resolve));
      settled = await settlesWithin(idle, this.closeTimeoutMs);
    }
    await this.ready.catch(() => undefined);
    return settled;
  }
}

/** True when `promise` settles within `ms` milliseconds (0: whenever it settles), false otherwise. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  if (ms === 0) {
    await promise.catch(() => undefined);
    return true;
  }
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  try {
    return await Promise.race([
      promise.then(
        () => true as const,
        () => true as const,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** The clients of `pool` checked out now (to end them when a close runs out of time). */
export function trackCheckedOut(pool: Pool): Set<pg.PoolClient> {
  const out = new Set<pg.PoolClient>();
  pool.on('acquire', (client) => out.add(client));
  pool.on('release', (_error, client) => out.delete(client));
  pool.on('remove', (client) => out.delete(client));
  return out;
}

export class GuardedExecutor implements Executor {
  constructor(
    private readonly lifecycle: Lifecycle,
    private readonly inner: Executor,
  ) {}

  run<T>(kind: ExecutionKind, fn: (query: Query) => Promise<T>, search?: SearchRun): Promise<T> {
    return this.lifecycle.track(() => this.inner.run(kind, fn, search));
  }
}
