import { beforeEach, describe, expect, it } from 'vitest';
import type { HistoryEntry, HistoryQuery, Storage, StoredResource } from '../storage/types.js';
import { collectNdjson, NOT_FOUND, rejectsWith } from './contract-helpers.js';

/** Waits long enough for the next version to be in a later millisecond than the last. */
function tick(ms = 4): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function ms(resource: { lastUpdated: string } | StoredResource): number {
  return Date.parse('meta' in resource ? resource.meta.lastUpdated : resource.lastUpdated);
}

/** `type/id/versionId method` of each entry, for compact assertions. */
function shape(entries: readonly HistoryEntry[]): string[] {
  return entries.map((e) => `${e.resourceType}/${e.id}/${e.versionId} ${e.method}`);
}

/** Every page of a history, following `next`, with `between` run after each page. */
async function allPages(
  storage: Storage,
  projectId: string,
  query: HistoryQuery,
  between: (page: number) => Promise<void> = () => Promise.resolve(),
): Promise<HistoryEntry[]> {
  const entries: HistoryEntry[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 100; page++) {
    const result = await storage.readHistory(projectId, { ...query, ...(cursor ? { cursor } : {}) });
    entries.push(...result.entries);
    if (!result.next) return entries;
    cursor = result.next;
    await between(page);
  }
  throw new Error('history did not end');
}

/**
 * Old versions and history (`readResourceVersion`, `readHistory`), with the store's default
 * retention (`'all'`): part of the storage contract. Called inside `runStorageContract`, which
 * makes a fresh store before each test.
 */
export function historyStorageContract(getStorage: () => Storage): void {
  describe('versions and history', () => {
    versionTests(getStorage);
    historyWindowTests(getStorage);
    historyIsolationTests(getStorage);
  });
}

/** Every version kept, and the type and project listings newest first. */
function versionTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('keeps every version: create, update, delete, re-create', async () => {
    const v1 = await storage.createResource('p1', { resourceType: 'Patient', id: 'a', active: true });
    const { resource: v2 } = await storage.updateResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      active: false,
    });
    await storage.deleteResource('p1', 'Patient', 'a');
    const { resource: v4, created } = await storage.updateResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      gender: 'other',
    });
    expect(created).toBe(true);

    expect(await storage.readResourceVersion('p1', 'Patient', 'a', '1')).toEqual(v1);
    expect(await storage.readResourceVersion('p1', 'Patient', 'a', '2')).toEqual(v2);
    expect(await storage.readResourceVersion('p1', 'Patient', 'a', '4')).toEqual(v4);
    const gone = (await rejectsWith(storage.readResourceVersion('p1', 'Patient', 'a', '3'), NOT_FOUND)) as {
      deleted: boolean;
    };
    expect(gone.deleted).toBe(true);
    for (const [type, id, version] of [
      ['Patient', 'a', '5'],
      ['Patient', 'a', 'x'],
      ['Patient', 'nobody', '1'],
      ['Observation', 'a', '1'],
    ] as const) {
      const missing = (await rejectsWith(
        storage.readResourceVersion('p1', type, id, version),
        NOT_FOUND,
      )) as {
        deleted: boolean;
      };
      expect(missing.deleted).toBe(false);
    }

    const history = await storage.readHistory('p1', { type: 'Patient', id: 'a', count: 10 });
    expect(shape(history.entries)).toEqual([
      'Patient/a/4 POST',
      'Patient/a/3 DELETE',
      'Patient/a/2 PUT',
      'Patient/a/1 POST',
    ]);
    expect(history.total).toBe(4);
    expect(history.next).toBeUndefined();
    const [latest, deletion, second, first] = history.entries;
    expect(latest!.resource).toEqual(v4);
    expect(second!.resource).toEqual(v2);
    expect(first!.resource).toEqual(v1);
    expect(first!.lastUpdated).toBe(v1.meta.lastUpdated);
    expect(deletion!.resource).toBeUndefined();
    expect(deletion!.lastUpdated > v2.meta.lastUpdated && deletion!.lastUpdated < v4.meta.lastUpdated).toBe(
      true,
    );
    // Plain data the caller owns.
    latest!.resource!.active = true;
    expect((await storage.readResource('p1', 'Patient', 'a')).active).toBeUndefined();
  });

  it('lists a type and the whole project newest first, every version of a batch and a transaction', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'p' });
    await storage.writeResources('p1', [
      { op: 'create', resource: { resourceType: 'Observation', id: 'o1', status: 'preliminary' } },
      { op: 'update', resource: { resourceType: 'Observation', id: 'o1', status: 'final' } },
      { op: 'update', resource: { resourceType: 'Patient', id: 'p', active: true } },
    ]);
    await storage.transaction(async (tx) => {
      await tx.createResource('p1', { resourceType: 'Observation', id: 'o2', status: 'final' });
      await tx.updateResource('p1', { resourceType: 'Observation', id: 'o2', status: 'amended' });
      await tx.deleteResource('p1', 'Observation', 'o1');
    });
    const all = await storage.readHistory('p1', { count: 50 });
    expect(shape(all.entries)).toEqual([
      'Observation/o1/3 DELETE',
      'Observation/o2/2 PUT',
      'Observation/o2/1 POST',
      'Patient/p/2 PUT',
      'Observation/o1/2 PUT',
      'Observation/o1/1 POST',
      'Patient/p/1 POST',
    ]);
    expect(all.entries.map((e) => e.lastUpdated)).toEqual(
      all.entries
        .map((e) => e.lastUpdated)
        .sort()
        .reverse(),
    );
    expect(all.entries[2]!.resource).toMatchObject({ id: 'o2', status: 'final', meta: { versionId: '1' } });
    const observations = await storage.readHistory('p1', { type: 'Observation', count: 50 });
    expect(shape(observations.entries)).toEqual(
      shape(all.entries.filter((e) => e.resourceType === 'Observation')),
    );
    expect(await storage.readHistory('p1', { type: 'Encounter', count: 5 })).toEqual({ entries: [] });
    expect((await storage.readHistory('p1', { type: 'Patient', id: 'nobody', count: 5 })).entries).toEqual(
      [],
    );
  });
}

/** `_since` and `_at`, and paging by cursor while others write. */
function historyWindowTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('keeps versions made at or after _since, and those current during _at', async () => {
    const v1 = await storage.createResource('p1', { resourceType: 'Patient', id: 'a', active: true });
    await tick();
    const other = await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'o',
      status: 'final',
    });
    await tick(10);
    const { resource: v2 } = await storage.updateResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      active: false,
    });
    await tick(10);
    await storage.deleteResource('p1', 'Patient', 'a');

    const since = await storage.readHistory('p1', { since: ms(v2), count: 10 });
    expect(shape(since.entries)).toEqual(['Patient/a/3 DELETE', 'Patient/a/2 PUT']);
    const sinceOne = await storage.readHistory('p1', {
      type: 'Patient',
      id: 'a',
      since: ms(v2),
      count: 10,
    });
    expect(sinceOne.total).toBe(2);

    // Between v2 and the delete: v2 of the patient, and the observation (current since before).
    const during = { from: ms(v2) + 3, to: ms(v2) + 5 };
    expect(shape((await storage.readHistory('p1', { at: during, count: 10 })).entries)).toEqual([
      'Patient/a/2 PUT',
      'Observation/o/1 POST',
    ]);
    // A range over the update: both the version it replaced and the new one were current in it.
    const across = { from: ms(other) + 1, to: ms(v2) + 1 };
    expect(
      shape((await storage.readHistory('p1', { type: 'Patient', at: across, count: 10 })).entries),
    ).toEqual(['Patient/a/2 PUT', 'Patient/a/1 POST']);
    // Before the first version: nothing was current.
    const before = { from: ms(v1) - 10, to: ms(v1) - 5 };
    expect((await storage.readHistory('p1', { at: before, count: 10 })).entries).toEqual([]);
    // After the delete, the deletion is what is current.
    const after = { from: Date.now() + 1000, to: Date.now() + 2000 };
    expect(
      shape((await storage.readHistory('p1', { type: 'Patient', at: after, count: 10 })).entries),
    ).toEqual(['Patient/a/3 DELETE']);
  });

  it('pages by cursor while others write: no entry repeated or skipped, later writes left out', async () => {
    for (let i = 0; i < 5; i++) {
      await storage.createResource('p1', { resourceType: 'Patient', id: `p${i}` });
      await storage.updateResource('p1', { resourceType: 'Patient', id: `p${i}`, active: true });
    }
    const expected = shape((await storage.readHistory('p1', { count: 100 })).entries);
    expect(expected).toHaveLength(10);
    let extra = 0;
    const paged = await allPages(storage, 'p1', { count: 3 }, async () => {
      await storage.createResource('p1', { resourceType: 'Patient', id: `new${extra++}` });
      await storage.updateResource('p1', { resourceType: 'Patient', id: 'p0', active: false });
      await storage.deleteResource('p1', 'Patient', 'p4');
    });
    expect(shape(paged)).toEqual(expected);
    const typePaged = await allPages(storage, 'p1', { type: 'Patient', count: 4 });
    // Deleting p4 again is a no-op: one deletion.
    expect(typePaged).toHaveLength(10 + 2 * extra + 1);
    const onePaged = await allPages(storage, 'p1', { type: 'Patient', id: 'p0', count: 1 });
    expect(shape(onePaged).slice(-2)).toEqual(['Patient/p0/2 PUT', 'Patient/p0/1 POST']);

    const none = await storage.readHistory('p1', { type: 'Patient', id: 'p1', count: 0 });
    expect(none.entries).toEqual([]);
    expect(none.total).toBe(2);
  });
}

/** Projects apart, a deleted project forgotten, exports on current versions only. */
function historyIsolationTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('never shows another project, and refuses a cursor it did not give', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await storage.createResource('p2', { resourceType: 'Patient', id: 'a', active: true });
    await storage.updateResource('p2', { resourceType: 'Patient', id: 'b' });
    expect(shape((await storage.readHistory('p1', { count: 10 })).entries)).toEqual(['Patient/a/1 POST']);
    expect(shape((await storage.readHistory('p1', { type: 'Patient', id: 'b', count: 10 })).entries)).toEqual(
      [],
    );
    expect((await storage.readResourceVersion('p1', 'Patient', 'a', '1')).active).toBeUndefined();
    await rejectsWith(storage.readResourceVersion('p1', 'Patient', 'b', '1'), NOT_FOUND);
    await rejectsWith(storage.readResourceVersion('p3', 'Patient', 'a', '1'), NOT_FOUND);
    expect(await storage.readHistory('p3', { count: 10 })).toEqual({ entries: [] });

    // Ids no store could hold find nothing (never a failure of the store).
    await rejectsWith(storage.readResourceVersion('p1', 'Patient', 'a\u0000', '1'), NOT_FOUND);
    await rejectsWith(storage.readResourceVersion('p1', 'Patient', 'a', '1\u0000'), NOT_FOUND);
    expect((await storage.readHistory('p1', { type: 'Patient', id: 'a\u0000', count: 5 })).entries).toEqual(
      [],
    );
    await rejectsWith(storage.readHistory('p1', { count: 10, cursor: 'nonsense' }), 'ERR_STORAGE_INVALID');
    await rejectsWith(storage.readHistory('p1', { id: 'a', count: 10 }), 'ERR_STORAGE_INVALID');
    await rejectsWith(storage.readHistory('p1', { count: -1 }), 'ERR_STORAGE_INVALID');
  });

  it('forgets the history of a deleted project', async () => {
    await storage.createProject({ id: 'gone', name: 'Gone', strictMode: false });
    await storage.createResource('gone', { resourceType: 'Patient', id: 'a' });
    await storage.updateResource('gone', { resourceType: 'Patient', id: 'a', active: true });
    expect((await storage.readHistory('gone', { count: 10 })).entries).toHaveLength(2);
    await storage.deleteProject('gone');
    expect(await storage.readHistory('gone', { count: 10 })).toEqual({ entries: [] });
    await rejectsWith(storage.readResourceVersion('gone', 'Patient', 'a', '1'), NOT_FOUND);
    // A project of that id made again starts a history of its own.
    await storage.createProject({ id: 'gone', name: 'Again', strictMode: false });
    await storage.createResource('gone', { resourceType: 'Patient', id: 'a' });
    expect(shape((await storage.readHistory('gone', { count: 10 })).entries)).toEqual(['Patient/a/1 POST']);
  });

  it('keeps exports on current versions only', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a', active: true });
    await storage.updateResource('p1', { resourceType: 'Patient', id: 'a', active: false });
    await storage.createResource('p1', { resourceType: 'Patient', id: 'b' });
    await storage.deleteResource('p1', 'Patient', 'b');
    await storage.createResource('p1', { resourceType: 'Patient', id: 'c' });
    const snapshot = await storage.exportSnapshot('p1');
    await storage.updateResource('p1', { resourceType: 'Patient', id: 'c', active: true });
    try {
      const exported = await collectNdjson(
        storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' }),
      );
      expect(exported.map((r) => `${r.id}/${r.meta.versionId}`).sort()).toEqual(['a/2', 'c/1']);
    } finally {
      await storage.releaseSnapshot(snapshot);
    }
    expect((await storage.readHistory('p1', { type: 'Patient', count: 20 })).entries).toHaveLength(6);
  });
}
