import bytes from 'bytes';
import type { HistoryRetention } from '../index.js';

/*
 * Readers of the usual kinds of `serve` setting value (serve-settings.ts): each takes the
 * variable's trimmed text (`undefined` when unset) and `invalid`, which throws a usage error
 * naming what was expected.
 */

/** An integer from `min` to `max`. */
export function integer(fallback: number, min: number, max = Number.MAX_SAFE_INTEGER) {
  return (text: string | undefined, invalid: (expected: string) => never): number => {
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < min || n > max) {
      invalid(max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer from ${min} to ${max}`);
    }
    return n;
  };
}

/** A positive integer, or `Infinity` (no limit). */
export function countLimit(fallback: number) {
  return (text: string | undefined, invalid: (expected: string) => never): number => {
    if (text === undefined) return fallback;
    if (/^infinity$/i.test(text)) return Number.POSITIVE_INFINITY;
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1) invalid('a positive integer or Infinity');
    return n;
  };
}

/**
 * Bytes: a whole number, or one with a unit `kb`, `mb`, `gb`, `tb` (1024-based, case-insensitive;
 * `512mb`, `1.5gb`), or `Infinity` when `infinite`. (`bytes.parse` alone reads `1GiB` as 1.)
 */
export function size(fallback: number, { zero = false, infinite = true } = {}) {
  const expected = `bytes (1073741824) or a size (512mb, 4gb)${infinite ? ', or Infinity' : ''}${zero ? '; 0 to disable' : ''}`;
  return (text: string | undefined, invalid: (expected: string) => never): number => {
    if (text === undefined) return fallback;
    if (infinite && /^infinity$/i.test(text)) return Number.POSITIVE_INFINITY;
    if (!/^\d+(\.\d+)?\s*(b|kb|mb|gb|tb)?$/i.test(text)) invalid(expected);
    const n = Math.floor(bytes.parse(text) ?? Number.NaN);
    if (!Number.isSafeInteger(n) || n < (zero ? 0 : 1)) invalid(expected);
    return n;
  };
}

export function boolean(text: string | undefined, invalid: (expected: string) => never): boolean {
  const value = text?.toLowerCase() ?? 'false';
  if (value !== 'true' && value !== 'false') invalid('true or false');
  return value === 'true';
}

/** One of `values`, matched case-insensitively and answered as listed. */
export function oneOf<T extends string>(values: readonly T[]) {
  return (text: string | undefined, invalid: (expected: string) => never): T | undefined => {
    if (text === undefined) return undefined;
    const found = values.find((v) => v.toLowerCase() === text.toLowerCase());
    if (!found) invalid(`one of ${values.join(', ')}`);
    return found;
  };
}

export const optionalText = (text: string | undefined): string | undefined => text;

/** `all`, `versions:<n>` or `days:<n>` (n a positive integer), as the stores' `history` option. */
export function historyRetention(
  text: string | undefined,
  invalid: (expected: string) => never,
): HistoryRetention {
  if (text === undefined || text.toLowerCase() === 'all') return 'all';
  const match = /^(versions|days):(\d{1,9})$/i.exec(text);
  const n = Number(match?.[2]);
  if (!match || n < 1) invalid('all, versions:<n> or days:<n> with n a positive integer');
  return match[1]!.toLowerCase() === 'versions' ? { versions: n } : { days: n };
}
