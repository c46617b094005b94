// `refuseScimOwnedWrites` on its own: the checks of each guarded member, inside transactions too,
// reads passing unchanged, and a check that cannot read the current version refusing the write.
import { describe, expect, it } from 'vitest';
import { SCIM_MANAGED_TAG } from '../../src/common/scim-managed.js';
import { refuseScimOwnedWrites } from '../../src/fhir/scim-owned-writes.js';
import { FhirError } from '../../src/http/http-error.js';
import { StorageError } from '../../src/storage/errors.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';

const owned = {
  resourceType: 'Group',
  id: 'g1',
  type: 'person',
  actual: true,
  meta: { tag: [SCIM_MANAGED_TAG] },
};

async function setup(): Promise<{ raw: Storage; guarded: Storage }> {
  const raw = memoryStorage();
  await raw.createProject({ id: 'p', name: 'p', strictMode: false });
  await raw.updateResource('p', owned);
  await raw.updateResource('p', { resourceType: 'Group', id: 'g2', type: 'person', actual: true });
  return { raw, guarded: refuseScimOwnedWrites(raw) };
}

async function expectRefused(promise: Promise<unknown>): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(FhirError);
  expect(error).toMatchObject({ status: 409, issueCode: 'conflict', message: expect.stringMatching(/SCIM/) });
}

describe('refuseScimOwnedWrites', () => {
  it('refuses every write of what SCIM owns, in and out of transactions', async () => {
    const { raw, guarded } = await setup();
    await expectRefused(guarded.updateResource('p', { ...owned, name: 'x' }));
    await expectRefused(
      guarded.updateResource('p', { resourceType: 'Group', id: 'g1', type: 'person', actual: true }),
    );
    await expectRefused(guarded.deleteResource('p', 'Group', 'g1'));
    await expectRefused(guarded.createResource('p', { ...owned, id: undefined }));
    await expectRefused(guarded.updateResource('p', { ...owned, resourceType: 'Patient', id: 'new' }));
    await expectRefused(
      guarded.writeResources('p', [
        { op: 'create', resource: { resourceType: 'Patient' } },
        { op: 'delete', resourceType: 'Group', id: 'g1' },
      ]),
    );
    await expectRefused(guarded.transaction((tx) => tx.deleteResource('p', 'Group', 'g1')));
    await expectRefused(
      guarded.transaction((tx) => tx.writeResources('p', [{ op: 'update', resource: { ...owned } }])),
    );
    expect((await raw.readResource('p', 'Group', 'g1')).meta.versionId).toBe('1');
    expect((await raw.searchResources('p', 'Patient')).resources).toEqual([]);

    // Everything else passes: other Groups, other types, reads, the store's other members.
    await guarded.updateResource('p', { resourceType: 'Group', id: 'g2', type: 'person', actual: false });
    await guarded.transaction((tx) => tx.deleteResource('p', 'Group', 'g2'));
    expect((await guarded.readResource('p', 'Group', 'g1')).id).toBe('g1');
    expect((await guarded.listProjects()).map((project) => project.id)).toEqual(['p']);
    expect(refuseScimOwnedWrites(guarded)).toBe(guarded);
    await raw.close();
  });

  it('fails closed: a Group whose current version cannot be read is not written', async () => {
    const { raw } = await setup();
    const broken = new Proxy(raw, {
      get(target, property) {
        if (property === 'readResource')
          return () => Promise.reject(new StorageError('ERR_STORAGE_CLOSED', 'unreadable'));
        const value: unknown = Reflect.get(target, property);
        return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
      },
    });
    const guarded = refuseScimOwnedWrites(broken);
    await expect(guarded.deleteResource('p', 'Group', 'g2')).rejects.toThrow('unreadable');
    expect((await raw.readResource('p', 'Group', 'g2')).id).toBe('g2');
    // Other types need no read.
    await guarded.updateResource('p', { resourceType: 'Patient', id: 'pt' });
    await raw.close();
  });
});
