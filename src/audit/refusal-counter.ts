import type { AuditRecord, RefusedEvent, RepeatedRefusals, TokenEvent } from './events.js';

/** What the counter counts: refused requests and refused token requests. */
export type RefusalRecord = RefusedEvent | TokenEvent;

/** A refusal not yet counted (one that carries `repeated` already is a count: recorded as it is). */
export function isRefusal(record: AuditRecord): record is RefusalRecord {
  if (record.kind !== 'refused' && (record.kind !== 'token' || record.result !== 'refused')) return false;
  return record.repeated === undefined;
}

/** Options of {@link RefusalCounter}. */
export interface RefusalCounterOptions {
  /** Length of a source's window, milliseconds (> 0). */
  windowMs: number;
  /** Most sources counted apart at once; further ones share one window per kind and status. */
  maxSources: number;
  /** Records a window's count (called from a timer, or from `close()`). */
  record: (record: AuditRecord) => void;
}

interface Window {
  /** When it ends (epoch ms). */
  end: number;
  /** Refusals of the sources over `maxSources`: counted together, in the platform log. */
  overflow: boolean;
  /** Refusals counted (not the first of a source's window: that one was recorded at once). */
  count: number;
  /** The first refusal counted: what the count's event describes. */
  held?: RefusalRecord;
  first?: Date;
  last?: Date;
}

/** Who refused what: one source per address, project, kind of refusal, status or error, and client. */
function sourceKey(refusal: RefusalRecord): string {
  const outcome = refusal.kind === 'refused' ? String(refusal.status) : (refusal.error ?? '');
  // The client id an unknown caller claims is its own choice: not what tells a source apart.
  const client =
    refusal.projectId === null && refusal.actor.kind === 'anonymous' ? '' : (refusal.actor.id ?? '');
  return JSON.stringify([
    refusal.kind,
    outcome,
    refusal.address ?? '',
    refusal.projectId ?? '',
    refusal.actor.kind,
    client,
  ]);
}

function overflowKey(refusal: RefusalRecord): string {
  return JSON.stringify([refusal.kind, refusal.kind === 'refused' ? refusal.status : (refusal.error ?? '')]);
}

/** A refusal counted over `maxSources`: no project, caller or address (they are many). */
function anonymised(refusal: RefusalRecord): RefusalRecord {
  const { address: _address, ...rest } = refusal;
  return { ...rest, projectId: null, actor: { kind: 'anonymous', name: 'callers over maxRefusalSources' } };
}

/**
 * Counts refusals per source in windows of `windowMs`, so that a flood of them is a few events
 * rather than one per request: `admit` answers true for the first refusal of a source's window
 * (the trail records it at once) and counts the others; when the window ends the count is
 * recorded as one event that describes the first refusal counted, with `repeated` (the count, the
 * first and last times). At most `maxSources` sources are counted apart; the refusals of further
 * ones are counted together per kind and status. One timer (unref'ed) for every window; `close()`
 * records every open window's count. Its state is the trail's own: two trails never share it.
 */
export class RefusalCounter {
  private readonly sources = new Map<string, Window>();
  private readonly overflow = new Map<string, Window>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: RefusalCounterOptions) {}

  /** True: record `refusal` now (the first of its source's window); false: it was counted. */
  admit(refusal: RefusalRecord): boolean {
    const now = Date.now();
    const key = sourceKey(refusal);
    let window = this.sources.get(key);
    if (window === undefined) {
      if (this.sources.size < this.options.maxSources) {
        this.sources.set(key, { end: now + this.options.windowMs, overflow: false, count: 0 });
        this.schedule();
        return true;
      }
      const bucket = overflowKey(refusal);
      window = this.overflow.get(bucket);
      if (window === undefined) {
        window = { end: now + this.options.windowMs, overflow: true, count: 0 };
        this.overflow.set(bucket, window);
        this.schedule();
      }
    }
    const at = refusal.recorded ?? new Date(now);
    window.count += 1;
    window.held ??= refusal;
    window.first ??= at;
    window.last = at;
    return false;
  }

  /** Records the count of every open window now and stops the timer. */
  close(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.closeWindows(Infinity);
  }

  private schedule(): void {
    if (this.timer !== undefined) return;
    // Every window lasts windowMs, so the first of each map (insertion order) ends first.
    const ends = [this.sources, this.overflow].flatMap((map) => {
      const first = map.values().next();
      return first.done ? [] : [first.value.end];
    });
    if (ends.length === 0) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.closeWindows(Date.now());
        this.schedule();
      },
      Math.max(0, Math.min(...ends) - Date.now()),
    );
    this.timer.unref();
  }

  private closeWindows(now: number): void {
    for (const map of [this.sources, this.overflow]) {
      for (const [key, window] of map) {
        if (window.end > now) break;
        map.delete(key);
        this.recordCount(window);
      }
    }
  }

  private recordCount(window: Window): void {
    const { held, first, last, count } = window;
    if (held === undefined || first === undefined || last === undefined) return;
    // One refusal counted: recorded as it came, late.
    if (count === 1 && !window.overflow) {
      this.options.record({ ...held, recorded: first });
      return;
    }
    const repeated: RepeatedRefusals = { count, first, last, ...(window.overflow ? { overflow: true } : {}) };
    const { recorded: _recorded, ...described } = window.overflow ? anonymised(held) : held;
    this.options.record({ ...described, repeated });
  }
}
