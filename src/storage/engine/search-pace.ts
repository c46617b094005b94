import { foregroundBusy, foregroundIdle } from '../../common/foreground.js';
import { SearchTooCostlyError } from '../errors.js';

/**
 * Milliseconds a search of the embedded stores works on the event loop before it lets other
 * requests run: short enough that a point read or a health check waiting behind a costly search
 * is answered within a few of them.
 */
const SLICE_MS = 8;

/** How the searches share the event loop with foreground work (tests lengthen the period). */
export const PACE = {
  /**
   * While foreground work is in flight (`common/foreground.ts`), slices start at most this often,
   * in milliseconds: the searches keep about a third of the event loop, the requests the rest.
   */
  foregroundPeriodMs: 25,
};

/** Searches waiting for their next slice, first come first served. */
const waiting: (() => void)[] = [];
let turnScheduled = false;
/** A slice is waiting for foreground work to end (`giveWay`). */
let givingWay = false;
/** When the last slice started (`performance.now()`). */
let lastSlice = -Infinity;

/**
 * Lets the first waiting search run its next slice, and schedules the next search's slice for the
 * next turn of the event loop: however many searches are running, one slice runs per turn, and the
 * I/O callbacks of other requests (a point read, a token, a health check) run between any two.
 * While foreground work is in flight, the slice first gives way to it (see `giveWay`).
 */
function nextSlice(): void {
  turnScheduled = false;
  const since = performance.now() - lastSlice;
  if (foregroundBusy() && since < PACE.foregroundPeriodMs) {
    giveWay(PACE.foregroundPeriodMs - since);
    return;
  }
  lastSlice = performance.now();
  waiting.shift()?.();
  if (waiting.length > 0) scheduleSlice();
}

/** Waits for the foreground work in flight to end, at most `ms`, then schedules the next slice. */
function giveWay(ms: number): void {
  givingWay = true;
  void foregroundIdle(ms).then(() => {
    givingWay = false;
    scheduleSlice();
  });
}

function scheduleSlice(): void {
  if (turnScheduled || givingWay) return;
  turnScheduled = true;
  setImmediate(nextSlice);
}

/** Resolves when it is this search's turn to run a slice (a later macrotask turn). */
function awaitTurn(): Promise<void> {
  return new Promise((resolve) => {
    waiting.push(resolve);
    scheduleSlice();
  });
}

/**
 * How a search of the embedded stores shares the event loop and keeps to its time: `breathe()`
 * between units of work yields (a macrotask turn, so I/O callbacks and other requests run) once
 * `SLICE_MS` have passed since the last yield; the searches that yield take turns, one slice per
 * turn of the event loop, so that a request waiting behind several searches waits for one slice,
 * not one of each; while foreground work is in flight, a slice starts at most every
 * `PACE.foregroundPeriodMs`, sooner once that work ends. It throws `SearchTooCostlyError` once `deadline` (epoch ms) has passed. A search
 * without a deadline still yields.
 */
export class SearchPace {
  private last = performance.now();

  constructor(private readonly deadline?: number) {
    this.check();
  }

  /** True when the slice is used up: the caller should `breathe()`. */
  get due(): boolean {
    return performance.now() - this.last >= SLICE_MS;
  }

  /** Yields when the slice is used up; throws past the deadline (checked at every call). */
  async breathe(): Promise<void> {
    if (!this.due) {
      this.check();
      return;
    }
    await awaitTurn();
    this.last = performance.now();
    this.check();
  }

  /** Throws `SearchTooCostlyError` past the deadline. */
  check(): void {
    if (this.deadline !== undefined && Date.now() > this.deadline) {
      throw new SearchTooCostlyError('The search ran out of its time: narrow it');
    }
  }
}
