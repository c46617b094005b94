import type { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import type { Pool, PoolClient, QueryResultRow } from 'pg';
import type { Query } from './query.js';
import { ConflictError, InvalidRecordError, StorageError, StorageUnavailableError } from '../errors.js';
import { isSystemError } from '../system-error.js';
import { UNIQUE_ATTRIBUTES } from './schema.js';
import { deadlineError, deadlineQuery, runWithDeadline, searchDeadline } from './search-deadline.js';

export type { Query } from './query.js';

/**
 * - `read`: one or more statements that change nothing;
 * - `write`: one statement that changes something (atomic by itself);
 * - `atomic`: several statements that apply together or not at all.
 */
export type ExecutionKind = 'read' | 'write' | 'atomic';

/**
 * What a search adds to a read: the project whose share of the search lane it takes, and when it
 * must be answered by (`ResourceQuery.deadline`, epoch ms), which bounds its wait for the lane and
 * its statements (search-deadline.ts).
 */
export interface SearchRun {
  projectId: string;
  deadline?: number | undefined;
}

/** Where operations run: the pool (each call its own transaction) or one open transaction. */
export interface Executor {
  /** Runs `fn`; with `search`, as a search (in the search lane, under its deadline). */
  run<T>(kind: ExecutionKind, fn: (query: Query) => Promise<T>, search?: SearchRun): Promise<T>;
}

interface PgError {
  code?: unknown;
  constraint?: unknown;
}

function pgCode(error: unknown): string | undefined {
  const code = (error as PgError | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** SQLSTATEs after which running the same transaction again may succeed. */
function isRetryable(error: unknown): boolean {
  const code = pgCode(error);
  return code === '40001' || code === '40P01';
}

/**
 * SQLSTATE classes and codes after which the database is out of reach or out of resources for
 * now: 08 connection exception, 53 insufficient resources (53100 disk full, 53300 too many
 * connections), 57P01-57P03 shut down or starting, 58030 I/O error.
 */
const UNAVAILABLE_SQLSTATE = /^(08|53)|^57P0[123]$|^58030$/;

/**
 * pg's own connection failures carry no code, only these messages (a connection cut by a server
 * restart or the network, a pool that could not connect in time).
 */
const CONNECTION_LOST =
  /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection timeout)/;

/**
 * The store's own timeouts: 55P03 a lock not granted within `lock_timeout`, 57014 a statement
 * cancelled by `statement_timeout`, 25P03 a session ended by `idle_in_transaction_session_timeout`.
 * The database is busy, not the request wrong: answered 503 with `Retry-After`.
 */
const TIMED_OUT_SQLSTATE = /^(55P03|57014|25P03)$/;

/** True when `error` says the database could not be reached or failed for now, not the request. */
export function isUnavailable(error: unknown): boolean {
  if (isSystemError(error)) return true;
  const code = pgCode(error);
  if (code !== undefined) return UNAVAILABLE_SQLSTATE.test(code);
  return error instanceof Error && CONNECTION_LOST.test(error.message);
}

/**
 * Keeps a connection lost while its client is checked out (a transaction, a COPY, a cursor, an
 * advisory lock held) from crashing the process: pg emits `error` on such a client, and the pool
 * listens only while the client is idle, so the event had no listener (an uncaught exception when
 * the database restarted or `pg_terminate_backend` ended the backend in the middle of a request).
 * The query in flight still fails with the error, and the pool drops the client when released.
 */
export function guardCheckedOutClients(pool: Pool): void {
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
  });
}

/** Maps PostgreSQL failures onto the typed storage errors; anything else passes unchanged. */
export function mapPgError(error: unknown): unknown {
  if (error instanceof StorageError) return error;
  const timedOut = pgCode(error);
  if (timedOut !== undefined && TIMED_OUT_SQLSTATE.test(timedOut)) {
    return new StorageUnavailableError(`The database is busy: ${(error as Error).message}`, { cause: error });
  }
  if (isUnavailable(error)) {
    // A connection lost while a commit was in flight leaves that commit's outcome unknown.
    return new StorageUnavailableError(`The database is unavailable: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const code = pgCode(error);
  if (code === '23505') {
    const constraint = (error as PgError).constraint;
    const attribute = typeof constraint === 'string' ? UNIQUE_ATTRIBUTES[constraint] : undefined;
    return new ConflictError(`A record with the same ${attribute ?? 'key'} exists`, {
      ...(attribute !== undefined ? { attribute } : {}),
      cause: error,
    });
  }
  // Text PostgreSQL cannot store (a NUL character) or index (a key of several kilobytes).
  if (code === '22021' || code === '22P05' || code === '54000') {
    return new InvalidRecordError('The record holds a value PostgreSQL cannot store', { cause: error });
  }
  if (code === '40001' || code === '40P01') {
    return new ConflictError('A concurrent transaction changed the same records; retry', { cause: error });
  }
  return error;
}

/** Names of prepared statements by text (per executor: the texts hold the schema name). */
export class StatementNames {
  private readonly names = new Map<string, string>();

  of(text: string): string {
    let name = this.names.get(text);
    if (name === undefined) {
      name = `fpk_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
      this.names.set(text, name);
    }
    return name;
  }
}

function holdsNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  return Array.isArray(value) && value.some(holdsNul);
}

/** A `Query` on a pool or a client, preparing statements by `names` when asked. */
export function queryOn(client: Pool | PoolClient, names: StatementNames): Query {
  return <R extends QueryResultRow>(text: string, values?: unknown[], prepare?: boolean) => {
    // PostgreSQL text cannot hold NUL: refuse before sending, so an open transaction survives.
    if (values?.some(holdsNul)) {
      return Promise.reject(
        new InvalidRecordError('A value holds a NUL character, which PostgreSQL cannot store'),
      );
    }
    return prepare ? client.query<R>({ name: names.of(text), text, values }) : client.query<R>(text, values);
  };
}

function inTransactionError(): StorageError {
  // A write through the store while the same async flow holds a transaction could wait on that
  // transaction's locks forever: fail fast instead (as the other stores do).
  return new StorageError(
    'ERR_STORAGE_IN_TRANSACTION',
    'Inside a transaction, write through the transaction view (tx), not the store',
  );
}

/**
 * Set in the async flow of a transaction function; `open` turns false when the transaction ends,
 * so work that function started and that outlives it writes like any other caller.
 */
export interface TransactionMarker {
  open: boolean;
  /** The transaction's own executor: reads through the store in its flow run there. */
  exec: Executor;
}

/** Runs `fn` in BEGIN … COMMIT on a client of its own, rolling back on any failure. */
export async function inTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      broken = rollbackError as Error;
    }
    throw error;
  } finally {
    // A client whose rollback failed is in an unknown state: destroy it rather than reuse it.
    client.release(broken);
  }
}

/**
 * Plain operations: single statements on the pool, atomic ones in a transaction of their own, a
 * search on one connection (under its deadline when it has one).
 */
export class PoolExecutor implements Executor {
  private readonly names = new StatementNames();

  constructor(
    private readonly pool: Pool,
    private readonly transactionScope: AsyncLocalStorage<TransactionMarker>,
    /** The `statement_timeout` of the pool's sessions, in ms (0: none, or not known). */
    private readonly statementTimeoutMs = 0,
  ) {}

  async run<T>(kind: ExecutionKind, fn: (query: Query) => Promise<T>, search?: SearchRun): Promise<T> {
    const marker = this.transactionScope.getStore();
    if (marker?.open) {
      if (kind !== 'read') throw inTransactionError();
      // A read through the store inside a transaction function (a project's settings read while
      // its entries are validated) runs on the transaction's own connection. Taking a second one
      // while this one holds locks wedged the pool: with as many transactions as connections,
      // each waited for a connection that only another one, waiting for its lock, could free.
      return marker.exec.run(kind, fn, search);
    }
    try {
      if (search !== undefined && kind === 'read') return await this.search(fn, search);
      if (kind !== 'atomic') return await fn(queryOn(this.pool, this.names));
      for (let attempt = 1; ; attempt++) {
        try {
          return await inTransaction(this.pool, (client) => fn(queryOn(client, this.names)));
        } catch (error) {
          if (attempt >= 3 || !isRetryable(error)) throw error;
        }
      }
    } catch (error) {
      throw mapPgError(error);
    }
  }

  /** A search holds one connection from its first statement to its last. */
  private async search<T>(fn: (query: Query) => Promise<T>, search: SearchRun): Promise<T> {
    const deadline = searchDeadline(search.deadline, this.statementTimeoutMs);
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      const query = queryOn(client, this.names);
      if (deadline === undefined) return await fn(query);
      return await runWithDeadline(client, query, deadline, fn, (error) => (broken = error));
    } finally {
      client.release(broken);
    }
  }
}

/**
 * The operations of one open transaction. They run one at a time on its client (a caller may
 * start several without awaiting each); an atomic one runs in a savepoint, so a failed operation
 * (a conflict, a precondition) leaves no partial writes and the transaction goes on.
 */
export class TransactionExecutor implements Executor {
  private tail: Promise<unknown> = Promise.resolve();
  private active = true;
  private savepoints = 0;
  /**
   * The first statement failure outside a savepoint: PostgreSQL has aborted the transaction, so
   * every later operation fails with it and the transaction cannot commit.
   */
  private failure: unknown;

  constructor(
    private readonly client: PoolClient,
    /** The `statement_timeout` of the client's session, in ms (0: none, or not known). */
    private readonly statementTimeoutMs = 0,
    private readonly names = new StatementNames(),
  ) {}

  /** Refuses further operations (once the transaction commits or rolls back). */
  end(): Promise<unknown> {
    this.active = false;
    return this.tail;
  }

  /** Throws (mapped) the failure that aborted the transaction, if any. */
  assertCommittable(): void {
    if (this.failure !== undefined) throw mapPgError(this.failure);
  }

  run<T>(kind: ExecutionKind, fn: (query: Query) => Promise<T>, search?: SearchRun): Promise<T> {
    if (!this.active) {
      return Promise.reject(new StorageError('ERR_STORAGE_TRANSACTION_ENDED', 'The transaction has ended'));
    }
    const result = this.tail.then(() => this.runNow(kind, fn, search));
    this.tail = result.catch(() => undefined);
    return result;
  }

  private async runNow<T>(
    kind: ExecutionKind,
    fn: (query: Query) => Promise<T>,
    search?: SearchRun,
  ): Promise<T> {
    this.assertCommittable();
    const raw = queryOn(this.client, this.names);
    try {
      if (kind !== 'atomic') {
        const watched = (async (text: string, values?: unknown[], prepare?: boolean) => {
          try {
            return await raw(text, values, prepare);
          } catch (error) {
            // Refused before sending (a StorageError): the transaction is intact.
            if (!(error instanceof StorageError)) this.failure ??= error;
            throw error;
          }
        }) as Query;
        const deadline =
          kind === 'read' ? searchDeadline(search?.deadline, this.statementTimeoutMs) : undefined;
        if (deadline === undefined) return await fn(watched);
        return await this.searchWithin(watched, deadline, fn);
      }
      const name = `fpk_sp_${++this.savepoints}`;
      await this.client.query(`SAVEPOINT ${name}`);
      try {
        const result = await fn(raw);
        await this.client.query(`RELEASE SAVEPOINT ${name}`);
        return result;
      } catch (error) {
        try {
          await this.client.query(`ROLLBACK TO SAVEPOINT ${name}`);
          await this.client.query(`RELEASE SAVEPOINT ${name}`);
        } catch (rollbackError) {
          this.failure ??= rollbackError;
        }
        throw error;
      }
    } catch (error) {
      throw mapPgError(error);
    }
  }

  /**
   * A search under its deadline in the transaction: its statements' timeout set for it, then the
   * session's again for the transaction's later statements (unless the search aborted it).
   */
  private async searchWithin<T>(
    watched: Query,
    deadline: number,
    fn: (query: Query) => Promise<T>,
  ): Promise<T> {
    const timed = deadlineQuery(watched, (text) => watched(text), deadline);
    const restore = async () => {
      if (timed.begun) await watched('SET LOCAL statement_timeout TO DEFAULT');
    };
    try {
      const result = await fn(timed.query);
      await restore();
      return result;
    } catch (error) {
      await restore().catch(() => undefined);
      throw deadlineError(error, deadline);
    }
  }
}
