import { describe, expect, it } from 'vitest';
import { scopedStorage, userDataAccess } from '../../src/fhir/scoped-storage.js';
import type { Principal } from '../../src/http/principal.js';
import { NotFoundError } from '../../src/storage/errors.js';
import type { FhirResource } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';

const patientUser: Principal = {
  projectId: 'p',
  kind: 'user',
  id: 'u',
  scopes: ['user/*.cruds'],
  admin: false,
  superAdmin: false,
  fhirUser: 'Patient/a',
};

const obs = (id: string, patient: string): FhirResource & { id: string } => ({
  resourceType: 'Observation',
  id,
  status: 'final',
  subject: { reference: `Patient/${patient}` },
});

async function setup() {
  const storage = memoryStorage();
  await storage.createProject({ id: 'p', name: 'p', strictMode: false });
  await storage.writeResources('p', [
    { op: 'update', resource: { resourceType: 'Patient', id: 'a' } },
    { op: 'update', resource: { resourceType: 'Patient', id: 'b' } },
    { op: 'update', resource: obs('oa', 'a') },
    { op: 'update', resource: obs('ob', 'b') },
  ]);
  const access = userDataAccess(patientUser, storage, 'p')!;
  return { storage, view: scopedStorage(storage, access) };
}

describe('scopedStorage', () => {
  it('searches, reads and writes within the user compartment only', async () => {
    const { storage, view } = await setup();
    const page = await view.searchResources('p', 'Observation', {});
    expect(page.resources.map((r) => r.id)).toEqual(['oa']);
    expect(page.total).toBe(1);
    expect((await view.searchResources('p', 'Observation', { compartment: ['b'] })).total).toBe(0);
    await expect(view.readResource('p', 'Observation', 'ob')).rejects.toBeInstanceOf(NotFoundError);
    await expect(view.updateResource('p', obs('ob', 'a'))).rejects.toBeInstanceOf(NotFoundError);
    await expect(view.createResource('p', obs('x', 'b'))).rejects.toMatchObject({ status: 403 });
    await expect(view.updateResource('p', obs('oa', 'b'))).rejects.toMatchObject({ status: 403 });
    await expect(view.deleteResource('p', 'Observation', 'ob')).rejects.toBeInstanceOf(NotFoundError);
    await expect(
      view.writeResources('p', [{ op: 'delete', resourceType: 'Observation', id: 'ob' }]),
    ).rejects.toBeInstanceOf(NotFoundError);
    expect((await storage.readResource('p', 'Observation', 'ob')).meta.versionId).toBe('1');
    // Projects, users and the like pass through.
    expect((await view.readProject('p')).id).toBe('p');
  });

  it('keeps its limits inside a transaction, and is never wrapped twice', async () => {
    const { storage, view } = await setup();
    expect(scopedStorage(view, userDataAccess(patientUser, storage, 'p')!)).toBe(view);
    const seen = await view.transaction(async (tx) => {
      await expect(tx.readResource('p', 'Observation', 'ob')).rejects.toBeInstanceOf(NotFoundError);
      return (await tx.searchResources('p', 'Observation', {})).resources.map((r) => r.id);
    });
    expect(seen).toEqual(['oa']);
  });
});
