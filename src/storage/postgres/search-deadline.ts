import type { PoolClient } from 'pg';
import { SearchTooCostlyError } from '../errors.js';
import type { Query } from './query.js';

/*
 * A search's deadline (`ResourceQuery.deadline`) as PostgreSQL's `statement_timeout`: each of the
 * search's statements runs with what is left of the deadline as its timeout, set with `SET LOCAL`
 * so that it ends with the search's transaction and the connection goes back to the pool with the
 * session's own timeout. A statement cancelled by it (SQLSTATE 57014) is the search running out of
 * its time: `SearchTooCostlyError` (400 `too-costly`), not the 503 of the store's own timeout.
 */

/**
 * The deadline a search runs under, or undefined when the store's own `statement_timeout`
 * (`generalMs`, 0: none) ends first and applies unchanged (no statements added).
 */
export function searchDeadline(deadline: number | undefined, generalMs: number): number | undefined {
  if (deadline === undefined || !Number.isFinite(deadline)) return undefined;
  if (generalMs > 0 && deadline - Date.now() > generalMs) return undefined;
  return deadline;
}

/** Milliseconds left before `deadline`; past it, the search is too costly. */
function timeLeft(deadline: number): number {
  const left = Math.ceil(deadline - Date.now());
  if (left <= 0) throw new SearchTooCostlyError('The search ran out of its time and was stopped');
  return left;
}

/**
 * `error` as the search's: a statement cancelled once the deadline has passed is
 * `SearchTooCostlyError`. (A cancellation before it, say `pg_cancel_backend`, is not the
 * search's fault and stays as it is.)
 */
export function deadlineError(error: unknown, deadline: number): unknown {
  if ((error as { code?: unknown } | null)?.code === '57014' && Date.now() >= deadline) {
    return new SearchTooCostlyError('The search ran out of its time and was cancelled', { cause: error });
  }
  return error;
}

/**
 * Wraps `query` so that each statement first sets `statement_timeout` to what is left of
 * `deadline`, through `control` (which records failures like `query`, inside a transaction). The
 * first statement sends `begin` with it, in one round trip.
 */
export function deadlineQuery(
  query: Query,
  control: (text: string) => Promise<unknown>,
  deadline: number,
  begin = '',
): { query: Query; readonly begun: boolean } {
  let begun = false;
  const wrapped = (async (text: string, values?: unknown[], prepare?: boolean) => {
    const set = `SET LOCAL statement_timeout = ${timeLeft(deadline)}`;
    const first = !begun;
    // Begun before it is sent: a failure after BEGIN ran must still end the transaction.
    begun = true;
    await control(first ? `${begin}${set}` : set);
    return query(text, values, prepare);
  }) as Query;
  return {
    query: wrapped,
    get begun() {
      return begun;
    },
  };
}

/**
 * Runs a search's `fn` on `client` (checked out by the caller, idle) in a read-only transaction
 * whose statements end by `deadline`. When the transaction cannot be ended (the connection was
 * lost), `broken` is told, so that the caller destroys the client instead of releasing it.
 */
export async function runWithDeadline<T>(
  client: PoolClient,
  query: Query,
  deadline: number,
  fn: (query: Query) => Promise<T>,
  broken: (error: Error) => void,
): Promise<T> {
  const timed = deadlineQuery(query, (text) => client.query(text), deadline, 'BEGIN READ ONLY; ');
  try {
    const result = await fn(timed.query);
    if (timed.begun) await client.query('COMMIT');
    return result;
  } catch (error) {
    if (timed.begun) {
      try {
        await client.query('ROLLBACK');
      } catch (rollbackError) {
        broken(rollbackError as Error);
      }
    }
    throw deadlineError(error, deadline);
  }
}
