import { setImmediate as nextTurn } from 'node:timers/promises';
import { SearchTooCostlyError } from '../errors.js';

/**
 * Milliseconds a search of the embedded stores works on the event loop before it lets other
 * requests run: short enough that a point read or a health check waiting behind a costly search
 * is answered within a few of them.
 */
const SLICE_MS = 8;

/**
 * How a search of the embedded stores shares the event loop and keeps to its time: `breathe()`
 * between units of work yields (a macrotask turn, so I/O callbacks and other requests run) once
 * `SLICE_MS` have passed since the last yield, and throws `SearchTooCostlyError` once `deadline`
 * (epoch ms) has passed. A search without a deadline still yields.
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

  /** Yields when the slice is used up; throws past the deadline. */
  async breathe(): Promise<void> {
    if (!this.due) return;
    await nextTurn();
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
