/**
 * The in-memory counters of one failure limiter (failure-limiter.ts): failures per address, and
 * per client id and address, each in a window that starts at its first failure, with the attempts
 * that hold a place in them while they are checked. Idle counters are dropped when their attempts
 * end, and expired ones swept now and then, so the maps hold only callers seen recently.
 */
import type { FailureCount } from '../../storage/types.js';

/** One counter: the failures of its window, and the attempts holding a place in it. */
export interface Counter {
  failures: number;
  /** When `failures` goes back to 0 (epoch ms); meaningful while failures > 0. */
  resetAt: number;
  /** Attempts admitted and not ended. */
  pending: number;
  /** Attempts waiting for a pending one to end. */
  waiters: (() => void)[];
}

/** A counter taken for one attempt: where it is kept, under which key, and its limit. */
export interface HeldCounter {
  map: Map<string, Counter>;
  key: string;
  max: number;
  counter: Counter;
}

/** The limits the counters enforce. */
export interface CounterLimits {
  maxFailuresPerAddress: number;
  maxFailuresPerClientAddress: number;
  windowMs: number;
}

// Expired counters are swept every this many new counters.
const SWEEP_EVERY = 1024;

function idle(counter: Counter, time: number): boolean {
  return (
    counter.pending === 0 &&
    counter.waiters.length === 0 &&
    (counter.failures === 0 || counter.resetAt <= time)
  );
}

/** Milliseconds until `held` admits again; 0 when it is under its limit. */
export function blockedMs(held: HeldCounter, time: number): number {
  return held.counter.failures >= held.max ? held.counter.resetAt - time : 0;
}

/**
 * Takes the shared counts when they are ahead of this process's (they hold every instance's
 * failures; this process's own may be ahead for a moment, while they are being written).
 */
export function adoptSharedCounts(
  held: HeldCounter[],
  counts: (FailureCount | undefined)[],
  time: number,
): void {
  held.forEach((h, i) => {
    const count = counts[i];
    if (count && count.failures > h.counter.failures) {
      h.counter.failures = count.failures;
      h.counter.resetAt = time + count.msLeft;
    }
  });
}

/** The counters of one limiter. */
export class FailureCounters {
  private readonly byAddress = new Map<string, Counter>();
  private readonly byClientAddress = new Map<string, Counter>();
  private created = 0;

  constructor(private readonly limits: CounterLimits) {}

  /** The counters of `address` (and of `clientId` from it), created when missing. */
  hold(address: string, clientId: string | undefined, time: number): HeldCounter[] {
    // Sweep before taking counters, so a sweep never drops one this call holds.
    if (this.created >= SWEEP_EVERY) {
      this.created = 0;
      this.sweep(time);
    }
    const { byAddress, byClientAddress, limits } = this;
    const held: HeldCounter[] = [
      {
        map: byAddress,
        key: address,
        max: limits.maxFailuresPerAddress,
        counter: this.counter(byAddress, address, time),
      },
    ];
    if (clientId !== undefined) {
      // An address never contains a line break, so this key is unambiguous.
      const key = `${address}\n${clientId}`;
      const counter = this.counter(byClientAddress, key, time);
      held.push({ map: byClientAddress, key, max: limits.maxFailuresPerClientAddress, counter });
    }
    return held;
  }

  /** Counts one failure, opening a new window when the last one ended. */
  countFailure(counter: Counter, time: number): void {
    if (counter.failures === 0 || counter.resetAt <= time) {
      counter.failures = 0;
      counter.resetAt = time + this.limits.windowMs;
    }
    counter.failures += 1;
  }

  /** Drops a held counter that nothing needs any more. */
  dropIfIdle(held: HeldCounter, time: number): void {
    if (idle(held.counter, time) && held.map.get(held.key) === held.counter) held.map.delete(held.key);
  }

  private counter(map: Map<string, Counter>, key: string, time: number): Counter {
    let counter = map.get(key);
    if (!counter) {
      counter = { failures: 0, resetAt: 0, pending: 0, waiters: [] };
      map.set(key, counter);
      this.created += 1;
    } else if (counter.failures > 0 && counter.resetAt <= time) {
      counter.failures = 0;
    }
    return counter;
  }

  private sweep(time: number): void {
    for (const map of [this.byAddress, this.byClientAddress]) {
      for (const [key, counter] of map) if (idle(counter, time)) map.delete(key);
    }
  }
}
