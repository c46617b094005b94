import { describe, expect, it } from 'vitest';
import { runStorageContract } from 'fhir-platform-kit/testing';
import { auditedStorage } from '../../examples/custom-storage/audited-storage.js';

// The example adapter proves itself with the contract suite, imported as an adapter author would.
runStorageContract('auditedStorage (examples/custom-storage)', () => {
  const storage = auditedStorage();
  return Promise.resolve({ storage, cleanup: () => storage.close() });
});

describe('auditedStorage', () => {
  it('records acknowledged writes with ids only, and transaction writes only once committed', async () => {
    const storage = auditedStorage();
    try {
      await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
      const patient = await storage.createResource('p1', {
        resourceType: 'Patient',
        name: [{ family: 'BodyMarker' }],
      });
      await storage.readResource('p1', 'Patient', patient.id);
      await expect(
        storage.transaction(async (tx) => {
          await tx.createResource('p1', { resourceType: 'Observation', id: 'rolled-back' });
          throw new Error('abort');
        }),
      ).rejects.toThrow('abort');
      await storage.transaction(async (tx) => {
        await tx.deleteResource('p1', 'Patient', patient.id);
      });
      await expect(storage.readProject('nope')).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });

      const trail = storage.auditTrail();
      expect(trail.map(({ operation, projectId, target }) => ({ operation, projectId, target }))).toEqual([
        { operation: 'createProject', projectId: 'p1', target: 'Project/p1' },
        { operation: 'createResource', projectId: 'p1', target: `Patient/${patient.id}` },
        { operation: 'deleteResource', projectId: 'p1', target: `Patient/${patient.id}` },
      ]);
      expect(JSON.stringify(trail)).not.toContain('BodyMarker');
      for (const entry of trail) expect(Number.isNaN(Date.parse(entry.at))).toBe(false);
    } finally {
      await storage.close();
    }
  });
});
