import { compartmentSearch } from '../../src/storage/search-request.js';
import fs from 'node:fs';
import os from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { FhirResource, PatientCompartment, Storage } from '../../src/storage/types.js';
import { collectNdjson } from '../../src/testing/storage-contract.js';
import { tempDir } from '../helpers/temp-dir.js';

/** A compartment where `Device.owner` (not in R4's) places a device in a patient's compartment. */
const deviceOwners: PatientCompartment = {
  types: ['Device'],
  params: (type) => (type === 'Device' ? ['owner'] : []),
  patientIds: (resource: FhirResource) => {
    const reference = (resource.owner as { reference?: string } | undefined)?.reference;
    return reference?.startsWith('Patient/') ? [reference.slice('Patient/'.length)] : [];
  },
};

const device = { resourceType: 'Device', id: 'd1', owner: { reference: 'Patient/p1' } };
const observation = { resourceType: 'Observation', id: 'o1', subject: { reference: 'Patient/p1' } };

const open: Storage[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const storage of open.splice(0)) await storage.close();
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

async function compartmentIds(storage: Storage, type: string): Promise<string[]> {
  const page = await storage.searchResources('proj', type, { search: compartmentSearch(type, ['p1']) });
  return page.resources.map((r) => r.id);
}

describe('the compartment storage option', () => {
  it('defaults to the FHIR R4 patient compartment', async () => {
    const storage = memoryStorage();
    open.push(storage);
    await storage.writeResources('proj', [
      { op: 'create', resource: device },
      { op: 'create', resource: observation },
    ]);
    expect(await compartmentIds(storage, 'Observation')).toEqual(['o1']);
    expect(await compartmentIds(storage, 'Device')).toEqual([]);
  });

  it('indexes by the compartment given (memory store)', async () => {
    const storage = memoryStorage({ compartment: deviceOwners });
    open.push(storage);
    await storage.writeResources('proj', [
      { op: 'create', resource: device },
      { op: 'create', resource: observation },
    ]);
    expect(await compartmentIds(storage, 'Device')).toEqual(['d1']);
    expect(await compartmentIds(storage, 'Observation')).toEqual([]);
  });

  it('indexes by the compartment given, also after reopening (file store), and exports in this thread', async () => {
    const dir = tempDir('fpk-compartment-');
    dirs.push(dir);
    let storage = await fileStorage({ dir, durability: 'write', compartment: deviceOwners });
    await storage.writeResources('proj', [
      { op: 'create', resource: device },
      { op: 'create', resource: observation },
    ]);
    // A worker could not rebuild this compartment: no descriptor.
    expect(storage.descriptor).toBeUndefined();
    const snapshot = await storage.exportSnapshot('proj');
    const exported = await collectNdjson(
      storage.exportReader.readResources('proj', snapshot, { resourceType: 'Device', patientIds: ['p1'] }),
    );
    expect(exported.map((r) => r.id)).toEqual(['d1']);
    await storage.releaseSnapshot(snapshot);
    await storage.close();

    // The index files were written for another compartment: opening with R4 recomputes.
    storage = await fileStorage({ dir, durability: 'write' });
    open.push(storage);
    expect(storage.descriptor).toBeDefined();
    expect(await compartmentIds(storage, 'Observation')).toEqual(['o1']);
    expect(await compartmentIds(storage, 'Device')).toEqual([]);
    await storage.close();
    open.pop();
    storage = await fileStorage({ dir, durability: 'write', compartment: deviceOwners });
    open.push(storage);
    expect(await compartmentIds(storage, 'Device')).toEqual(['d1']);
  });

  it('keeps the descriptor when the default is passed explicitly', async () => {
    const dir = tempDir('fpk-compartment-');
    dirs.push(dir);
    const storage = await fileStorage({ dir, durability: 'write', compartment: R4_PATIENT_COMPARTMENT });
    open.push(storage);
    expect(storage.descriptor?.exportName).toBe('openFileExportReader');
  });

  it('fails fast on a value that is not a compartment', async () => {
    const bad = { types: [] } as unknown as PatientCompartment;
    expect(() => memoryStorage({ compartment: bad })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    await expect(fileStorage({ dir: os.tmpdir(), compartment: bad })).rejects.toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });
});
