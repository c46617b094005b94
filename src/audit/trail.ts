import { randomUUID } from 'node:crypto';
import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';
import { requireStorage } from '../storage/storage-shape.js';
import { idFilter, lastUpdatedFilters, typeSearch } from '../storage/search-request.js';
import type { ResourceWrite, Storage } from '../storage/types.js';
import { boundRefusal } from './bound-refusal.js';
import type { AuditEventResource } from './audit-event-resource.js';
import { buildAuditEvent } from './build-event.js';
import type { AuditRecord } from './events.js';
import { AuditJournal, type JournalEntry } from './journal.js';
import { AUDIT_OPTION_KEYS, resolveAuditOptions, type AuditConfig, type AuditOptions } from './options.js';
import { isRefusal, RefusalCounter } from './refusal-counter.js';

/**
 * The project id under which events that belong to no project are stored (super-admin actions,
 * failed authentications that name no project): the platform-level log. It is not a project
 * (no project record has it, `Project/$init` ids are UUIDs), so no principal ever acts in it;
 * the host reads it through `storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent', …)`.
 */
export const PLATFORM_AUDIT_PROJECT_ID = '_platform';

const DAY_MS = 86_400_000;
const SWEEP_INTERVAL_MS = 3_600_000;
const FIRST_SWEEP_DELAY_MS = 60_000;

/** Options of {@link createAuditTrail}. */
export interface AuditTrailOptions extends AuditOptions {
  /** Where events are stored, as `AuditEvent` resources of their project. */
  storage: Storage;
}

const AUDIT_TRAIL_KEYS: OptionKeys<AuditTrailOptions> = { ...AUDIT_OPTION_KEYS, storage: true };

/** The audit trail: see {@link createAuditTrail}. */
export interface AuditTrail {
  /** False when created with `enabled: false`: `record` does nothing. */
  readonly enabled: boolean;
  /**
   * Records one event: builds its `AuditEvent`, appends it to the journal (one `write()`), queues
   * it for the next batch and calls `onAudit`. Synchronous and cheap: call it before answering
   * the request. Answers the event (undefined when disabled), shared with the trail until it is
   * stored: treat it as read-only. Never throws for a failure of the store or of `onAudit` (they
   * go to `onError`); throws when the journal cannot be written or after `close()`, so that a
   * request is never acknowledged without its event.
   *
   * A refusal (`refused`, a refused `token`) keeps at most `maxUrlLength` characters of the
   * request text, and is counted rather than recorded when its source had one already in the
   * current `refusalWindowMs` window (answers undefined then): the window's count is recorded
   * when it ends, or at `close()`.
   */
  record(record: AuditRecord): AuditEventResource | undefined;
  /** Writes every queued event to the store now; resolves when they are stored. */
  flush(): Promise<void>;
  /**
   * Removes events older than `retentionDays` before `at` from every project and the platform log
   * (what the internal sweep runs). Answers how many were removed; 0 without `retentionDays`.
   */
  sweep(at?: Date): Promise<number>;
  /**
   * Records the count of refusals of every open window, stops the timers, writes what is queued
   * and releases the journal.
   */
  close(): Promise<void>;
}

interface Pending extends JournalEntry {
  /** The store may hold it already (replayed from the journal, or in a batch whose write failed). */
  maybeStored: boolean;
}

/**
 * Creates the audit trail: events are recorded synchronously (journal + queue) and written to the
 * store in batches off the request path, every `flushIntervalMs` or as soon as `batchSize` are
 * queued, with one `writeResources` per project and batch. Events of a project are `AuditEvent`
 * resources of that project; events with no project go to {@link PLATFORM_AUDIT_PROJECT_ID}.
 * With `journalDir`, events left in the journal by a process that died are written on start
 * (those already stored are recognised by id and skipped). See docs/audit.md.
 */
export function createAuditTrail(options: AuditTrailOptions): AuditTrail {
  requireStorage('createAuditTrail', options);
  checkOptionKeys('createAuditTrail', options, AUDIT_TRAIL_KEYS);
  const config = resolveAuditOptions('createAuditTrail', options);
  if (!config.enabled) return disabledTrail();
  return new BatchedAuditTrail(options.storage, config);
}

function disabledTrail(): AuditTrail {
  return {
    enabled: false,
    record: () => undefined,
    flush: () => Promise.resolve(),
    sweep: () => Promise.resolve(0),
    close: () => Promise.resolve(),
  };
}

class BatchedAuditTrail implements AuditTrail {
  readonly enabled = true;
  private readonly journal: AuditJournal | undefined;
  private queue: Pending[] = [];
  /** Sealed journal segments whose events are queued or being written. */
  private segments: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The pending timer is a zero-delay one (a full batch): nothing sooner to schedule. */
  private timerImmediate = false;
  private readonly sweepTimers: NodeJS.Timeout[] = [];
  private chain: Promise<void> = Promise.resolve();
  private closed = false;
  /** Undefined with `refusalWindowMs: 0`: every refusal is recorded. */
  private readonly refusals: RefusalCounter | undefined;

  constructor(
    private readonly storage: Storage,
    private readonly config: AuditConfig,
  ) {
    if (config.journalDir !== undefined) {
      this.journal = new AuditJournal(config.journalDir);
      if (this.journal.damagedLines > 0) {
        config.onError(new Error(`${this.journal.damagedLines} unreadable line(s) in the audit journal`));
      }
      for (const entry of this.journal.recovered) this.queue.push({ ...entry, maybeStored: true });
      this.segments.push(...this.journal.recoveredSegments);
      if (this.queue.length > 0 || this.segments.length > 0) this.schedule(0);
    }
    if (config.retentionDays !== undefined) {
      const sweep = () => {
        this.sweep().catch(config.onError);
      };
      this.sweepTimers.push(setInterval(sweep, SWEEP_INTERVAL_MS), setTimeout(sweep, FIRST_SWEEP_DELAY_MS));
      for (const timer of this.sweepTimers) timer.unref();
    }
    if (config.refusalWindowMs > 0) {
      this.refusals = new RefusalCounter({
        windowMs: config.refusalWindowMs,
        maxSources: config.maxRefusalSources,
        record: (count) => {
          try {
            this.append(count);
          } catch (error) {
            config.onError(error);
          }
        },
      });
    }
  }

  record(record: AuditRecord): AuditEventResource | undefined {
    if (this.closed) throw new Error('The audit trail is closed');
    const bounded = boundRefusal(record, this.config.maxUrlLength);
    if (this.refusals && isRefusal(bounded) && !this.refusals.admit(bounded)) return undefined;
    return this.append(bounded);
  }

  /** Builds, journals and queues one event (`record` after its checks; a window's count). */
  private append(record: AuditRecord): AuditEventResource {
    const event = buildAuditEvent(record, { sourceName: this.config.sourceName, id: randomUUID() });
    const entry: Pending = {
      projectId: record.projectId,
      event: event as AuditEventResource & { id: string },
      maybeStored: false,
    };
    this.journal?.append(entry);
    this.queue.push(entry);
    if (this.config.onAudit) {
      try {
        const result = this.config.onAudit(event, { projectId: record.projectId, record });
        if (result && typeof result.then === 'function') result.then(undefined, this.config.onError);
      } catch (error) {
        this.config.onError(error);
      }
    }
    this.schedule(this.queue.length >= this.config.batchSize ? 0 : this.config.flushIntervalMs);
    return event;
  }

  private schedule(delay: number): void {
    if (this.timer !== undefined) {
      if (delay > 0 || this.timerImmediate) return;
      clearTimeout(this.timer);
    }
    this.timerImmediate = delay === 0;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush().catch(this.config.onError);
    }, delay);
    this.timer.unref();
  }

  flush(): Promise<void> {
    const run = this.chain.then(() => this.drain());
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** Writes everything queued; on failure keeps it queued (and its segments) for the next try. */
  private async drain(): Promise<void> {
    const sealed = this.journal?.rotate();
    if (sealed !== undefined) this.segments.push(sealed);
    const batch = this.queue;
    const segments = this.segments;
    if (batch.length === 0 && segments.length === 0) return;
    this.queue = [];
    this.segments = [];
    try {
      const byProject = new Map<string, Pending[]>();
      for (const entry of batch) {
        const projectId = entry.projectId ?? PLATFORM_AUDIT_PROJECT_ID;
        let list = byProject.get(projectId);
        if (!list) byProject.set(projectId, (list = []));
        list.push(entry);
      }
      for (const [projectId, entries] of byProject) {
        for (let i = 0; i < entries.length; i += this.config.batchSize) {
          await this.writeChunk(projectId, entries.slice(i, i + this.config.batchSize));
        }
      }
      this.journal?.remove(segments);
    } catch (error) {
      for (const entry of batch) entry.maybeStored = true;
      this.queue = [...batch, ...this.queue];
      this.segments = [...segments, ...this.segments];
      if (!this.closed) this.schedule(Math.max(this.config.flushIntervalMs, 1000));
      throw error;
    }
  }

  private async writeChunk(projectId: string, entries: Pending[]): Promise<void> {
    let todo = entries;
    const uncertain = entries.filter((e) => e.maybeStored).map((e) => e.event.id);
    if (uncertain.length > 0) {
      const found = await this.storage.searchResources(projectId, 'AuditEvent', {
        search: typeSearch('AuditEvent', [idFilter(uncertain)]),
        count: uncertain.length,
        total: 'none',
      });
      const stored = new Set(found.resources.map((r) => r.id));
      todo = entries.filter((e) => !stored.has(e.event.id));
    }
    if (todo.length === 0) return;
    const writes: ResourceWrite[] = todo.map((e) => ({ op: 'create', resource: e.event }));
    await this.storage.writeResources(projectId, writes);
  }

  async sweep(at: Date = new Date()): Promise<number> {
    const days = this.config.retentionDays;
    if (days === undefined) return 0;
    const cutoff = at.getTime() - days * DAY_MS;
    const projects = [...(await this.storage.listProjects()).map((p) => p.id), PLATFORM_AUDIT_PROJECT_ID];
    let removed = 0;
    for (const projectId of projects) {
      for (;;) {
        // The store's time narrows through its index; an event is due when both times are old.
        const page = await this.storage.searchResources(projectId, 'AuditEvent', {
          search: typeSearch('AuditEvent', lastUpdatedFilters({ lt: cutoff })),
          where: (r) => typeof r.recorded === 'string' && Date.parse(r.recorded) < cutoff,
          count: this.config.batchSize,
          total: 'none',
        });
        if (page.resources.length === 0) break;
        await this.storage.writeResources(
          projectId,
          page.resources.map((r) => ({ op: 'delete', resourceType: 'AuditEvent', id: r.id })),
        );
        removed += page.resources.length;
      }
    }
    return removed;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.refusals?.close(); // their counts join the queue written below
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    for (const timer of this.sweepTimers) clearTimeout(timer);
    let drained = true;
    try {
      await this.flush();
    } catch (error) {
      drained = false;
      this.config.onError(error);
    }
    this.journal?.close(drained && this.queue.length === 0);
  }
}
