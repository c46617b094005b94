import { afterEach, describe, expect, it, vi } from 'vitest';
import { InvalidOptionError } from '../../src/errors.js';
import { postgresStorage } from '../../src/postgres.js';
import {
  SearchTooCostlyError,
  StorageClosedError,
  StorageUnavailableError,
} from '../../src/storage/errors.js';
import {
  resolveSearchLane,
  SearchLane,
  type LaneRelease,
  type SearchLaneLimits,
} from '../../src/storage/postgres/search-lane.js';

/*
 * The PostgreSQL store's search lane on its own: who runs, who waits and in which order, and how a
 * wait ends. Every wait that a deadline or a timeout ends runs on fake timers.
 */

/** Acquisitions in the order they were granted (by label), with their releases. */
class Recorder {
  readonly granted: string[] = [];
  readonly releases = new Map<string, LaneRelease>();
  readonly failures = new Map<string, unknown>();

  constructor(private readonly lane: SearchLane) {}

  acquire(label: string, projectId: string, deadline?: number): Promise<void> {
    return this.lane.acquire(projectId, deadline).then(
      (release) => {
        this.granted.push(label);
        this.releases.set(label, release);
      },
      (error: unknown) => {
        this.failures.set(label, error);
      },
    );
  }

  release(label: string): void {
    this.releases.get(label)!();
  }
}

/** Lets the promise callbacks queued so far run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

function lane(limits: Partial<SearchLaneLimits> = {}): SearchLane {
  return new SearchLane({ connections: 2, perProject: 1, waitTimeoutMs: 0, ...limits });
}

describe('search lane', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("admits a project's searches up to its share, the rest in arrival order as its searches end", async () => {
    const r = new Recorder(lane({ connections: 3, perProject: 2 }));
    for (const label of ['a1', 'a2', 'a3', 'a4']) void r.acquire(label, 'a');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2']);
    r.release('a2');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2', 'a3']);
    r.release('a1');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2', 'a3', 'a4']);
  });

  it("runs another project's search at once while one project holds its whole share", async () => {
    const r = new Recorder(lane({ connections: 2, perProject: 1 }));
    for (let i = 1; i <= 50; i++) void r.acquire(`a${i}`, 'a');
    void r.acquire('b1', 'b');
    await settle();
    expect(r.granted).toEqual(['a1', 'b1']);
  });

  it('serves a newly arrived project before one with 50 waiting searches when a search ends', async () => {
    const r = new Recorder(lane({ connections: 2, perProject: 2 }));
    for (let i = 1; i <= 50; i++) void r.acquire(`a${i}`, 'a');
    await settle();
    void r.acquire('b1', 'b');
    void r.acquire('b2', 'b');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2']);
    r.release('a1');
    await settle();
    // b runs none, a runs one: b's first search goes first.
    expect(r.granted).toEqual(['a1', 'a2', 'b1']);
    r.release('a2');
    await settle();
    // Both run one now: a, first in turn (it has waited longest), then b.
    expect(r.granted).toEqual(['a1', 'a2', 'b1', 'a3']);
    // Each project keeps one running: a's ended, so a's next; then b's.
    r.release('a3');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2', 'b1', 'a3', 'a4']);
    r.release('b1');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2', 'b1', 'a3', 'a4', 'b2']);
  });

  it('takes projects in turn when they run as many each', async () => {
    const r = new Recorder(lane({ connections: 1, perProject: 1 }));
    void r.acquire('a1', 'a');
    for (const [label, project] of [
      ['a2', 'a'],
      ['b1', 'b'],
      ['c1', 'c'],
      ['a3', 'a'],
      ['b2', 'b'],
    ] as const)
      void r.acquire(label, project);
    await settle();
    for (const label of ['a1', 'a2', 'b1', 'c1', 'a3']) {
      r.release(label);
      await settle();
    }
    expect(r.granted).toEqual(['a1', 'a2', 'b1', 'c1', 'a3', 'b2']);
  });

  it('ignores a second release of the same hold', async () => {
    const r = new Recorder(lane({ connections: 1, perProject: 1 }));
    void r.acquire('a1', 'a');
    void r.acquire('a2', 'a');
    void r.acquire('a3', 'a');
    await settle();
    r.release('a1');
    r.release('a1');
    await settle();
    expect(r.granted).toEqual(['a1', 'a2']);
  });

  it("fails a search whose deadline passes while its project's searches hold its share: SearchTooCostlyError", async () => {
    vi.useFakeTimers();
    const r = new Recorder(lane({ connections: 2, perProject: 1 }));
    void r.acquire('a1', 'a');
    const waiting = r.acquire('a2', 'a', Date.now() + 500);
    await vi.advanceTimersByTimeAsync(499);
    expect(r.failures.has('a2')).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await waiting;
    const error = r.failures.get('a2');
    expect(error).toBeInstanceOf(SearchTooCostlyError);
    expect((error as Error).message).toMatch(/project's searches hold all 1 of its search connections/);
    // It left the queue: the next hold freed goes to a later search.
    void r.acquire('a3', 'a');
    r.release('a1');
    await vi.advanceTimersByTimeAsync(0);
    expect(r.granted).toEqual(['a1', 'a3']);
  });

  it('fails a search whose deadline passes while the lane is full of other projects: SearchTooCostlyError', async () => {
    vi.useFakeTimers();
    const r = new Recorder(lane({ connections: 2, perProject: 1 }));
    void r.acquire('a1', 'a');
    void r.acquire('b1', 'b');
    const waiting = r.acquire('c1', 'c', Date.now() + 100);
    await vi.advanceTimersByTimeAsync(100);
    await waiting;
    expect(r.failures.get('c1')).toBeInstanceOf(SearchTooCostlyError);
    expect((r.failures.get('c1') as Error).message).toMatch(/all 2 search connections are in use/);
  });

  it('fails a search whose deadline has passed at once, even with room', async () => {
    const r = new Recorder(lane());
    await r.acquire('a1', 'a', Date.now() - 1);
    expect(r.failures.get('a1')).toBeInstanceOf(SearchTooCostlyError);
    expect(r.granted).toEqual([]);
  });

  it('bounds the wait of a search without a deadline by waitTimeoutMs: StorageUnavailableError', async () => {
    vi.useFakeTimers();
    const r = new Recorder(lane({ connections: 1, perProject: 1, waitTimeoutMs: 1000 }));
    void r.acquire('a1', 'a');
    const waiting = r.acquire('b1', 'b');
    await vi.advanceTimersByTimeAsync(1000);
    await waiting;
    expect(r.failures.get('b1')).toBeInstanceOf(StorageUnavailableError);
  });

  it('waits past the longest timer Node keeps for a far deadline', async () => {
    vi.useFakeTimers();
    const r = new Recorder(lane({ connections: 1, perProject: 1 }));
    void r.acquire('a1', 'a');
    const days30 = 30 * 24 * 3600 * 1000;
    const waiting = r.acquire('b1', 'b', Date.now() + days30);
    await vi.advanceTimersByTimeAsync(2 ** 31);
    expect(r.failures.has('b1')).toBe(false);
    await vi.advanceTimersByTimeAsync(days30 - 2 ** 31);
    await waiting;
    expect(r.failures.get('b1')).toBeInstanceOf(SearchTooCostlyError);
  });

  it('refuses the waiting searches and later ones once closed', async () => {
    const l = lane({ connections: 1, perProject: 1 });
    const r = new Recorder(l);
    void r.acquire('a1', 'a');
    const waiting = r.acquire('b1', 'b');
    await settle();
    l.close();
    await waiting;
    expect(r.failures.get('b1')).toBeInstanceOf(StorageClosedError);
    await r.acquire('c1', 'c');
    expect(r.failures.get('c1')).toBeInstanceOf(StorageClosedError);
  });
});

describe('search lane options', () => {
  it('are options of postgresStorage, checked when it is made', () => {
    expect(() => postgresStorage({ maxConnections: 10, searchConnections: 10 })).toThrow(
      /searchConnections must be an integer from 1 to 9/,
    );
    expect(() => postgresStorage({ searchConnections: 4, maxProjectSearchConnections: 5 })).toThrow(
      /maxProjectSearchConnections must be an integer from 1 to searchConnections \(4\)/,
    );
  });

  it('leaves 30% of the pool (at least 2) outside the lane, and half the lane to one project', () => {
    expect(resolveSearchLane({}, 10, 10_000)).toEqual({
      connections: 7,
      perProject: 3,
      waitTimeoutMs: 10_000,
    });
    expect(resolveSearchLane({}, 4, 0)).toMatchObject({ connections: 2, perProject: 1 });
    expect(resolveSearchLane({}, 2, 0)).toMatchObject({ connections: 1, perProject: 1 });
    expect(resolveSearchLane({}, 20, 0)).toMatchObject({ connections: 14, perProject: 7 });
    // A caller's pool of one connection: the lane is that connection.
    expect(resolveSearchLane({}, 1, 0)).toMatchObject({ connections: 1, perProject: 1 });
    expect(resolveSearchLane({ searchConnections: 4 }, 10, 0)).toMatchObject({
      connections: 4,
      perProject: 2,
    });
    expect(resolveSearchLane({ searchConnections: 9, maxProjectSearchConnections: 9 }, 10, 0)).toMatchObject({
      connections: 9,
      perProject: 9,
    });
  });

  it('refuses a lane that leaves nothing outside it, and a share beyond the lane', () => {
    for (const searchConnections of [0, 10, 11, 2.5, Number.NaN, '3' as unknown as number])
      expect(() => resolveSearchLane({ searchConnections }, 10, 0), String(searchConnections)).toThrow(
        InvalidOptionError,
      );
    for (const maxProjectSearchConnections of [0, 8, 1.5])
      expect(
        () => resolveSearchLane({ searchConnections: 7, maxProjectSearchConnections }, 10, 0),
        String(maxProjectSearchConnections),
      ).toThrow(/maxProjectSearchConnections/);
  });
});
