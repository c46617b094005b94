import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { HistoryRetention, Storage } from '../../src/storage/types.js';
import { collectNdjson } from '../../src/testing/index.js';
import { schemaFactory } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { tempDir } from '../helpers/temp-dir.js';

const open: Storage[] = [];
afterEach(async () => {
  for (const storage of open.splice(0)) await storage.close().catch(() => undefined);
});

type Opener = (history: HistoryRetention, dir?: string) => Promise<Storage>;

const stores: [string, Opener][] = [
  ['memory', (history) => Promise.resolve(memoryStorage({ history }))],
  [
    'file',
    (history, dir) =>
      fileStorage({
        dir: dir ?? tempDir('fpk-history-'),
        durability: 'write',
        compactionMinDeadBytes: 0,
        history,
      }),
  ],
];
const url = postgresTestUrl('history retention: PostgreSQL');
if (url) {
  const newSchema = schemaFactory(url);
  stores.push([
    'PostgreSQL',
    (history) => Promise.resolve(postgresStorage({ connectionString: url, schema: newSchema(), history })),
  ]);
}

async function opened(opener: Opener, history: HistoryRetention, dir?: string): Promise<Storage> {
  const storage = await opener(history, dir);
  open.push(storage);
  return storage;
}

/** Writes versions 1..n of Patient/a, one write each (the PostgreSQL sweep counts writes). */
async function writeVersions(storage: Storage, n: number): Promise<void> {
  for (let i = 1; i <= n; i++)
    await storage.updateResource('p1', { resourceType: 'Patient', id: 'a', count: i });
}

/**
 * Versions written per test: past what triggers each store's clean-up (memory: 1,024 droppable
 * versions; PostgreSQL: a sweep every 256 writes; file: dead bytes over live ones).
 */
const VERSIONS: Record<string, number> = { memory: 1100, file: 300, PostgreSQL: 300 };

describe.each(stores)('history retention (%s)', (store, opener) => {
  const N = VERSIONS[store]!;
  it('{ versions: 3 } drops older versions and keeps the last three, exports unchanged', async () => {
    const storage = await opened(opener, { versions: 3 });
    await storage.createResource('p1', { resourceType: 'Patient', id: 'b' });
    await writeVersions(storage, N);
    for (const v of [N, N - 1, N - 2])
      expect((await storage.readResourceVersion('p1', 'Patient', 'a', String(v))).count).toBe(v);
    await expect(storage.readResourceVersion('p1', 'Patient', 'a', '1')).rejects.toMatchObject({
      code: 'ERR_STORAGE_NOT_FOUND',
      deleted: false,
    });
    const history = await storage.readHistory('p1', { type: 'Patient', id: 'a', count: 5 });
    expect(history.entries.slice(0, 3).map((e) => e.versionId)).toEqual([
      String(N),
      String(N - 1),
      String(N - 2),
    ]);
    // Dropped lazily: at most what the last clean-up left, far fewer than were written.
    expect(history.total).toBeLessThan(N / 2);
    expect((await storage.readResourceVersion('p1', 'Patient', 'b', '1')).id).toBe('b');
    const snapshot = await storage.exportSnapshot('p1');
    try {
      const rows = await collectNdjson(
        storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' }),
      );
      expect(rows.map((r) => `${r.id}/${r.meta.versionId}`).sort()).toEqual([`a/${N}`, 'b/1']);
    } finally {
      await storage.releaseSnapshot(snapshot);
    }
  });

  it('{ days: 1 } keeps every version superseded today', async () => {
    const storage = await opened(opener, { days: 1 });
    await writeVersions(storage, N);
    expect((await storage.readResourceVersion('p1', 'Patient', 'a', '1')).count).toBe(1);
    expect((await storage.readHistory('p1', { type: 'Patient', id: 'a', count: 0 })).total).toBe(N);
  });

  it('refuses a retention it cannot apply', async () => {
    for (const history of ['some', { versions: 0 }, { days: 1.5 }, { versions: 2, days: 3 }, null]) {
      await expect(opened(opener, history as HistoryRetention)).rejects.toMatchObject({
        code: 'ERR_INVALID_OPTION',
      });
    }
    expect(store).toBeDefined();
  });
});

describe('file store history across reopen and compaction', () => {
  it("keeps every version under 'all' (logs are never compacted) and lists them after a reopen", async () => {
    const dir = tempDir('fpk-history-');
    let storage = await opened(stores[1]![1], 'all', dir);
    await writeVersions(storage, 300);
    await storage.deleteResource('p1', 'Patient', 'a');
    // Built now, then kept current by the commits that follow.
    expect((await storage.readHistory('p1', { count: 0, type: 'Patient', id: 'a' })).total).toBe(301);
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a', count: 0 });
    const before = await storage.readHistory('p1', { count: 400 });
    expect(before.entries).toHaveLength(302);
    expect(before.entries.slice(0, 3).map((e) => e.method)).toEqual(['POST', 'DELETE', 'PUT']);
    await storage.close();
    storage = await opened(stores[1]![1], 'all', dir);
    const after = await storage.readHistory('p1', { count: 400 });
    expect(after).toEqual(before);
    const log = fs
      .readdirSync(path.join(dir, 'projects'))
      .map((p) => path.join(dir, 'projects', p, 'resources', 'Patient.log'))
      .find((f) => fs.existsSync(f))!;
    expect(fs.readFileSync(log, 'utf8').split('\n').length - 1).toBe(302);
  });

  it('a compaction that keeps old versions leaves their marks right: exports and reopens agree', async () => {
    const dir = tempDir('fpk-history-');
    let storage = await opened(stores[1]![1], { versions: 2 }, dir);
    for (let round = 1; round <= 50; round++) {
      await storage.writeResources(
        'p1',
        Array.from({ length: 5 }, (_, i) => ({
          op: 'update' as const,
          resource: { resourceType: 'Patient', id: `p${i}`, round },
        })),
      );
    }
    const check = async (s: Storage) => {
      const snapshot = await s.exportSnapshot('p1');
      try {
        const rows = await collectNdjson(
          s.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' }),
        );
        expect(rows.map((r) => `${r.id}/${r.meta.versionId}`).sort()).toEqual(
          ['p0', 'p1', 'p2', 'p3', 'p4'].map((id) => `${id}/50`),
        );
      } finally {
        await s.releaseSnapshot(snapshot);
      }
      expect((await s.readResourceVersion('p1', 'Patient', 'p3', '49')).round).toBe(49);
      const history = await s.readHistory('p1', { type: 'Patient', id: 'p3', count: 10 });
      expect(history.entries.map((e) => e.versionId).slice(0, 2)).toEqual(['50', '49']);
    };
    await check(storage);
    await storage.close();
    storage = await opened(stores[1]![1], { versions: 2 }, dir);
    await check(storage);
  });
});
