import { FhirError } from '../../http/http-error.js';

/** Limits of a FHIR router's admission of costly reads (`fhirRouter`'s `searchAdmission`). */
export interface SearchAdmissionLimits {
  /** Costly requests of one project that run at once. */
  maxConcurrent: number;
  /** Costly requests of one project that may wait for a turn (more answer 429 at once). */
  maxQueued: number;
  /** Longest wait for a turn, in milliseconds; then 429. */
  maxWaitMs: number;
}

/**
 * Admits the costly reads of each project (searches, `$everything`, history listings, the searches
 * of a Bundle): at most `maxConcurrent` of a project at once; the next `maxQueued` wait their turn,
 * first come first served, at most `maxWaitMs`; the others answer 429 `throttled` with
 * `Retry-After`. Projects do not wait for one another: each has a queue of its own, so a project
 * that floods the server only fills its own. In-process: each instance admits its own requests.
 */
export interface SearchAdmission {
  /**
   * Runs `work` in a turn of `projectId`, giving it the time its turn ends by (the epoch ms of
   * `timeoutMs` after the turn starts: the search's `ResourceQuery.deadline`). The turn ends when
   * `work` settles. Throws the 429 `FhirError` when no turn came.
   */
  run<T>(projectId: string, work: (deadline: number) => Promise<T>): Promise<T>;
  /** Requests of `projectId` running and waiting now. */
  load(projectId: string): { running: number; queued: number };
}

interface Waiter {
  resolve(): void;
  timer: NodeJS.Timeout;
}

interface ProjectTurns {
  running: number;
  queue: Waiter[];
}

/** The admission of one router: per-project turns, and the time each turn has (`timeoutMs`). */
export function searchAdmission(limits: SearchAdmissionLimits, timeoutMs: number): SearchAdmission {
  const projects = new Map<string, ProjectTurns>();
  const retryAfter = String(Math.max(1, Math.ceil(Math.min(timeoutMs, limits.maxWaitMs) / 1000)));

  const throttled = (why: string): FhirError =>
    new FhirError(429, 'throttled', `${why}; retry later`, { headers: { 'Retry-After': retryAfter } });

  /** Resolves when `projectId` has a turn (the caller then owns it), or rejects with the 429. */
  function acquire(projectId: string): Promise<void> {
    let turns = projects.get(projectId);
    if (!turns) projects.set(projectId, (turns = { running: 0, queue: [] }));
    if (turns.running < limits.maxConcurrent) {
      turns.running += 1;
      return Promise.resolve();
    }
    if (turns.queue.length >= limits.maxQueued) {
      return Promise.reject(throttled('Too many costly requests of this project are running'));
    }
    const queue = turns.queue;
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        timer: setTimeout(() => {
          queue.splice(queue.indexOf(waiter), 1);
          reject(throttled('Too many costly requests of this project are running: no turn came in time'));
        }, limits.maxWaitMs),
      };
      waiter.timer.unref();
      queue.push(waiter);
    });
  }

  /** Hands the turn to the next waiter of the project, or gives it back. */
  function release(projectId: string): void {
    const turns = projects.get(projectId);
    if (!turns) return;
    const next = turns.queue.shift();
    if (next) {
      clearTimeout(next.timer);
      next.resolve();
      return;
    }
    turns.running -= 1;
    if (turns.running === 0) projects.delete(projectId);
  }

  return {
    async run(projectId, work) {
      await acquire(projectId);
      try {
        return await work(Date.now() + timeoutMs);
      } finally {
        release(projectId);
      }
    },
    load(projectId) {
      const turns = projects.get(projectId);
      return { running: turns?.running ?? 0, queued: turns?.queue.length ?? 0 };
    },
  };
}
