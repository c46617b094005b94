import { PlatformError } from '../errors.js';

/**
 * The bytes one export has written so far, shared by all its file writers, and the most it may
 * write (`maxExportSize`). A write that would pass the limit throws {@link ExportTooLargeError}
 * before anything of it reaches the disk.
 */
export class ByteBudget {
  readonly limit: number;
  used = 0;

  constructor(limit = Number.POSITIVE_INFINITY) {
    this.limit = limit;
  }

  /** Reserves `bytes`, or throws when they would pass the limit. */
  take(bytes: number): void {
    if (this.used + bytes > this.limit) throw new ExportTooLargeError(this.limit);
    this.used += bytes;
  }
}

/** An export stopped because its files would exceed `maxExportSize`. */
export class ExportTooLargeError extends PlatformError {
  declare readonly code: 'ERR_EXPORT_TOO_LARGE';
  constructor(limit: number) {
    super('ERR_EXPORT_TOO_LARGE', `The export would write more than ${limit} bytes`);
  }
}
