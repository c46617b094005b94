import type { AsyncLocalStorage } from 'node:async_hooks';
import pg, { type Pool, type PoolClient } from 'pg';
import { InvalidOptionError } from '../../errors.js';
import { SESSION_OPTIONS } from './pool-options.js';
import {
  StatementNames,
  mapPgError,
  queryOn,
  isUnavailable,
  type ExecutionKind,
  type Executor,
  type Query,
  type SearchRun,
  type TransactionMarker,
} from './executor.js';
import { runWithDeadline, searchDeadline } from './search-deadline.js';

/** A WAL position (`pg_lsn` text, `16/B374D848`) as a number that orders like it. */
export function lsnValue(text: string): bigint {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi ?? '0'}`) << 32n) + BigInt(`0x${lo ?? '0'}`);
}

/**
 * Which writes a replica must have replayed to serve a read: this store's (`'instance'`) or every
 * commit the primary had made when the read began (`'primary'`).
 */
export type ReplicaFreshness = 'instance' | 'primary';

/** One read replica: its pool, and whether reads may go there now. */
interface Replica {
  readonly url: string;
  readonly pool: Pool;
  readonly names: StatementNames;
  /** Until this time (ms) the replica is skipped: it could not be reached, or was not in recovery. */
  skipUntil: number;
}

/** Options of a `ReplicaRouter`. */
export interface ReplicaRouterOptions {
  /** Connection strings of the replicas. */
  urls: readonly string[];
  /** Connections of each replica's pool. */
  maxConnections: number;
  /** Longest wait for a replica connection before the read goes to the primary, in ms. */
  connectTimeoutMs: number;
  /** How long a replica that failed (or was promoted) is skipped before it is tried again, in ms. */
  retryAfterMs: number;
  /** Which writes a replica must have replayed. @default 'instance' */
  freshness?: ReplicaFreshness;
}

/**
 * Sends reads to streaming replicas when that cannot hide a write: the store remembers that it
 * committed something (`noteWrite`), and before the next read asks the primary for its WAL
 * position (`pg_current_wal_lsn()`, at or after every commit this store made); a replica serves the
 * read only if `pg_last_wal_replay_lsn()` on the connection that runs it is at or past that
 * position (it only moves forward), else the primary does. So a caller of this store always reads
 * its own writes and every write made through the same store before them; writes made through
 * other instances are seen once the replica has replayed them (its lag). With `freshness:
 * 'primary'` the position is asked before every read, so that a read sees every write committed
 * before it began, through whichever instance.
 *
 * A replica that cannot be reached, or that is no longer in recovery (promoted: it follows
 * another timeline, and no longer receives this primary's writes), is skipped for `retryAfterMs`
 * and the read runs on the primary.
 */
export class ReplicaRouter {
  private readonly replicas: Replica[];
  private next = 0;
  /** A write committed since `writeLsn` was read from the primary. */
  private dirty = false;
  /** The primary's WAL position after this store's last known write (0n before any). */
  private writeLsn = 0n;

  constructor(options: ReplicaRouterOptions) {
    this.replicas = options.urls.map((url) => {
      const pool = new pg.Pool({
        connectionString: url,
        max: options.maxConnections,
        connectionTimeoutMillis: options.connectTimeoutMs,
        options: SESSION_OPTIONS,
      });
      // A replica going away must not crash the process: its idle clients emit `error`.
      pool.on('error', () => undefined);
      pool.on('connect', (client) => client.on('error', () => undefined));
      return { url, pool, names: new StatementNames(), skipUntil: 0 };
    });
    this.retryAfterMs = options.retryAfterMs;
    this.everyRead = options.freshness === 'primary';
  }

  /** The primary's position is asked before every read (`freshness: 'primary'`). */
  private readonly everyRead: boolean;

  private readonly retryAfterMs: number;

  /** Records that a write through the store committed (call after the commit). */
  noteWrite(): void {
    this.dirty = true;
  }

  /** The WAL position a replica must have replayed to serve a read now. */
  private async required(primary: Query): Promise<bigint> {
    if (!this.dirty && !this.everyRead) return this.writeLsn;
    // Cleared first: a write that commits while the position is read marks it dirty again.
    this.dirty = false;
    try {
      const { rows } = await primary<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      const lsn = lsnValue(rows[0]!.lsn);
      if (lsn > this.writeLsn) this.writeLsn = lsn;
      return this.writeLsn;
    } catch (error) {
      this.dirty = true;
      throw error;
    }
  }

  /** The replicas not being skipped, starting with the next in turn. */
  private candidates(now: number): Replica[] {
    const live = this.replicas.filter((r) => r.skipUntil <= now);
    if (live.length === 0) return [];
    const start = this.next++ % live.length;
    return [...live.slice(start), ...live.slice(0, start)];
  }

  /**
   * Runs a read on a replica that has replayed `required`, or returns `undefined` (the caller runs
   * it on the primary). Failures of the read itself (not of reaching the replica) are thrown. A
   * search's statements end by its `deadline` (the replicas' sessions have no timeout of their own).
   */
  async read<T>(
    primary: Query,
    fn: (query: Query) => Promise<T>,
    deadline?: number,
  ): Promise<{ value: T } | undefined> {
    const now = Date.now();
    const replicas = this.candidates(now);
    if (replicas.length === 0) return undefined;
    const required = await this.required(primary);
    for (const replica of replicas) {
      let client: PoolClient;
      try {
        client = await replica.pool.connect();
      } catch {
        replica.skipUntil = Date.now() + this.retryAfterMs;
        continue;
      }
      let broken: Error | undefined;
      try {
        const { rows } = await client.query<{ recovery: boolean; lsn: string | null }>(
          'SELECT pg_is_in_recovery() AS recovery, pg_last_wal_replay_lsn()::text AS lsn',
        );
        const state = rows[0];
        if (!state?.recovery || state.lsn === null) {
          // Promoted (or not a standby at all): its data no longer follows the primary's.
          replica.skipUntil = Date.now() + this.retryAfterMs;
          continue;
        }
        if (lsnValue(state.lsn) < required) continue;
        const query = queryOn(client, replica.names);
        const timed = searchDeadline(deadline, 0);
        if (timed === undefined) return { value: await fn(query) };
        return { value: await runWithDeadline(client, query, timed, fn, (error) => (broken = error)) };
      } catch (error) {
        if (isUnavailable(error)) {
          broken = error as Error;
          replica.skipUntil = Date.now() + this.retryAfterMs;
          continue;
        }
        // Cancelled by the standby to apply the primary's changes (a conflict with recovery):
        // the primary answers instead.
        if ((error as { code?: unknown }).code === '40001') continue;
        throw error;
      } finally {
        client.release(broken);
      }
    }
    return undefined;
  }

  /** Ends the replicas' pools. */
  async close(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.pool.end().catch(() => undefined)));
  }
}

/**
 * The store's executor with read replicas: a read outside a transaction goes through the
 * `ReplicaRouter` (to the primary when no replica may serve it); everything else, and every read
 * inside a transaction, runs on the primary; each write is noted once it has committed.
 */
export class ReplicaExecutor implements Executor {
  private readonly names = new StatementNames();

  constructor(
    private readonly primary: Executor,
    private readonly primaryPool: Pool,
    private readonly router: ReplicaRouter,
    private readonly transactionScope: AsyncLocalStorage<TransactionMarker>,
  ) {}

  async run<T>(kind: ExecutionKind, fn: (query: Query) => Promise<T>, search?: SearchRun): Promise<T> {
    if (kind !== 'read' || this.transactionScope.getStore()?.open) {
      try {
        return await this.primary.run(kind, fn, search);
      } finally {
        // Also after a failure: a commit whose answer was lost may have happened.
        if (kind !== 'read') this.router.noteWrite();
      }
    }
    try {
      const routed = await this.router.read(queryOn(this.primaryPool, this.names), fn, search?.deadline);
      if (routed) return routed.value;
    } catch (error) {
      throw mapPgError(error);
    }
    return this.primary.run(kind, fn, search);
  }
}

/** The router of the `readReplicas` option (checked), or undefined without replicas. */
export function replicaRouterFor(
  urls: unknown,
  max: number,
  acquireTimeoutMs: number,
  freshness: unknown = 'instance',
): ReplicaRouter | undefined {
  if (freshness !== 'instance' && freshness !== 'primary')
    throw new InvalidOptionError("postgresStorage: replicaFreshness must be 'instance' or 'primary'");
  if (urls === undefined) return undefined;
  if (!Array.isArray(urls) || urls.some((u) => typeof u !== 'string' || u === ''))
    throw new InvalidOptionError('postgresStorage: readReplicas must be a list of connection strings');
  if (urls.length === 0) return undefined;
  const connectTimeoutMs = Math.min(acquireTimeoutMs || 2000, 2000);
  return new ReplicaRouter({
    urls: urls as string[],
    maxConnections: max,
    connectTimeoutMs,
    retryAfterMs: 30_000,
    freshness,
  });
}
