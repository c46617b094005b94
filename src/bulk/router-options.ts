import { statfs } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  booleanOption,
  optionError,
  nonNegativeNumber,
  optionalFunction,
  positiveLimit,
  positiveNumber,
} from '../common/options.js';
import { checkRouterOptions, type CommonRouterOptions, type OwnOptionKeys } from '../http/router-options.js';
import type { ExportFileStore } from '../storage/types.js';
import { DirectoryExportFiles } from './directory-export-files.js';
import { ExportPool, type ExportPoolOptions } from './export-pool.js';
import {
  resolveBulkImportOptions,
  type BulkImportOptions,
  type ResolvedBulkImportOptions,
} from './import/import-options.js';

/** Options of `bulkExportRouter` (./router.ts). */
export interface BulkExportRouterOptions extends CommonRouterOptions {
  /**
   * Directory of the export files, one sub-directory per job. Give every router its own
   * directory (or share one only between routers on the same storage).
   * @default `<os.tmpdir()>/fhir-platform-kit-exports`
   */
  exportDir?: string;
  /**
   * Where export files are kept: a store every instance reaches, or the directory `exportDir`.
   * Pass `new DirectoryExportFiles(dir)` to keep files on local disk with a PostgreSQL store (then
   * only with a single instance, or a directory every instance shares).
   * @default `storage.exportFiles` (PostgreSQL: in the database), else `exportDir`
   */
  exportFiles?: ExportFileStore;
  /**
   * Milliseconds a running export's lease lasts without renewal, with a store that shares its
   * export queue between instances (PostgreSQL): an instance that dies stops renewing, and
   * another takes the job over once the lease has expired. Ignored by the other stores.
   * @default 30000
   */
  leaseDuration?: number;
  /**
   * Milliseconds between two lease renewals of a running export (shared queue only); each
   * heartbeat also looks for jobs to take over and learns of a cancellation through another
   * instance. Must be below `leaseDuration` (a third of it leaves room for two missed beats).
   * @default 10000
   */
  heartbeatInterval?: number;
  /**
   * Output files are split before they would exceed this many bytes.
   * @default 67108864 (64 MiB)
   */
  maxFileSize?: number;
  /**
   * Hard cap on the files of one export, in bytes: an export that would write more stops, fails
   * with an OperationOutcome `too-costly` and its files are removed. `Infinity` disables it.
   * @default 4294967296 (4 GiB)
   */
  maxExportSize?: number;
  /**
   * Bytes of export files a project may keep: completed exports not yet expired or deleted, plus
   * what its running exports have written so far. While the project is at or over it, a kick-off
   * answers 429 (`too-costly`, `Retry-After` = until the earliest of its exports expires); a running
   * export is not stopped by it (see `maxExportSize`). `Infinity` disables it.
   * @default 1073741824 (1 GiB)
   */
  maxProjectExportSize?: number;
  /**
   * Export kick-offs a project may make in any 60-minute window (accepted ones count, even when
   * cancelled since); one more answers 429 (`throttled`, `Retry-After` = until one leaves the
   * window). `Infinity` disables it. A rate guard against a runaway client, not the disk's
   * protection (that is `maxRunningExports`, `maxProjectExportSize`, `maxExportSize` and
   * `minFreeSpace`): a conformance kit such as smart-on-fhir/bdt kicks off about 100 exports in
   * a few minutes, most cancelled at once.
   * @default 1000
   */
  maxKickoffsPerHour?: number;
  /**
   * Free bytes the file system of `exportDir` must have for a kick-off to be accepted; below it
   * kick-offs answer 503 (`transient`, `Retry-After` = `cleanupInterval`). `0` disables the check.
   * @default 1073741824 (1 GiB)
   */
  minFreeSpace?: number;
  /**
   * How free space is measured: bytes available to this process on the file system of `dir`
   * (the export directory). Replace it to test or to measure a quota of your own.
   * @default `fs.promises.statfs(dir)`: `bavail * bsize`
   */
  freeSpaceProbe?: (dir: string) => number | Promise<number>;
  /**
   * Running (accepted or in-progress) exports allowed per project; one more answers 429.
   * @default 2
   */
  maxRunningExports?: number;
  /**
   * Milliseconds a finished export (files and job record) is kept after completion.
   * @default 21600000 (6 hours)
   */
  retention?: number;
  /**
   * Milliseconds between two looks for expired exports.
   * @default 60000
   */
  cleanupInterval?: number;
  /**
   * `Retry-After` (seconds) of a 202 status answer and of a 429 kick-off answer.
   * @default 1
   */
  retryAfter?: number;
  /**
   * Milliseconds `close()` lets running exports go on to their end; those still running then are
   * stopped, stay in progress and resume at the next start (with a shared queue, their leases are
   * released for another instance to take over at once). `0` stops them at once.
   * @default 0 (`fhirPlatform`: 10000, so that a shutdown finishes what it can within that)
   */
  closeTimeout?: number;
  /**
   * The worker pool: an `ExportPool` shared with other routers (not closed by this router), or
   * options of a pool this router owns.
   * @default a pool of its own with default options
   */
  pool?: ExportPool | ExportPoolOptions;
  /**
   * Most resources one chain or `_has` of a `_typeFilter` may match (`subject:Patient.name=Smith`:
   * the Patients named Smith): chains are resolved at kick-off into the references they stand for,
   * kept with the job, so a larger set answers 400 `too-costly`. `Infinity` disables it.
   * @default 50000
   */
  maxTypeFilterMatches?: number;
  /**
   * Refuse (`400`) a kick-off without an `Accept` header or without `Prefer: respond-async`, which
   * Bulk Data 2.0.0 requires of clients. Off by default: the IG lets a server accept such requests,
   * and common clients send neither.
   * @default false
   */
  requireAsyncHeaders?: boolean;
  /**
   * `$import` (ping-and-pull, docs/bulk-import.md) and its limits; `false` answers 404 to it.
   * @default `{}` (enabled, the defaults of {@link BulkImportOptions})
   */
  import?: BulkImportOptions | false;
}

/** Bytes available to this process on the file system holding `dir`. */
async function statfsFreeSpace(dir: string): Promise<number> {
  const stats = await statfs(dir);
  return stats.bavail * stats.bsize;
}

const HOUR = 60 * 60 * 1000;
const GIB = 1024 * 1024 * 1024;
const OWNER = 'bulkExportRouter';
/**
 * Far above what a chain of an ordinary filter matches (Bulk Data clients such as bdt and
 * bulk-data-client send plain filters), low enough that the job record stays a few MB.
 */
export const DEFAULT_MAX_TYPE_FILTER_MATCHES = 50_000;

const BULK_ROUTER_KEYS: OwnOptionKeys<BulkExportRouterOptions> = {
  exportDir: true,
  maxFileSize: true,
  maxExportSize: true,
  maxProjectExportSize: true,
  maxKickoffsPerHour: true,
  minFreeSpace: true,
  freeSpaceProbe: true,
  maxRunningExports: true,
  retention: true,
  cleanupInterval: true,
  retryAfter: true,
  pool: true,
  requireAsyncHeaders: true,
  exportFiles: true,
  leaseDuration: true,
  heartbeatInterval: true,
  closeTimeout: true,
  maxTypeFilterMatches: true,
  import: true,
};

/** Options with every default filled in. */
export interface ResolvedBulkExportRouterOptions
  extends
    Required<Omit<BulkExportRouterOptions, 'baseUrl' | 'pool' | 'logger' | 'auditTrail' | 'import'>>,
    Pick<BulkExportRouterOptions, 'baseUrl' | 'pool' | 'logger' | 'auditTrail'> {
  import: ResolvedBulkImportOptions | false;
}

/** An `exportFiles` option: an object with the store's methods. */
function exportFilesOption(value: ExportFileStore | undefined, fallback: ExportFileStore): ExportFileStore {
  if (value === undefined) return fallback;
  const store: unknown = value;
  const methods = ['sink', 'size', 'read', 'bytes', 'remove', 'close'];
  const has = (m: string): boolean => typeof (store as Record<string, unknown>)[m] === 'function';
  if (typeof store !== 'object' || store === null || !methods.every(has)) {
    optionError(
      OWNER,
      'exportFiles',
      'exportFiles must be an ExportFileStore (e.g. new DirectoryExportFiles(dir))',
    );
  }
  return value;
}

/** Fills in defaults and fails fast on bad options. */
export function resolveBulkExportRouterOptions(
  options: BulkExportRouterOptions,
): ResolvedBulkExportRouterOptions {
  const { onError } = checkRouterOptions(OWNER, options, BULK_ROUTER_KEYS, { authenticate: true });
  const retryAfter = positiveNumber(OWNER, 'retryAfter', options.retryAfter, 1);
  const maxRunningExports = positiveNumber(OWNER, 'maxRunningExports', options.maxRunningExports, 2);
  const maxProjectExportSize = positiveLimit(
    OWNER,
    'maxProjectExportSize',
    options.maxProjectExportSize,
    GIB,
  );
  const maxKickoffsPerHour = positiveLimit(OWNER, 'maxKickoffsPerHour', options.maxKickoffsPerHour, 1000);
  const minFreeSpace = nonNegativeNumber(OWNER, 'minFreeSpace', options.minFreeSpace ?? GIB, GIB);
  const freeSpaceProbe = optionalFunction(OWNER, 'freeSpaceProbe', options.freeSpaceProbe, statfsFreeSpace);
  const exportDir = path.resolve(options.exportDir ?? path.join(os.tmpdir(), 'fhir-platform-kit-exports'));
  const retention = positiveNumber(OWNER, 'retention', options.retention, 6 * HOUR);
  const cleanupInterval = positiveNumber(OWNER, 'cleanupInterval', options.cleanupInterval, 60_000);
  const maxFileSize = positiveNumber(OWNER, 'maxFileSize', options.maxFileSize, 64 * 1024 * 1024);
  const maxExportSize = positiveLimit(OWNER, 'maxExportSize', options.maxExportSize, 4 * GIB);
  const maxTypeFilterMatches = positiveLimit(
    OWNER,
    'maxTypeFilterMatches',
    options.maxTypeFilterMatches,
    DEFAULT_MAX_TYPE_FILTER_MATCHES,
  );
  const exportFiles = exportFilesOption(
    options.exportFiles,
    options.storage?.exportFiles ?? new DirectoryExportFiles(exportDir),
  );
  const leaseDuration = positiveNumber(OWNER, 'leaseDuration', options.leaseDuration, 30_000);
  const heartbeatInterval = positiveNumber(OWNER, 'heartbeatInterval', options.heartbeatInterval, 10_000);
  if (heartbeatInterval >= leaseDuration) {
    optionError(OWNER, 'heartbeatInterval', 'heartbeatInterval must be less than leaseDuration');
  }
  const closeTimeout = nonNegativeNumber(OWNER, 'closeTimeout', options.closeTimeout, 0);
  const requireAsyncHeaders = booleanOption(
    OWNER,
    'requireAsyncHeaders',
    options.requireAsyncHeaders ?? false,
    false,
  );
  return {
    ...options,
    onError,
    retryAfter,
    maxRunningExports,
    maxProjectExportSize,
    maxKickoffsPerHour,
    minFreeSpace,
    freeSpaceProbe,
    exportDir,
    exportFiles,
    leaseDuration,
    heartbeatInterval,
    retention,
    cleanupInterval,
    maxFileSize,
    maxExportSize,
    maxTypeFilterMatches,
    requireAsyncHeaders,
    closeTimeout,
    import: resolveBulkImportOptions(options.import),
  };
}
