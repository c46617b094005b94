import { describe, expect, it } from 'vitest';
import type { ResourceQuery, Storage, StoredResource } from '../../src/storage/types.js';
import { rejectsWith } from '../../src/testing/contract-helpers.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';

/*
 * What the package's stores do with `ResourceQuery.total` and `maxTotal` beyond the contract: an
 * accurate count stops at `maxTotal + 1`; a search whose `where` decides reads only as far as its
 * page when the count needs no more; an estimate of such a search is extrapolated from what it read.
 */

/** `n` Patients `p000`…, every second one (`p000`, `p002`, …) male. */
async function seeded(open: () => Storage | Promise<Storage>, n: number): Promise<Storage> {
  const storage = await open();
  afterTest(() => storage.close());
  await storage.writeResources(
    'p1',
    Array.from({ length: n }, (_, i) => ({
      op: 'create' as const,
      resource: {
        resourceType: 'Patient',
        id: `p${String(i).padStart(3, '0')}`,
        gender: i % 2 === 0 ? 'male' : 'female',
      },
    })),
  );
  return storage;
}

/** A `where` for male Patients that counts the candidates it is asked about. */
function counting(): { where: (r: StoredResource) => boolean; calls: () => number } {
  let calls = 0;
  return {
    where: (r) => {
      calls += 1;
      return r.gender === 'male';
    },
    calls: () => calls,
  };
}

forEachStore('search totals', (store, open) => {
  describe(`search totals: ${store}`, () => {
    it('an accurate count stops one past maxTotal', async () => {
      const storage = await seeded(open, 30);
      const search = (query: ResourceQuery) => storage.searchResources('p1', 'Patient', query);
      expect((await search({ count: 5, maxTotal: 10 })).total).toBe(11);
      expect((await search({ count: 0, maxTotal: 10 })).total).toBe(11);
      expect((await search({ count: 5, maxTotal: 29 })).total).toBe(30);
      expect((await search({ count: 5, maxTotal: 30 })).total).toBe(30);
      expect((await search({ count: 0, maxTotal: 0 })).total).toBe(1);
      expect((await search({ where: (r) => r.gender === 'male', count: 2, maxTotal: 10 })).total).toBe(11);
      const sorted = await search({ sort: '-_id', count: 3, maxTotal: 4 });
      expect(sorted.total).toBe(5);
      expect(sorted.resources.map((r) => r.id)).toEqual(['p029', 'p028', 'p027']);
    });

    it('a page whose where decides reads only as far as the page when the count needs no more', async () => {
      const storage = await seeded(open, 600);
      const none = counting();
      const page = await storage.searchResources('p1', 'Patient', {
        where: none.where,
        count: 5,
        total: 'none',
      });
      expect(page.resources.map((r) => r.id)).toEqual(['p000', 'p002', 'p004', 'p006', 'p008']);
      expect(page.total).toBeUndefined();
      expect(none.calls()).toBeLessThan(600);

      const bounded = counting();
      const counted = await storage.searchResources('p1', 'Patient', {
        where: bounded.where,
        count: 5,
        maxTotal: 20,
      });
      expect(counted.total).toBe(21);
      expect(bounded.calls()).toBeLessThan(600);

      const all = counting();
      expect((await storage.searchResources('p1', 'Patient', { where: all.where, count: 5 })).total).toBe(
        300,
      );
      expect(all.calls()).toBe(600);
    });

    it('estimates a page whose where decides from the candidates it read', async () => {
      const storage = await seeded(open, 600);
      const estimate = counting();
      const page = await storage.searchResources('p1', 'Patient', {
        where: estimate.where,
        count: 5,
        total: 'estimate',
      });
      expect(estimate.calls()).toBeLessThan(600);
      // Every second candidate matches: so does every second one read.
      expect(page.total).toBeGreaterThanOrEqual(250);
      expect(page.total).toBeLessThanOrEqual(350);
    });

    it('refuses a bad total or maxTotal', async () => {
      const storage = await seeded(open, 1);
      for (const query of [
        { total: 'some' },
        { maxTotal: -1 },
        { maxTotal: 1.5 },
        { maxTotal: Number.NaN },
        { maxTotal: '10' },
      ]) {
        await rejectsWith(
          storage.searchResources('p1', 'Patient', query as unknown as ResourceQuery),
          'ERR_STORAGE_INVALID',
        );
      }
    });
  });
});
