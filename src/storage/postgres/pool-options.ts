import { InvalidOptionError } from '../../errors.js';

/** A duration option in milliseconds: a non-negative integer (0: no limit). */
export function millis(value: number | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new InvalidOptionError(`postgresStorage: ${name} must be a non-negative integer of milliseconds`);
  }
  return value;
}

/** Defaults of the pool and timeout options (the `serve` settings table is checked against them). */
export const POSTGRES_POOL_DEFAULTS = {
  maxConnections: 10,
  acquireTimeoutMs: 10_000,
  lockTimeoutMs: 15_000,
  statementTimeoutMs: 60_000,
  idleInTransactionTimeoutMs: 60_000,
  closeTimeoutMs: 10_000,
} as const;

/**
 * Startup options of the connections a store opens itself (the primary's pool and the replicas'):
 * PostgreSQL's JIT off. The store's statements are short lookups whose plans, on a large store,
 * cost more than `jit_above_cost` (100,000) without doing much work, and JIT compiled them on
 * every run: at 10M resources it took 337 ms of a 410 ms search for a month of Observations
 * (34 ms without it; docs/performance.md). A connection string's own `options` parameter, or a
 * caller's `pool`, replaces this.
 */
export const SESSION_OPTIONS = '-c jit=off';
