import { optionError } from '../common/options.js';
import type { HistoryRetention } from './history-types.js';

/** Microseconds in a day. */
export const DAY_MICROS = 86_400_000_000;

/**
 * The `history` option of a store factory, checked (`'all'` when absent).
 * @throws InvalidOptionError naming `owner` and the option for anything else.
 */
export function checkHistoryRetention(owner: string, value: unknown): HistoryRetention {
  if (value === undefined || value === 'all') return 'all';
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const keys = Object.keys(value);
    const [key] = keys;
    const n = (value as Record<string, unknown>)[key ?? ''];
    if (
      keys.length === 1 &&
      (key === 'versions' || key === 'days') &&
      Number.isSafeInteger(n) &&
      (n as number) >= 1
    )
      return key === 'versions' ? { versions: n as number } : { days: n as number };
  }
  return optionError(
    owner,
    'history',
    "history must be 'all', { versions: n } or { days: n } with n a positive integer",
  );
}

/** `retention` as text, for settings and logs: `all`, `versions:5`, `days:30`. */
export function formatHistoryRetention(retention: HistoryRetention): string {
  if (retention === 'all') return 'all';
  return 'versions' in retention ? `versions:${retention.versions}` : `days:${retention.days}`;
}
