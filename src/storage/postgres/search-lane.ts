import { InvalidOptionError } from '../../errors.js';
import { SearchTooCostlyError, StorageClosedError, StorageUnavailableError } from '../errors.js';

/*
 * The search lane of the PostgreSQL store: searches (and history listings of a type or a project)
 * run at most `connections` at once, so that the rest of the pool stays free for point reads,
 * writes, the token endpoint's records and readiness; and at most `perProject` of them for one
 * project, so that one tenant's searches cannot take the whole lane. A search that finds no room
 * waits in its project's queue (first come, first served); when a search ends, the project with
 * waiting searches that runs the fewest is served (projects in turn among equals), so a project
 * with 50 waiting does not hold back another's.
 */

/** The lane's sizes, resolved from the store's options. */
export interface SearchLaneLimits {
  /** Searches running at once, all projects together (`searchConnections`). */
  connections: number;
  /** Searches of one project running at once (`maxProjectSearchConnections`). */
  perProject: number;
  /** Longest wait of a search without a deadline, in ms (`acquireTimeoutMs`; 0: no limit). */
  waitTimeoutMs: number;
}

/** The longest delay `setTimeout` keeps (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Ends a search's hold on the lane (calling it again does nothing). */
export type LaneRelease = () => void;

interface Waiter {
  readonly projectId: string;
  readonly grant: (release: LaneRelease) => void;
  readonly fail: (error: unknown) => void;
  timer?: NodeJS.Timeout;
}

/** The share of a pool of `poolSize` connections searches may hold by default: all but 30%, at least 2. */
export function defaultSearchConnections(poolSize: number): number {
  return Math.max(1, poolSize - Math.max(2, Math.ceil(poolSize * 0.3)));
}

/** How many of `searchConnections` one project's searches may hold by default: half of them. */
export function defaultProjectSearchConnections(searchConnections: number): number {
  return Math.max(1, Math.floor(searchConnections / 2));
}

/** The lane's limits from the store's options (checked), for a pool of `poolSize` connections. */
export function resolveSearchLane(
  options: { searchConnections?: number | undefined; maxProjectSearchConnections?: number | undefined },
  poolSize: number,
  waitTimeoutMs: number,
): SearchLaneLimits {
  const connections = options.searchConnections ?? defaultSearchConnections(poolSize);
  // A caller's pool of one connection has nothing to keep free: its searches may take it.
  const most = Math.max(1, poolSize - 1);
  if (!Number.isSafeInteger(connections) || connections < 1 || connections > most) {
    throw new InvalidOptionError(
      `postgresStorage: searchConnections must be an integer from 1 to ${most} (less than the pool's ${poolSize} connections, so that some stay free for everything else)`,
    );
  }
  const perProject = options.maxProjectSearchConnections ?? defaultProjectSearchConnections(connections);
  if (!Number.isSafeInteger(perProject) || perProject < 1 || perProject > connections) {
    throw new InvalidOptionError(
      `postgresStorage: maxProjectSearchConnections must be an integer from 1 to searchConnections (${connections})`,
    );
  }
  return { connections, perProject, waitTimeoutMs };
}

/** Admits searches into the lane: per project in arrival order, the project running fewest first. */
export class SearchLane {
  private running = 0;
  /** Searches running now, per project (projects with none are absent). */
  private readonly held = new Map<string, number>();
  /** Waiting searches per project, oldest first; the map's order is the order projects are served in. */
  private readonly waiting = new Map<string, Waiter[]>();
  private closed = false;

  constructor(readonly limits: SearchLaneLimits) {}

  /**
   * Resolves once a search of `projectId` may run, with the function that ends its hold. A search
   * with a `deadline` (epoch ms) waits until then at most and then fails with
   * `SearchTooCostlyError`; one without waits `waitTimeoutMs` at most, then fails with
   * `StorageUnavailableError`.
   */
  acquire(projectId: string, deadline?: number): Promise<LaneRelease> {
    if (this.closed) return Promise.reject(new StorageClosedError('The storage is closed'));
    if (deadline !== undefined && !Number.isFinite(deadline)) deadline = undefined;
    if (deadline !== undefined && Date.now() >= deadline) {
      return Promise.reject(this.timedOut(projectId, true));
    }
    if (!this.waiting.has(projectId) && this.hasRoom(projectId)) {
      return Promise.resolve(this.take(projectId));
    }
    return new Promise<LaneRelease>((resolve, reject) => {
      const waiter: Waiter = { projectId, grant: resolve, fail: reject };
      this.enqueue(waiter);
      this.armTimer(waiter, deadline);
    });
  }

  /** Refuses every waiting search and every later one (`StorageClosedError`). */
  close(): void {
    this.closed = true;
    const waiters = [...this.waiting.values()].flat();
    this.waiting.clear();
    for (const waiter of waiters) {
      clearTimeout(waiter.timer);
      waiter.fail(new StorageClosedError('The storage is closed'));
    }
  }

  private hasRoom(projectId: string): boolean {
    return this.running < this.limits.connections && (this.held.get(projectId) ?? 0) < this.limits.perProject;
  }

  private take(projectId: string): LaneRelease {
    this.running++;
    this.held.set(projectId, (this.held.get(projectId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      const left = this.held.get(projectId)! - 1;
      if (left === 0) this.held.delete(projectId);
      else this.held.set(projectId, left);
      this.dispatch();
    };
  }

  private enqueue(waiter: Waiter): void {
    const queue = this.waiting.get(waiter.projectId);
    if (queue) queue.push(waiter);
    else this.waiting.set(waiter.projectId, [waiter]);
  }

  /**
   * Admits waiting searches while there is room: of the projects that may run one more, the one
   * running the fewest (the first in turn among equals).
   */
  private dispatch(): void {
    while (this.running < this.limits.connections) {
      const next = this.nextProject();
      if (next === undefined) return;
      const queue = this.waiting.get(next)!;
      const waiter = queue.shift()!;
      // The project goes to the back of the turn: the others with waiting searches come first.
      this.waiting.delete(next);
      if (queue.length > 0) this.waiting.set(next, queue);
      clearTimeout(waiter.timer);
      waiter.grant(this.take(next));
    }
  }

  private nextProject(): string | undefined {
    let next: string | undefined;
    let fewest = Infinity;
    for (const projectId of this.waiting.keys()) {
      const held = this.held.get(projectId) ?? 0;
      if (held < fewest && held < this.limits.perProject) {
        next = projectId;
        fewest = held;
      }
    }
    return next;
  }

  private armTimer(waiter: Waiter, deadline: number | undefined): void {
    const { waitTimeoutMs } = this.limits;
    if (deadline === undefined && waitTimeoutMs === 0) return;
    const until = deadline ?? Date.now() + waitTimeoutMs;
    const arm = () => {
      // Node's timers stop at about 24.8 days: a later end is reached in several steps.
      waiter.timer = setTimeout(
        () => {
          if (Date.now() < until) return arm();
          this.drop(waiter);
          waiter.fail(this.timedOut(waiter.projectId, deadline !== undefined));
        },
        Math.min(until - Date.now(), MAX_TIMER_MS),
      );
      waiter.timer.unref();
    };
    arm();
  }

  private drop(waiter: Waiter): void {
    const queue = this.waiting.get(waiter.projectId);
    if (!queue) return;
    const rest = queue.filter((w) => w !== waiter);
    if (rest.length > 0) this.waiting.set(waiter.projectId, rest);
    else this.waiting.delete(waiter.projectId);
  }

  /** Why a search found no room in time: its project's share, or the whole lane, was taken. */
  private timedOut(projectId: string, byDeadline: boolean): Error {
    const { connections, perProject } = this.limits;
    const why =
      (this.held.get(projectId) ?? 0) >= perProject
        ? `the project's searches hold all ${perProject} of its search connections`
        : `all ${connections} search connections are in use`;
    return byDeadline
      ? new SearchTooCostlyError(`The search ran out of its time waiting for a connection: ${why}`)
      : new StorageUnavailableError(`No search connection was free in time: ${why}`);
  }
}
