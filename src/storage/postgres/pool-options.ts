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
