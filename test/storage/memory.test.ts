import { describe, expect, it } from 'vitest';
import { memoryStorage } from '../../src/stores.js';
import { collectNdjson, runStorageContract } from '../../src/testing/storage-contract.js';

runStorageContract('memoryStorage', () => {
  const storage = memoryStorage();
  return Promise.resolve({ storage, cleanup: () => storage.close() });
});

describe('memoryStorage', () => {
  it('keeps old versions while a snapshot is open and drops them after', async () => {
    const storage = memoryStorage();
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
    const page = await storage.searchResources('p1', 'Observation', { compartment: ['p1'], sort: '_id' });
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
    await storage.close();
  });
});
