import { mkdir } from 'node:fs/promises';
import { FhirError } from '../http/http-error.js';

/** Options of {@link KickoffLimits}, resolved (see `BulkExportRouterOptions`). */
export interface KickoffLimitOptions {
  /** Root directory of the export files. */
  exportDir: string;
  /** Running exports allowed per project. */
  maxRunning: number;
  /** Kick-offs a project may make in any 60-minute window (`Infinity`: no limit). */
  maxKickoffs: number;
  /** Bytes of export files a project may keep (`Infinity`: no limit). */
  maxProjectBytes: number;
  /** Free bytes the export directory's file system must have; `0` disables the check. */
  minFreeSpace: number;
  /** Bytes available on the file system of `dir`. */
  freeSpaceProbe: (dir: string) => number | Promise<number>;
  /** How long a finished export is kept, ms. */
  retention: number;
  /** Milliseconds between two looks for expired exports. */
  cleanupInterval: number;
  /** `Retry-After` (whole seconds) of a 429 for too many running exports. */
  retryAfter: string;
  /** Receives the failures of the free space probe. */
  onError: (error: unknown) => void;
}

/** What a project's export jobs hold, for the kick-off limits. */
export interface ExportUsage {
  /** Jobs accepted or in progress. */
  running: number;
  /**
   * Bytes of the project's export files: completed jobs not yet expired, plus what running jobs
   * have written so far (failed and cancelled jobs have none).
   */
  bytes: number;
  /** Epoch ms of the earliest expiry among the completed jobs counted in `bytes`. */
  nextExpiry?: number;
  /** Creation times (epoch ms, ascending) of the project's jobs created at or after `since`. */
  createdSince: number[];
}

const HOUR = 60 * 60 * 1000;

/** Whole seconds until `at` (epoch ms), at least 1. */
function secondsUntil(at: number, now: number): string {
  return String(Math.max(1, Math.ceil((at - now) / 1000)));
}

/**
 * The limits a kick-off must pass (Bulk Data "Kick-off request": a server may answer 429 with
 * `Retry-After`): free disk space, running exports, kick-offs per hour and bytes kept per project.
 * Framework-free; refusals are `FhirError`s carrying their `Retry-After`.
 */
export class KickoffLimits {
  readonly #o: KickoffLimitOptions;
  /** Kick-offs accepted here per project (epoch ms, ascending), over the last hour. */
  readonly #recentKickoffs = new Map<string, number[]>();

  constructor(options: KickoffLimitOptions) {
    this.#o = options;
  }

  /** Refuses a kick-off (503) while the export directory's file system is short of space. */
  async checkFreeSpace(): Promise<void> {
    const { exportDir, minFreeSpace, freeSpaceProbe, cleanupInterval, onError } = this.#o;
    if (minFreeSpace === 0) return;
    let free: number;
    try {
      await mkdir(exportDir, { recursive: true });
      free = await freeSpaceProbe(exportDir);
    } catch (error) {
      // Unknown free space (statfs unsupported, …) does not block exports.
      onError(error);
      return;
    }
    if (free < minFreeSpace) {
      throw new FhirError(503, 'transient', 'Not enough free disk space for exports; retry later', {
        headers: { 'Retry-After': String(Math.ceil(cleanupInterval / 1000)) },
      });
    }
  }

  /**
   * The kick-off limits of a project, checked in order; throws the 429 of the first reached.
   * `usageOf` reads what the project's jobs hold (counting those created at or after `since`).
   */
  async check(projectId: string, usageOf: (since: number) => Promise<ExportUsage>): Promise<void> {
    const { maxRunning, maxKickoffs, maxProjectBytes, retention, cleanupInterval, retryAfter } = this.#o;
    const now = Date.now();
    const usage = await usageOf(now - HOUR);
    if (usage.running >= maxRunning) {
      throw new FhirError(429, 'throttled', 'Too many exports are running for this project; retry later', {
        headers: { 'Retry-After': retryAfter },
      });
    }
    // Accepted kick-offs are counted here (they stay counted when cancelled and deleted) and in
    // storage (jobs created by other processes).
    let until: number | undefined;
    for (const times of [this.#kickoffsSince(projectId, now - HOUR), usage.createdSince]) {
      if (times.length < maxKickoffs) continue;
      const leaves = (times[times.length - maxKickoffs] ?? now) + HOUR;
      until = Math.max(until ?? 0, leaves);
    }
    if (until !== undefined) {
      throw new FhirError(429, 'throttled', 'Too many export kick-offs for this project in the last hour', {
        headers: { 'Retry-After': secondsUntil(until, now) },
      });
    }
    if (usage.bytes >= maxProjectBytes) {
      // Running exports finish, then expire after `retention`.
      const frees = usage.nextExpiry ?? now + retention;
      throw new FhirError(
        429,
        'too-costly',
        'The export files of this project exceed its quota; delete finished exports or retry later',
        { headers: { 'Retry-After': secondsUntil(frees + cleanupInterval, now) } },
      );
    }
  }

  /** Counts an accepted kick-off of the project. */
  record(projectId: string): void {
    this.#recentKickoffs.set(projectId, [...this.#kickoffsSince(projectId, Date.now() - HOUR), Date.now()]);
  }

  #kickoffsSince(projectId: string, since: number): number[] {
    const times = (this.#recentKickoffs.get(projectId) ?? []).filter((t) => t >= since);
    if (times.length > 0) this.#recentKickoffs.set(projectId, times);
    else this.#recentKickoffs.delete(projectId);
    return times;
  }
}
