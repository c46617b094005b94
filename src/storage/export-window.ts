import type { ExportReadOptions } from './export-types.js';

/**
 * The upper bound of an export read (`until`) in microseconds, the unit stores keep
 * `lastUpdated` in: `Infinity` without one. Rounded, since `until` may carry a fraction of a
 * millisecond that binary floating point does not hold exactly.
 */
export function untilMicros(options: Pick<ExportReadOptions, 'until'>): number {
  return options.until === undefined ? Infinity : Math.round(options.until * 1000);
}
