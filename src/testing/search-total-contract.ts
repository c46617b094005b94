import { beforeEach, describe, expect, it } from 'vitest';
import { idFilter, typeSearch } from '../storage/search-request.js';
import type { ResourceQuery, Storage, StoredResource } from '../storage/types.js';

/**
 * The count part of the storage contract (`ResourceQuery.total` and `maxTotal`): a page is the
 * same whatever total it asks; `accurate` (the default) is exact, and past `maxTotal` says that more
 * match; `estimate` is a whole number; `none` may leave `total` out. Called inside
 * `runStorageContract`, which makes a fresh store before each test.
 */
export function searchTotalStorageContract(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  describe('search totals', () => {
    /** Seven Patients `p0`…`p6`, four of them male (`p0`, `p2`, `p4`, `p6`), and one in another project. */
    async function seed(): Promise<void> {
      await storage.writeResources(
        'p1',
        Array.from({ length: 7 }, (_, i) => ({
          op: 'create' as const,
          resource: { resourceType: 'Patient', id: `p${i}`, gender: i % 2 === 0 ? 'male' : 'female' },
        })),
      );
      await storage.createResource('p2', { resourceType: 'Patient', id: 'p0', gender: 'male' });
    }
    const male = (r: StoredResource): boolean => r.gender === 'male';
    const ids = (resources: StoredResource[]): string[] => resources.map((r) => r.id);
    const search = (query: ResourceQuery) => storage.searchResources('p1', 'Patient', query);

    it('counts every match by default, whatever the page', async () => {
      await seed();
      expect((await search({ sort: '_id', count: 2 })).total).toBe(7);
      expect((await search({ count: 0 })).total).toBe(7);
      const last = await search({ sort: '_id', offset: 5, count: 10, total: 'accurate' });
      expect(last).toMatchObject({ total: 7 });
      expect(ids(last.resources)).toEqual(['p5', 'p6']);
      expect((await search({ where: male, count: 1 })).total).toBe(4);
      expect((await search({ where: male, count: 0 })).total).toBe(4);
    });

    it('answers the same page whatever total it asks; none may leave the total out', async () => {
      await seed();
      const queries: ResourceQuery[] = [
        { sort: '_id', count: 3, offset: 1 },
        { sort: '-_id', count: 2, after: { id: 'p5' } },
        { sort: '_id', count: 2, before: { id: 'p5' } },
        { sort: '_id', where: male, count: 2 },
        { sort: '_id', where: male, count: 2, offset: 1 },
        { sort: '_id', where: male },
      ];
      for (const query of queries) {
        const accurate = await search(query);
        for (const total of ['none', 'estimate'] as const) {
          const page = await search({ ...query, total });
          expect(ids(page.resources), `${total} ${JSON.stringify(query)}`).toEqual(ids(accurate.resources));
        }
        const none = await search({ ...query, total: 'none' });
        // A store may count anyway: then exactly.
        if (none.total !== undefined) expect(none.total).toBe(accurate.total);
      }
      expect((await search({ count: 0, total: 'none' })).resources).toEqual([]);
    });

    it('counts at most past maxTotal: a total over it says more match, and the page is unchanged', async () => {
      await seed();
      const over = await search({ sort: '_id', count: 2, maxTotal: 3 });
      expect(over.total).toBeGreaterThan(3);
      expect(over.total).toBeLessThanOrEqual(7);
      expect(ids(over.resources)).toEqual(['p0', 'p1']);
      for (const maxTotal of [6, 7, 100, Infinity]) {
        const page = await search({ sort: '_id', count: 2, total: 'accurate', maxTotal });
        expect(page.total === 7 || (maxTotal < 7 && page.total! > maxTotal), String(maxTotal)).toBe(true);
      }
      expect((await search({ count: 0, maxTotal: 7 })).total).toBe(7);
      const countOnly = (await search({ count: 0, maxTotal: 2 })).total;
      expect(countOnly).toBeGreaterThan(2);
      expect(countOnly).toBeLessThanOrEqual(7);
      const filtered = await search({ sort: '_id', where: male, count: 1, maxTotal: 2 });
      expect(filtered.total).toBeGreaterThan(2);
      expect(filtered.total).toBeLessThanOrEqual(4);
      expect(ids(filtered.resources)).toEqual(['p0']);
      expect((await search({ where: male, count: 1, maxTotal: 4 })).total).toBe(4);
      // Nothing matches: nothing to bound.
      expect((await search({ search: typeSearch('Patient', [idFilter(['none'])]), maxTotal: 0 })).total).toBe(
        0,
      );
    });

    it('estimates with a whole number', async () => {
      await seed();
      for (const query of [{ count: 2 }, { count: 0 }, { where: male, count: 1 }, {}]) {
        const { total } = await search({ ...query, total: 'estimate' });
        expect(Number.isSafeInteger(total) && total! >= 0, JSON.stringify(query)).toBe(true);
      }
    });
  });
}
