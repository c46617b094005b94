/*
 * Foreground work: requests answered in a few milliseconds (a read, a write, a token, a health
 * check) in flight in this process. The embedded stores' costly searches give way to it between
 * their slices (`SearchPace`): while some is in flight, a search's next slice waits for it to end,
 * or for its period to come round, so that one tenant's reads do not queue behind another
 * tenant's searches on the event loop. Counted per process, as the event loop is.
 */

/** Units of foreground work in flight, not ended and not running as background. */
let inFlight = 0;
const waiters = new Set<() => void>();

function leave(): void {
  inFlight -= 1;
  if (inFlight > 0) return;
  for (const wake of [...waiters]) wake();
}

/** One unit of foreground work (a request), counted from `foregroundWork` until `end`. */
export interface ForegroundUnit {
  /** Ends the unit (once; later calls do nothing). */
  end(): void;
  /**
   * Runs `work` as background: while a costly read waits for its turn or runs it, the unit does not
   * count, so the searches it competes with do not give way to it. Nested calls run `work` at once.
   */
  background<T>(work: () => Promise<T>): Promise<T>;
}

/** Starts counting one unit of foreground work. */
export function foregroundWork(): ForegroundUnit {
  inFlight += 1;
  let ended = false;
  let backgrounded = false;
  return {
    end() {
      if (ended) return;
      ended = true;
      if (!backgrounded) leave();
    },
    async background(work) {
      if (ended || backgrounded) return work();
      backgrounded = true;
      leave();
      try {
        return await work();
      } finally {
        backgrounded = false;
        if (!ended) inFlight += 1;
      }
    },
  };
}

/** Whether foreground work is in flight. */
export function foregroundBusy(): boolean {
  return inFlight > 0;
}

/** Resolves once no foreground work is in flight, or after `ms` milliseconds, whichever comes first. */
export function foregroundIdle(ms: number): Promise<void> {
  if (inFlight <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const wake = (): void => {
      clearTimeout(timer);
      waiters.delete(wake);
      resolve();
    };
    const timer = setTimeout(wake, ms);
    waiters.add(wake);
  });
}
