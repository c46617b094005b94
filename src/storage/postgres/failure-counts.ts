import { createHash } from 'node:crypto';
import type { FailureCount, FailureCountStore } from '../types.js';
import type { Executor } from './executor.js';

/** Expired counters are deleted once every this many `add` calls. */
const PURGE_EVERY = 1024;

// The database clock in epoch milliseconds: one clock for every instance, however theirs drift.
const NOW_MS = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`;

/**
 * A limiter key as stored: its SHA-256, so that a key of any length or content (a client id is
 * whatever the caller sent, NUL characters included) fits the primary key.
 */
function storedKey(key: string): string {
  return createHash('sha256').update(key).digest('base64');
}

/**
 * Failed-authentication counters in the `auth_failures` table: one row per key with its count
 * and the end of its window (database clock), so that the limits hold across every instance on
 * the database. Reading is one statement for all keys, counting one upsert for all keys.
 *
 * rate-limiter-flexible's PostgreSQL store was considered and not used: it runs one statement per
 * key, names its prepared statements by table name only (two schemas on one pool collide), needs
 * keys under 255 characters, quotes the schema without escaping and times windows with each
 * instance's own clock.
 */
export class PostgresFailureCounts implements FailureCountStore {
  private adds = 0;

  constructor(
    private readonly exec: Executor,
    /** The quoted schema. */
    private readonly s: string,
  ) {}

  get(keys: readonly string[]): Promise<(FailureCount | undefined)[]> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<{ i: string; failures: number; ms_left: string }>(
        `SELECT k.i, f.failures, f.reset_at - n.now AS ms_left
           FROM unnest($1::text[]) WITH ORDINALITY AS k(key, i)
           CROSS JOIN (SELECT ${NOW_MS} AS now) n
           JOIN ${this.s}.auth_failures f ON f.key = k.key
          WHERE f.reset_at > n.now`,
        [keys.map(storedKey)],
        true,
      );
      const counts: (FailureCount | undefined)[] = keys.map(() => undefined);
      for (const row of rows)
        counts[Number(row.i) - 1] = { failures: row.failures, msLeft: Number(row.ms_left) };
      return counts;
    });
  }

  async add(keys: readonly string[], windowMs: number): Promise<void> {
    if (++this.adds % PURGE_EVERY === 0) {
      await this.exec.run('write', (query) =>
        query(`DELETE FROM ${this.s}.auth_failures WHERE reset_at <= ${NOW_MS}`),
      );
    }
    // A key twice in one upsert is an error ("cannot affect row a second time").
    const stored = [...new Set(keys.map(storedKey))];
    await this.exec.run('write', (query) =>
      // `excluded.reset_at - $2` is this statement's "now".
      query(
        `INSERT INTO ${this.s}.auth_failures AS f (key, failures, reset_at)
         SELECT key, 1, ${NOW_MS} + $2 FROM unnest($1::text[]) AS k(key)
         ON CONFLICT (key) DO UPDATE SET
           failures = CASE WHEN f.reset_at <= excluded.reset_at - $2 THEN 1 ELSE f.failures + 1 END,
           reset_at = CASE WHEN f.reset_at <= excluded.reset_at - $2 THEN excluded.reset_at ELSE f.reset_at END`,
        [stored, Math.ceil(windowMs)],
        true,
      ),
    );
  }
}
