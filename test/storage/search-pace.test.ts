import { describe, expect, it, vi } from 'vitest';
import { foregroundWork } from '../../src/common/foreground.js';
import { PACE, SearchPace } from '../../src/storage/engine/search-pace.js';
import type { FilterResolver, ResourceIndexer } from '../../src/storage/search-index.js';
import { typeSearch, type SearchFilter } from '../../src/storage/search-request.js';
import { SearchTooCostlyError } from '../../src/storage/errors.js';
import { fileStorage, memoryStorage, r4SearchIndexer } from '../../src/stores.js';
import type { Storage, StoredResource } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { tempDir } from '../helpers/temp-dir.js';
import { eventually } from '../helpers/eventually.js';

/**
 * Makes `Date.now()` move a millisecond each time it is read (until the test ends or `restore`), and
 * answers the time it starts from: a deadline a few ms ahead then falls inside the search's work
 * however fast this machine does it (a real 5 ms budget passes by on a warm, quiet worker).
 */
function tickingClock(): { start: number; restore: () => void } {
  let now = Date.now();
  const start = now;
  const clock = vi.spyOn(Date, 'now').mockImplementation(() => (now += 1));
  afterTest(() => clock.mockRestore());
  return { start, restore: () => clock.mockRestore() };
}

/*
 * The embedded stores' searches share the event loop and keep to their deadline
 * (`ResourceQuery.deadline`): a search whose test of each candidate is slow lets other callbacks
 * run while it works, and stops with SearchTooCostlyError once its deadline passes.
 */

/** Spins for `ms` milliseconds: a test of one candidate that costs CPU time. */
function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

type Indexer = () => Promise<ResourceIndexer>;
const STORES: [string, (indexer?: Indexer) => Storage | Promise<Storage>][] = [
  ['memory', (indexer) => memoryStorage(indexer ? { indexer } : {})],
  [
    'file',
    (indexer) =>
      fileStorage({ dir: tempDir('fpk-pace-'), durability: 'write', ...(indexer ? { indexer } : {}) }),
  ],
];

/**
 * The R4 indexer, whose matcher is handed a resolver that spins `ms` per resource the store reads
 * for a chain or `_has` (a costly test of each referrer), and calls `onRead` with the count so far
 * after each.
 */
function slowReferrers(ms: number, onRead: (count: number) => void): Indexer {
  return async () => {
    const base = await r4SearchIndexer();
    let count = 0;
    const compileFilters: ResourceIndexer['compileFilters'] = (filters, resolver: FilterResolver) =>
      base.compileFilters!(filters, {
        async *resources(type: string, filter?: SearchFilter) {
          for await (const resource of resolver.resources(type, filter)) {
            spin(ms);
            count += 1;
            onRead(count);
            yield resource;
          }
        },
      });
    return Object.assign(Object.create(base) as ResourceIndexer, { compileFilters });
  };
}

for (const [name, open] of STORES) {
  describe(`search pace (${name} store)`, () => {
    async function seeded(count: number): Promise<Storage> {
      const storage = await open();
      afterTest(() => storage.close());
      const writes = Array.from({ length: count }, (_, i) => ({
        op: 'update' as const,
        resource: { resourceType: 'Patient', id: `p${i}` },
      }));
      await storage.writeResources('p1', writes);
      return storage;
    }

    it('refuses a search whose deadline has passed', async () => {
      const storage = await seeded(3);
      await expect(
        storage.searchResources('p1', 'Patient', { deadline: Date.now() - 1 }),
      ).rejects.toBeInstanceOf(SearchTooCostlyError);
    });

    it('lets other callbacks run while a slow search works, and answers it whole', async () => {
      const storage = await seeded(40);
      let tested = 0;
      let testedWhenOtherRan: number | undefined;
      const page = await storage.searchResources('p1', 'Patient', {
        where: (_r: StoredResource) => {
          // Scheduled once the search is testing candidates: it must not wait for the last one.
          if (tested === 0) setImmediate(() => (testedWhenOtherRan = tested));
          spin(1);
          tested += 1;
          return true;
        },
      });
      expect(page.resources).toHaveLength(40);
      expect(tested).toBe(40);
      // The other callback ran in the middle of the search, not after it.
      expect(testedWhenOtherRan).toBeGreaterThan(0);
      expect(testedWhenOtherRan).toBeLessThan(40);
    });

    it('gives way to foreground work in flight, goes on once it ends, and not for background work', async () => {
      const storage = await seeded(40);
      // A period longer than any test: while foreground work is in flight, no slice starts.
      const period = PACE.foregroundPeriodMs;
      PACE.foregroundPeriodMs = 3_600_000;
      afterTest(() => (PACE.foregroundPeriodMs = period));
      const slowSearch = (counter: { tested: number }) =>
        storage.searchResources('p1', 'Patient', {
          where: () => {
            spin(1);
            counter.tested += 1;
            return true;
          },
        });
      const request = foregroundWork();
      afterTest(() => request.end());
      const held = { tested: 0 };
      let answered = false;
      const search = slowSearch(held).then((page) => {
        answered = true;
        return page;
      });
      // Its first slice runs; then it waits, however many turns and milliseconds go by.
      await eventually('the first slice', () => held.tested > 0);
      const before = held.tested;
      for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(held.tested).toBe(before);
      expect(answered).toBe(false);
      expect(before).toBeLessThan(40);
      // Work of the request run as background (a costly read of its own) does not hold it.
      const own = { tested: 0 };
      const ownPage = await request.background(() => slowSearch(own));
      expect(ownPage.resources).toHaveLength(40);
      // The request ends: the held search goes on, whole.
      request.end();
      expect((await search).resources).toHaveLength(40);
      expect(held.tested).toBe(40);
    });

    it('lets other callbacks run while a _has tests each referrer its postings cannot answer', async () => {
      let read = 0;
      let readWhenOtherRan: number | undefined;
      const storage = await open(
        slowReferrers(1, (count) => {
          read = count;
          if (count === 1) setImmediate(() => (readWhenOtherRan = read));
        }),
      );
      afterTest(() => storage.close());
      await storage.writeResources('p1', [
        { op: 'create', resource: { resourceType: 'Patient', id: 'a' } },
        ...Array.from({ length: 60 }, (_, i) => ({
          op: 'create' as const,
          resource: {
            resourceType: 'Observation',
            id: `o${i}`,
            code: { text: 'glucose' },
            subject: { reference: 'Patient/a' },
          },
        })),
      ]);
      // `:text` is never answered by the postings: the referrers are read and tested one by one.
      const has: SearchFilter = {
        kind: 'has',
        resourceType: 'Observation',
        referenceParam: 'subject',
        filter: {
          kind: 'parameter',
          code: 'code',
          type: 'token',
          modifier: 'text',
          values: [{ type: 'token', text: 'glucose' }],
        },
      };
      const page = await storage.searchResources('p1', 'Patient', { search: typeSearch('Patient', [has]) });
      expect(page.resources.map((r) => r.id)).toEqual(['a']);
      // The other callback ran while the referrers were tested, not after the last one.
      expect(readWhenOtherRan).toBeDefined();
      expect(readWhenOtherRan).toBeLessThan(60);
    });

    it('stops a search reading every body of a type (no count) at its deadline', async () => {
      // What a `_has` or a chain reads of the other type: a page without a count, no filter left.
      const storage = await seeded(5000);
      const clock = tickingClock();
      await expect(
        storage.searchResources('p1', 'Patient', { deadline: clock.start + 5 }),
      ).rejects.toBeInstanceOf(SearchTooCostlyError);
      clock.restore();
      expect((await storage.searchResources('p1', 'Patient', {})).resources).toHaveLength(5000);
    });

    it('stops a search sorting many matches at its deadline', async () => {
      const storage = await seeded(20_000);
      const now = tickingClock().start;
      await expect(
        storage.searchResources('p1', 'Patient', {
          sort: '-_id',
          count: 0,
          offset: 0,
          after: { id: 'p0' },
          deadline: now + 5,
        }),
      ).rejects.toBeInstanceOf(SearchTooCostlyError);
    });

    it('stops a slow search at its deadline with SearchTooCostlyError', async () => {
      const storage = await seeded(300);
      let tested = 0;
      const search = storage.searchResources('p1', 'Patient', {
        deadline: Date.now() + 30,
        where: () => {
          spin(1);
          tested += 1;
          return true;
        },
      });
      await expect(search).rejects.toBeInstanceOf(SearchTooCostlyError);
      expect(tested).toBeLessThan(300);
      // The store answers the next search as usual.
      expect((await storage.searchResources('p1', 'Patient', { count: 0 })).total).toBe(300);
    });
  });
}

describe('search pace across searches', () => {
  it('runs one search slice per turn of the event loop, whatever the number of searches', async () => {
    const log: string[] = [];
    const first = new SearchPace();
    const second = new SearchPace();
    spin(10); // both slices used up
    const resumed = [
      first.breathe().then(() => {
        log.push('first');
        // A timer due before the next turn: its phase comes before the second search's slice
        // only if the searches do not both resume in the same turn.
        setTimeout(() => log.push('timer'), 0);
        spin(3);
      }),
      second.breathe().then(() => log.push('second')),
    ];
    await Promise.all(resumed);
    await eventually('the timer', () => log.includes('timer'));
    expect(log).toEqual(['first', 'timer', 'second']);
  });
});
