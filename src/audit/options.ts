import type { OptionKeys } from '../common/option-keys.js';
import {
  booleanOption,
  optionError,
  optionalFunction,
  positiveInteger,
  positiveNumber,
} from '../common/options.js';
import type { AuditEventResource } from './audit-event-resource.js';
import type { AuditRecord } from './events.js';

/** What `onAudit` receives next to each event. */
export interface AuditContext {
  /** The event's project; `null` for the platform-level log. */
  projectId: string | null;
  /** The description the event was built from. */
  record: AuditRecord;
}

/**
 * The audit trail's options (the `audit` option of the platform). See docs/audit.md.
 */
export interface AuditOptions {
  /**
   * Record events at all. With `false` the trail records nothing, calls no `onAudit` and writes
   * nothing.
   * @default true
   */
  enabled?: boolean;
  /**
   * Receives every event as it is recorded (to ship it to a SIEM). Called synchronously, with the
   * object the trail stores: read it, copy it, never change it. A throw or a rejected promise goes
   * to `onError` and never breaks the request.
   * @default undefined
   */
  onAudit?: (event: AuditEventResource, context: AuditContext) => void | Promise<void>;
  /**
   * Events older than this many days (both `recorded` and the time they were stored,
   * `meta.lastUpdated`) are removed by an internal sweep (hourly, and once a minute after start),
   * never through an API. Absent: events are kept forever.
   * @default undefined
   */
  retentionDays?: number;
  /** `AuditEvent.source.site` and `source.observer.display`. @default 'fhir-platform-kit' */
  sourceName?: string;
  /**
   * A directory the trail owns (one process at a time: it holds a lock file there) for its
   * journal: every event is appended there with one `write()` before `record` returns, so an
   * acknowledged request's event survives the process being killed; events not yet in the store
   * are replayed from it on the next start. Without it, events reach the store only at the next
   * batch (up to `flushIntervalMs` later) and a crash loses the batch in memory.
   * @default undefined
   */
  journalDir?: string;
  /**
   * Longest time an event waits in memory before its batch is written to the store. With a
   * journal the event is durable at once, so batches can be larger and fewer: each store write
   * (a group commit, indexes, an fsync on the file store) then delays fewer of the requests that
   * arrive meanwhile; the cost is that an event shows in searches up to this long after it happened.
   * @default 1000 with `journalDir`, else 100
   */
  flushIntervalMs?: number;
  /** Most events per storage write; a full batch is written at once. @default 500 */
  batchSize?: number;
  /**
   * Longest request text, in characters, that the event of a refusal keeps: the path with its
   * query of a refused request (401/403/404), the client id and the scope a refused token request
   * claimed. Longer ones are cut, and the event says so (`truncated` detail: the full length),
   * so that an anonymous caller cannot make each event as large as its request line.
   * @default 1024
   */
  maxUrlLength?: number;
  /**
   * Refusals (refused requests, refused token requests) are counted per source (address, project,
   * refusal and status or OAuth error, client) in windows of this many milliseconds: the first
   * refusal of a window is recorded at once, the others are counted, and their count is recorded
   * as one event (`count` detail, `period`) when the window ends, or at `close()`. A flood of
   * refusals from one address is then two events a window, its count exact. `0` records every
   * refusal on its own.
   * @default 60000
   */
  refusalWindowMs?: number;
  /**
   * Most sources counted apart in a window (a few hundred bytes each). Refusals of further
   * sources are counted together, one count per kind of refusal and status, recorded in the
   * platform log without address: the memory a flood from many addresses can take is bounded.
   * @default 1000
   */
  maxRefusalSources?: number;
  /**
   * Receives failures that must not break a request: a storage write that failed (the batch is
   * kept and retried), an `onAudit` that threw, unreadable journal lines.
   * @default logs with console.error
   */
  onError?: (error: unknown) => void;
}

/** Every key of {@link AuditOptions}: what `checkOptionKeys` accepts in the `audit` option. */
export const AUDIT_OPTION_KEYS: OptionKeys<AuditOptions> = {
  enabled: true,
  onAudit: true,
  retentionDays: true,
  sourceName: true,
  journalDir: true,
  flushIntervalMs: true,
  batchSize: true,
  maxUrlLength: true,
  refusalWindowMs: true,
  maxRefusalSources: true,
  onError: true,
};

/** {@link AuditOptions} resolved once, every field filled. */
export interface AuditConfig {
  enabled: boolean;
  onAudit: AuditOptions['onAudit'];
  retentionDays: number | undefined;
  sourceName: string;
  journalDir: string | undefined;
  flushIntervalMs: number;
  batchSize: number;
  maxUrlLength: number;
  /** 0: refusals are not counted together. */
  refusalWindowMs: number;
  maxRefusalSources: number;
  onError: (error: unknown) => void;
}

function logError(error: unknown): void {
  console.error('fhir-platform-kit audit trail:', error);
}

/** `refusalWindowMs`: 0 (off) or a whole number of milliseconds up to an hour. */
function refusalWindow(owner: string, value: number | undefined): number {
  if (value === undefined) return 60_000;
  if (!Number.isInteger(value) || value < 0 || value > 3_600_000)
    optionError(owner, 'audit.refusalWindowMs', 'audit.refusalWindowMs must be an integer from 0 to 3600000');
  return value;
}

/** Checks the `audit` options (owner: the factory that takes them). */
export function resolveAuditOptions(owner: string, options: AuditOptions | undefined): AuditConfig {
  const o = options ?? {};
  if (typeof o !== 'object') optionError(owner, 'audit', 'audit must be an object');
  if (o.sourceName !== undefined && (typeof o.sourceName !== 'string' || o.sourceName.trim() === ''))
    optionError(owner, 'audit.sourceName', 'audit.sourceName must be a non-empty string');
  if (o.journalDir !== undefined && (typeof o.journalDir !== 'string' || o.journalDir === ''))
    optionError(owner, 'audit.journalDir', 'audit.journalDir must be a non-empty string');
  return {
    enabled: booleanOption(owner, 'audit.enabled', o.enabled, true),
    onAudit: optionalFunction(owner, 'audit.onAudit', o.onAudit, undefined),
    retentionDays:
      o.retentionDays === undefined
        ? undefined
        : positiveNumber(owner, 'audit.retentionDays', o.retentionDays),
    sourceName: o.sourceName ?? 'fhir-platform-kit',
    journalDir: o.journalDir,
    flushIntervalMs: positiveInteger(
      owner,
      'audit.flushIntervalMs',
      o.flushIntervalMs,
      o.journalDir === undefined ? 100 : 1000,
      60_000,
    ),
    batchSize: positiveInteger(owner, 'audit.batchSize', o.batchSize, 500, 10_000),
    maxUrlLength: positiveInteger(owner, 'audit.maxUrlLength', o.maxUrlLength, 1024, 65_536),
    refusalWindowMs: refusalWindow(owner, o.refusalWindowMs),
    maxRefusalSources: positiveInteger(
      owner,
      'audit.maxRefusalSources',
      o.maxRefusalSources,
      1000,
      1_000_000,
    ),
    onError: optionalFunction(owner, 'audit.onError', o.onError, logError),
  };
}
