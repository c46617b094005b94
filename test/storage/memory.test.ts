import { compartmentSearch } from '../../src/storage/search-request.js';
import { describe, expect, it } from 'vitest';
import { memoryStorage } from '../../src/stores.js';
import { collectNdjson, runStorageContract } from '../../src/testing/storage-contract.js';

runStorageContract('memoryStorage', () => {
  const storage = memoryStorage();
  return Promise.resolve({ storage, cleanup: () => storage.close() });
});

describe('memoryStorage', () => {
  it('answers a write with its stored text, measured, and the resource parsed from it on demand', async () => {
    const storage = memoryStorage();
    const [created, updated] = await storage.writeResources('p1', [
      { op: 'create', resource: { resourceType: 'Patient', name: [{ family: 'Zoë' }] } },
      { op: 'update', resource: { resourceType: 'Patient', id: 'q', active: true } },
    ]);
    const stored = created!.stored!;
    expect(stored.bytes).toBe(Buffer.byteLength(stored.json));
    expect(stored.bytes).toBeGreaterThan(stored.json.length);
    expect(created!.resource).toEqual(JSON.parse(stored.json));
    // Parsed once, and not the store's: changing it changes no read.
    expect(created!.resource).toBe(created!.resource);
    (created!.resource as { active?: boolean }).active = false;
    const read = await storage.readResource('p1', 'Patient', stored.id);
    expect(read).toEqual(JSON.parse(stored.json));
    const mine = { ...read };
    created!.resource = mine;
    expect(created!.resource).toBe(mine);
    // The JSON form has the plain fields, `created` only when the write says.
    expect(JSON.parse(JSON.stringify(updated))).toEqual({
      op: 'update',
      created: true,
      stored: updated!.stored,
      resource: JSON.parse(updated!.stored!.json),
    });
    expect(Object.keys(JSON.parse(JSON.stringify(created)) as object).sort()).toEqual([
      'op',
      'resource',
      'stored',
    ]);
    await storage.close();
  });

  it('keeps old versions while a snapshot is open and drops them after', async () => {
    // `{ versions: 1 }`: only current versions are kept once no snapshot needs the others.
    const storage = memoryStorage({ history: { versions: 1 } });
    const write = async (round: number) => {
      for (let i = 0; i < 10; i++) {
        await storage.updateResource('p1', {
          resourceType: 'Observation',
          id: `o${i}`,
          value: round,
          subject: { reference: `Patient/p${i % 2}` },
        });
      }
    };
    await write(0);
    const held = await storage.exportSnapshot('p1', { patientIds: ['p0'] });
    for (let round = 1; round <= 300; round++) await write(round);
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', held, { resourceType: 'Observation' }),
    );
    expect(rows).toHaveLength(10);
    expect(rows.every((r) => r.value === 0)).toBe(true);
    const ofP0 = await collectNdjson(
      storage.exportReader.readResources('p1', held, { resourceType: 'Observation', patientIds: ['p0'] }),
    );
    expect(ofP0.map((r) => r.id).sort()).toEqual(['o0', 'o2', 'o4', 'o6', 'o8']);
    await storage.releaseSnapshot(held);
    // Without open snapshots, old versions go; everything current still reads and exports.
    for (let round = 301; round <= 600; round++) await write(round);
    await storage.deleteResource('p1', 'Observation', 'o9');
    const page = await storage.searchResources('p1', 'Observation', {
      search: compartmentSearch('Observation', ['p1']),
      sort: '_id',
    });
    expect(page.resources.map((r) => [r.id, r.value])).toEqual([
      ['o1', 600],
      ['o3', 600],
      ['o5', 600],
      ['o7', 600],
    ]);
    const now = await storage.exportSnapshot('p1');
    const current = await collectNdjson(
      storage.exportReader.readResources('p1', now, { resourceType: 'Observation' }),
    );
    expect(current).toHaveLength(9);
    expect(current.every((r) => r.value === 600)).toBe(true);
    const byP1 = await collectNdjson(
      storage.exportReader.readResources('p1', now, { resourceType: 'Observation', patientIds: ['p1'] }),
    );
    expect(byP1).toHaveLength(4);
    await storage.releaseSnapshot(now);
    // The versions written while the snapshot was held are gone from the history too.
    await expect(storage.readResourceVersion('p1', 'Observation', 'o1', '2')).rejects.toMatchObject({
      code: 'ERR_STORAGE_NOT_FOUND',
    });
    expect((await storage.readResourceVersion('p1', 'Observation', 'o1', '601')).value).toBe(600);
    const history = await storage.readHistory('p1', { type: 'Observation', id: 'o1', count: 5 });
    expect(history.total).toBeLessThan(600);
    await storage.close();
  });
});

describe('the in-transaction write check (engine stores)', () => {
  const code = (error: unknown) => (error as { code?: string }).code;
  /** The next turn of the event loop. */
  const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

  it('refuses a store write inside every transaction, waits an outside write, and stays off between', async () => {
    const storage = memoryStorage();
    for (let round = 0; round < 3; round++) {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let opened!: () => void;
      const open = new Promise<void>((resolve) => (opened = resolve));
      const done = storage.transaction(async (tx) => {
        opened();
        await gate;
        const inside = await storage.createResource('p1', { resourceType: 'Patient' }).then(
          () => 'ok',
          (error: unknown) => code(error),
        );
        expect(inside).toBe('ERR_STORAGE_IN_TRANSACTION');
        await tx.createResource('p1', { resourceType: 'Patient', id: `tx-${round}` });
      });
      await open;
      // A write from another request while the transaction is open waits for it (not refused).
      const outside = storage.createResource('p1', { resourceType: 'Patient', id: `outside-${round}` });
      release();
      await done;
      expect(await outside).toMatchObject({ id: `outside-${round}` });
      // Between transactions, plain writes from any async context go through.
      await nextTurn();
      await Promise.all(
        [1, 2].map((i) => storage.createResource('p1', { resourceType: 'Patient', id: `r${round}-${i}` })),
      );
    }
    const page = await storage.searchResources('p1', 'Patient', {});
    expect(page.total).toBe(3 * 4);
    await storage.close();
  });
});
