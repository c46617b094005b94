import { PlatformError } from '../../errors.js';

/** Thrown by `ConcurrencyGate.run` when every slot is taken and the queue is full. */
export class GateFullError extends PlatformError {
  declare readonly code: 'ERR_GATE_FULL';
  constructor() {
    super('ERR_GATE_FULL', 'Too many operations in progress');
  }
}

/** Runs at most `maxConcurrent` operations at once; up to `maxQueued` more wait their turn, in order. */
export interface ConcurrencyGate {
  /** Runs `operation` when a slot is free; rejects with `GateFullError` at once when the queue is full. */
  run<T>(operation: () => Promise<T>): Promise<T>;
  /** Operations running now. */
  readonly running: number;
  /** Operations waiting for a slot. */
  readonly queued: number;
}

/** Creates a gate (an in-memory semaphore with a bounded FIFO queue). */
export function concurrencyGate(maxConcurrent: number, maxQueued: number): ConcurrencyGate {
  let running = 0;
  const queue: Array<() => void> = [];

  async function run<T>(operation: () => Promise<T>): Promise<T> {
    if (running >= maxConcurrent) {
      if (queue.length >= maxQueued) throw new GateFullError();
      // The slot is handed over by the finishing operation, so `running` never exceeds the maximum.
      await new Promise<void>((resolve) => queue.push(resolve));
    } else {
      running += 1;
    }
    try {
      return await operation();
    } finally {
      const next = queue.shift();
      if (next) next();
      else running -= 1;
    }
  }

  return {
    run,
    get running() {
      return running;
    },
    get queued() {
      return queue.length;
    },
  };
}
