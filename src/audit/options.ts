import type { OptionKeys } from '../common/option-keys.js';
import {
  booleanOption,
  optionError,
  optionalFunction,
  positiveInteger,
  positiveNumber,
} from '../common/options.js';
import type { AuditEventResource } from './build-event.js';
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
  onError: (error: unknown) => void;
}

function logError(error: unknown): void {
  console.error('fhir-platform-kit audit trail:', error);
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
    onError: optionalFunction(owner, 'audit.onError', o.onError, logError),
  };
}
