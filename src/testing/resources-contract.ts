import { beforeEach, describe, expect, it } from 'vitest';
import { compartmentSearch, idFilter, lastUpdatedFilters, typeSearch } from '../storage/search-request.js';
import type { SortValue, Storage, StoredResource } from '../storage/types.js';
import { CONFLICT, NOT_FOUND, PRECONDITION, rejectsWith, code } from './contract-helpers.js';

/**
 * The resources' part of the storage contract: writes and reads, and search (identifier search is
 * identifier-search-contract.ts). Called inside `runStorageContract`, which makes a fresh store
 * before each test.
 */
export function resourcesStorageContract(getStorage: () => Storage): void {
  describe('resources', () => {
    resourceWriteTests(getStorage);
    resourceBatchTests(getStorage);
  });
  describe('search', () => {
    searchFilterTests(getStorage);
    searchPagingTests(getStorage);
  });
}

/** Create, read, update and delete: ids, versions, lastUpdated, tombstones. */
function resourceWriteTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('creates with id, versionId and lastUpdated, and reads copies', async () => {
    const r = await storage.createResource('p1', { resourceType: 'Patient', name: [{ family: 'Doe' }] });
    expect(r.id).toMatch(/\S+/);
    expect(r.meta.versionId).toMatch(/\S+/);
    expect(Number.isNaN(Date.parse(r.meta.lastUpdated))).toBe(false);
    const read = await storage.readResource('p1', 'Patient', r.id);
    expect(read).toEqual(r);
    (read.name as { family: string }[])[0]!.family = 'X';
    expect(await storage.readResource('p1', 'Patient', r.id)).toEqual(r);
    const given = await storage.createResource('p1', {
      resourceType: 'Patient',
      id: 'given',
      meta: { source: 's' },
    });
    expect(given.id).toBe('given');
    expect(given.meta.source).toBe('s');
    await rejectsWith(storage.createResource('p1', { resourceType: 'Patient', id: 'given' }), CONFLICT);
    await rejectsWith(storage.readResource('p1', 'Patient', 'missing'), NOT_FOUND);
    await rejectsWith(storage.readResource('p1', 'Observation', 'given'), NOT_FOUND);
    await rejectsWith(storage.readResource('p2', 'Patient', 'given'), NOT_FOUND);
  });

  it('rejects an invalid resource type', async () => {
    await rejectsWith(storage.createResource('p1', { resourceType: '../etc' }), 'ERR_STORAGE_INVALID');
  });

  it('updates: new versionId, increasing lastUpdated, created flag, ifMatch', async () => {
    const { resource: v1, created } = await storage.updateResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      active: true,
    });
    expect(created).toBe(true);
    const { resource: v2, created: created2 } = await storage.updateResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      active: false,
    });
    expect(created2).toBe(false);
    expect(v2.meta.versionId).not.toBe(v1.meta.versionId);
    expect(Date.parse(v2.meta.lastUpdated)).toBeGreaterThanOrEqual(Date.parse(v1.meta.lastUpdated));
    expect(v2.meta.lastUpdated > v1.meta.lastUpdated).toBe(true);
    await rejectsWith(
      storage.updateResource('p1', { resourceType: 'Patient', id: 'a' }, { ifMatch: v1.meta.versionId }),
      PRECONDITION,
    );
    const { resource: v3 } = await storage.updateResource(
      'p1',
      { resourceType: 'Patient', id: 'a', gender: 'other' },
      { ifMatch: v2.meta.versionId },
    );
    expect(v3.active).toBeUndefined();
    expect(await storage.readResource('p1', 'Patient', 'a')).toEqual(v3);
  });

  it('lastUpdated strictly increases across writes', async () => {
    const stamps: string[] = [];
    for (let i = 0; i < 50; i++)
      stamps.push((await storage.createResource('p1', { resourceType: 'Basic' })).meta.lastUpdated);
    const more = await Promise.all(
      Array.from({ length: 50 }, () => storage.createResource('p1', { resourceType: 'Basic' })),
    );
    stamps.push(...more.map((r) => r.meta.lastUpdated).sort());
    expect(new Set(stamps).size).toBe(stamps.length);
    for (let i = 1; i < stamps.length; i++) expect(stamps[i]! > stamps[i - 1]!).toBe(true);
  });

  it('deletes into a tombstone; re-creates after delete; deleting an absent id is a no-op', async () => {
    const r = await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await rejectsWith(storage.deleteResource('p1', 'Patient', 'a', { ifMatch: 'nope' }), PRECONDITION);
    await storage.deleteResource('p1', 'Patient', 'a', { ifMatch: r.meta.versionId });
    const gone = await rejectsWith(storage.readResource('p1', 'Patient', 'a'), NOT_FOUND);
    expect((gone as { deleted?: boolean }).deleted).toBe(true);
    const missing = await rejectsWith(storage.readResource('p1', 'Patient', 'zzz'), NOT_FOUND);
    expect((missing as { deleted?: boolean }).deleted).toBe(false);
    await storage.deleteResource('p1', 'Patient', 'a');
    await storage.deleteResource('p1', 'Patient', 'never');
    expect((await storage.searchResources('p1', 'Patient')).total).toBe(0);
    const again = await storage.createResource('p1', { resourceType: 'Patient', id: 'a', active: true });
    expect(again.meta.versionId).not.toBe(r.meta.versionId);
    expect((await storage.readResource('p1', 'Patient', 'a')).active).toBe(true);
    const { created } = await storage.updateResource('p1', { resourceType: 'Patient', id: 'a' });
    expect(created).toBe(false);
  });
}

/** Batches all-or-nothing, stored text exact, concurrent ifMatch updates. */
function resourceBatchTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('writeResources is all-or-nothing', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'exists' });
    await rejectsWith(
      storage.writeResources('p1', [
        { op: 'create', resource: { resourceType: 'Patient', id: 'new1' } },
        { op: 'update', resource: { resourceType: 'Patient', id: 'exists', active: true } },
        { op: 'create', resource: { resourceType: 'Patient', id: 'exists' } },
      ]),
      CONFLICT,
    );
    await rejectsWith(storage.readResource('p1', 'Patient', 'new1'), NOT_FOUND);
    expect((await storage.readResource('p1', 'Patient', 'exists')).active).toBeUndefined();
    const results = await storage.writeResources('p1', [
      { op: 'create', resource: { resourceType: 'Patient', id: 'new1' } },
      { op: 'update', resource: { resourceType: 'Patient', id: 'new1', active: true } },
      { op: 'update', resource: { resourceType: 'Observation', id: 'o1', status: 'final' } },
      { op: 'delete', resourceType: 'Patient', id: 'exists' },
    ]);
    expect(results.map((r) => r.op)).toEqual(['create', 'update', 'update', 'delete']);
    expect(results[1]!.created).toBe(false);
    expect(results[2]!.created).toBe(true);
    expect(results[3]!.resource).toBeUndefined();
    expect((await storage.readResource('p1', 'Patient', 'new1')).active).toBe(true);
    await rejectsWith(storage.readResource('p1', 'Patient', 'exists'), NOT_FOUND);
  });

  it('stores any text exactly, answers copies, and writes resourceType and id first', async () => {
    const texts = ['"quoted" \\ back\\slash', 'Zoë Ñúñez 日本語 😀', '{"not":"json"}', ''];
    const input = { resourceType: 'Patient', active: true, name: [{ given: [...texts] }] };
    const results = await storage.writeResources('p1', [
      { op: 'create', resource: { resourceType: 'Patient', id: 'gone' } },
      { op: 'create', resource: input },
      { op: 'delete', resourceType: 'Patient', id: 'gone' },
      { op: 'create', resource: { ...input, id: 'second', meta: { source: 's' }, gender: 'other' } },
    ]);
    input.name[0]!.given[0] = 'changed';
    const [first, second] = [results[1]!.resource!, results[3]!.resource!];
    expect(first.name).toEqual([{ given: texts }]);
    for (const r of [first, second]) {
      expect(Object.keys(r).slice(0, 2)).toEqual(['resourceType', 'id']);
      expect(await storage.readResource('p1', 'Patient', r.id)).toEqual(r);
    }
    expect(second).toMatchObject({ meta: { source: 's' }, gender: 'other' });
    await rejectsWith(storage.readResource('p1', 'Patient', 'gone'), NOT_FOUND);
  });

  it('never loses a write under concurrent ifMatch updates', async () => {
    await storage.createResource('p1', { resourceType: 'Basic', id: 'counter', count: 0 });
    const worker = async (increments: number) => {
      for (let done = 0; done < increments;) {
        const current = await storage.readResource('p1', 'Basic', 'counter');
        try {
          await storage.updateResource(
            'p1',
            { ...current, count: (current.count as number) + 1 },
            { ifMatch: current.meta.versionId },
          );
          done += 1;
        } catch (error) {
          if (code(error) !== PRECONDITION) throw error;
        }
      }
    };
    await Promise.all([worker(10), worker(10), worker(10), worker(10)]);
    expect((await storage.readResource('p1', 'Basic', 'counter')).count).toBe(40);
  });
}

/** The default order, and filters by ids, lastUpdated, compartment and where. */
function searchFilterTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });
  const seed = () => seedObservations(storage);

  it('returns every live resource of a type, by lastUpdated then id by default', async () => {
    const made = await seed();
    await storage.deleteResource('p1', 'Observation', 'o4');
    const page = await storage.searchResources('p1', 'Observation');
    expect(page.total).toBe(3);
    expect(page.resources).toEqual(made.slice(0, 3));
    expect((await storage.searchResources('p1', 'Condition')).total).toBe(0);
  });

  it('filters by ids, lastUpdated, compartment and where', async () => {
    const made = await seed();
    expect(
      (
        await storage.searchResources('p1', 'Observation', {
          search: typeSearch('Observation', [idFilter(['o2', 'o3', 'zz'])]),
        })
      ).resources.map((r) => r.id),
    ).toEqual(['o2', 'o3']);
    const inRange = (range: { ge?: number; lt?: number }) =>
      storage.searchResources('p1', 'Observation', {
        search: typeSearch('Observation', lastUpdatedFilters(range)),
      });
    const t2 = Date.parse(made[1]!.meta.lastUpdated);
    const after = await inRange({ ge: t2 + 1 });
    expect(after.resources.every((r) => Date.parse(r.meta.lastUpdated) > t2)).toBe(true);
    expect(after.resources.map((r) => r.id)).not.toContain('o1');
    const t1 = Date.parse(made[0]!.meta.lastUpdated);
    const upTo = await inRange({ lt: t1 + 1 });
    expect(upTo.resources.map((r) => r.id)).toContain('o1');
    expect(upTo.resources.every((r) => Date.parse(r.meta.lastUpdated) <= t1)).toBe(true);
    expect((await inRange({ lt: t1 })).resources.map((r) => r.id)).not.toContain('o1');
    const all = await inRange({ ge: 0, lt: Date.now() + 60_000 });
    expect(all.total).toBe(4);
    const comp = await storage.searchResources('p1', 'Observation', {
      search: compartmentSearch('Observation', ['a']),
    });
    expect(comp.resources.map((r) => r.id)).toEqual(['o1', 'o3']);
    const comp2 = await storage.searchResources('p1', 'Observation', {
      search: compartmentSearch('Observation', ['a', 'b']),
      sort: '-_id',
    });
    expect(comp2.resources.map((r) => r.id)).toEqual(['o3', 'o2', 'o1']);
    expect(
      (
        await storage.searchResources('p1', 'Patient', { search: compartmentSearch('Patient', ['a']) })
      ).resources.map((r) => r.id),
    ).toEqual(['a']);
    const where = await storage.searchResources('p1', 'Observation', {
      where: (r) => (r.subject as { reference: string }).reference === 'Patient/a',
    });
    expect(where.total).toBe(2);
    // The compartment index follows updates.
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'o1',
      subject: { reference: 'Patient/b' },
    });
    expect(
      (
        await storage.searchResources('p1', 'Observation', {
          search: compartmentSearch('Observation', ['a']),
        })
      ).resources.map((r) => r.id),
    ).toEqual(['o3']);
    await storage.deleteResource('p1', 'Observation', 'o2');
    expect(
      (
        await storage.searchResources('p1', 'Observation', {
          search: compartmentSearch('Observation', ['b']),
        })
      ).resources.map((r) => r.id),
    ).toEqual(['o1']);
  });
}

/** Sort, offset and count, totals; `order` values and keyset paging. */
function searchPagingTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });
  const seed = () => seedObservations(storage);

  it('sorts, pages with offset and count, and counts totals', async () => {
    await seed();
    const byId = await storage.searchResources('p1', 'Observation', { sort: '_id' });
    expect(byId.resources.map((r) => r.id)).toEqual(['o1', 'o2', 'o3', 'o4']);
    const desc = await storage.searchResources('p1', 'Observation', { sort: '-_lastUpdated' });
    expect(desc.resources.map((r) => r.id)).toEqual(['o4', 'o3', 'o2', 'o1']);
    const page = await storage.searchResources('p1', 'Observation', { sort: '_id', offset: 1, count: 2 });
    expect(page).toMatchObject({ total: 4 });
    expect(page.resources.map((r) => r.id)).toEqual(['o2', 'o3']);
    const none = await storage.searchResources('p1', 'Observation', { count: 0 });
    expect(none).toEqual({ total: 4, resources: [] });
    const wherePage = await storage.searchResources('p1', 'Observation', {
      sort: '_id',
      offset: 1,
      count: 1,
      where: (r) => r.id !== 'o2',
    });
    expect(wherePage.total).toBe(3);
    expect(wherePage.resources.map((r) => r.id)).toEqual(['o3']);
    const past = await storage.searchResources('p1', 'Observation', { offset: 10 });
    expect(past).toEqual({ total: 4, resources: [] });
  });

  it('orders by `order` values (null last, ties by id) and pages by keyset after and before', async () => {
    const made = await seed();
    // o1 and o3 share a value, o4 has none: ascending b, a, a, -; descending a, a, b, -.
    const value: Record<string, SortValue> = { o1: 'a', o2: 'b', o3: 'a', o4: null };
    const keys = (r: StoredResource): SortValue[] => [value[r.id] ?? null];
    const ids = (page: { resources: StoredResource[] }) => page.resources.map((r) => r.id);
    const asc = { order: { keys, descending: [false] } };
    const desc = { order: { keys, descending: [true] } };
    expect(ids(await storage.searchResources('p1', 'Observation', asc))).toEqual(['o1', 'o3', 'o2', 'o4']);
    expect(ids(await storage.searchResources('p1', 'Observation', desc))).toEqual(['o2', 'o1', 'o3', 'o4']);
    const second = await storage.searchResources('p1', 'Observation', {
      ...asc,
      count: 2,
      after: { id: 'o3', keys: ['a'] },
    });
    expect(second).toMatchObject({ total: 4 });
    expect(ids(second)).toEqual(['o2', 'o4']);
    const back = await storage.searchResources('p1', 'Observation', {
      ...asc,
      count: 2,
      before: { id: 'o2', keys: ['b'] },
    });
    expect(ids(back)).toEqual(['o1', 'o3']);
    const filtered = await storage.searchResources('p1', 'Observation', {
      ...desc,
      where: (r) => r.id !== 'o2',
      count: 1,
      after: { id: 'o1', keys: ['a'] },
    });
    expect(filtered.total).toBe(3);
    expect(ids(filtered)).toEqual(['o3']);
    expect(await storage.searchResources('p1', 'Observation', { ...asc, count: 0 })).toEqual({
      total: 4,
      resources: [],
    });

    // Native sorts: the position of a match that has gone still places the page.
    const [o1, o2, o3] = made;
    const lu = (r: StoredResource | undefined) => ({ id: r!.id, lastUpdated: r!.meta.lastUpdated });
    await storage.deleteResource('p1', 'Observation', 'o2');
    const next = await storage.searchResources('p1', 'Observation', { count: 1, after: lu(o2) });
    expect(next).toMatchObject({ total: 3 });
    expect(ids(next)).toEqual(['o3']);
    const prev = await storage.searchResources('p1', 'Observation', { count: 5, before: lu(o3) });
    expect(ids(prev)).toEqual(['o1']);
    const descLu = await storage.searchResources('p1', 'Observation', {
      sort: '-_lastUpdated',
      after: lu(o3),
    });
    expect(ids(descLu)).toEqual(['o1']);
    const descBefore = await storage.searchResources('p1', 'Observation', {
      sort: '-_lastUpdated',
      before: lu(o1),
      count: 1,
    });
    expect(ids(descBefore)).toEqual(['o3']);
    const byId = await storage.searchResources('p1', 'Observation', {
      sort: '-_id',
      after: { id: 'o4' },
      where: (r) => r.id !== 'o1',
    });
    expect(ids(byId)).toEqual(['o3']);
    const idBefore = await storage.searchResources('p1', 'Observation', {
      sort: '_id',
      before: { id: 'o4' },
      count: 1,
    });
    expect(ids(idBefore)).toEqual(['o3']);
    const whereBefore = await storage.searchResources('p1', 'Observation', {
      before: lu(made[3]),
      where: (r) => r.id !== 'o3',
      count: 1,
    });
    expect(whereBefore).toMatchObject({ total: 2 });
    expect(ids(whereBefore)).toEqual(['o1']);
  });
}

/** Four Observations of project p1 (subjects a, b, a, c) with Patient/a, and one Observation of p2. */
async function seedObservations(storage: Storage): Promise<StoredResource[]> {
  const made: StoredResource[] = [];
  for (const [id, subject] of [
    ['o1', 'Patient/a'],
    ['o2', 'Patient/b'],
    ['o3', 'Patient/a'],
    ['o4', 'Patient/c'],
  ] as const) {
    made.push(
      await storage.createResource('p1', {
        resourceType: 'Observation',
        id,
        subject: { reference: subject },
      }),
    );
  }
  await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
  await storage.createResource('p2', {
    resourceType: 'Observation',
    id: 'o1',
    subject: { reference: 'Patient/a' },
  });
  return made;
}
