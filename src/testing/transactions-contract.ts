import { beforeEach, describe, expect, it } from 'vitest';
import type {
  ExportSnapshot,
  Storage,
  StorageOperations,
  StoredResource,
  Tombstone,
} from '../storage/types.js';
import {
  collect,
  collectNdjson,
  CONFLICT,
  NOT_FOUND,
  newUser,
  rejectsWith,
  code,
} from './contract-helpers.js';

/**
 * Transactions, export snapshots and the store's lifecycle (close, ping): the last part of the storage contract. Called inside `runStorageContract`, which makes a fresh store before each test.
 */
export function transactionsStorageContract(getStorage: () => Storage): void {
  describe('transactions', () => transactionTests(getStorage));
  describe('exports', () => exportTests(getStorage));
  describe('lifecycle', () => lifecycleTests(getStorage));
}

/** Transactions: all or nothing, invisible until committed, the store usable inside, tx dead after. */
function transactionTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('commits all writes together and returns the function result', async () => {
    const result = await storage.transaction(async (tx) => {
      await tx.createProject({ id: 'p1', name: 'P', strictMode: false });
      const user = await tx.createUser('p1', newUser('admin'));
      const profile = await tx.createResource('p1', { resourceType: 'Practitioner', id: 'pr1' });
      // Reads through tx see the transaction's own writes.
      expect((await tx.readUser('p1', user.id)).userName).toBe('admin');
      expect((await tx.readResource('p1', 'Practitioner', 'pr1')).id).toBe('pr1');
      expect((await tx.searchResources('p1', 'Practitioner')).total).toBe(1);
      expect(await tx.findUsers('p1', { userName: 'ADMIN' })).toHaveLength(1);
      await tx.updateProject('p1', { ownerUserId: user.id });
      await tx.createMembership('p1', {
        projectId: 'ignored',
        userId: user.id,
        admin: true,
        profile: `Practitioner/${profile.id}`,
      });
      return user.id;
    });
    expect((await storage.readProject('p1')).ownerUserId).toBe(result);
    expect(await storage.listMemberships('p1', { userId: result })).toHaveLength(1);
  });

  it('rolls everything back when the function throws', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'keep', active: true });
    await expect(
      storage.transaction(async (tx) => {
        await tx.createProject({ id: 'p1', name: 'P', strictMode: false });
        await tx.createUser('p1', newUser('admin'));
        await tx.updateResource('p1', { resourceType: 'Patient', id: 'keep', active: false });
        await tx.deleteResource('p1', 'Patient', 'keep');
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    await rejectsWith(storage.readProject('p1'), NOT_FOUND);
    expect(await storage.listUsers('p1')).toEqual([]);
    expect((await storage.readResource('p1', 'Patient', 'keep')).active).toBe(true);
  });

  it('keeps uncommitted writes invisible outside and checks rules inside', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let inside!: () => void;
    const entered = new Promise<void>((resolve) => (inside = resolve));
    const tx = storage.transaction(async (t) => {
      await t.createUser('p1', newUser('alice'));
      await expect(t.createUser('p1', newUser('ALICE'))).rejects.toMatchObject({ code: CONFLICT });
      inside();
      await gate;
    });
    await entered;
    expect(await storage.findUsers('p1', { userName: 'alice' })).toEqual([]);
    // A write outside waits for the transaction and then sees its result.
    // The rejection handler is attached at once: the write may fail before `tx` resumes us.
    const outside = rejectsWith(storage.createUser('p1', newUser('alice')), CONFLICT);
    release();
    await tx;
    await outside;
    expect(await storage.findUsers('p1', { userName: 'alice' })).toHaveLength(1);
  });

  it('never hangs on a write through the store inside a transaction; tx is dead after it ends', async () => {
    let saved: StorageOperations | undefined;
    let afterwards: Promise<StoredResource> | undefined;
    await storage.transaction(async (tx) => {
      saved = tx;
      // Work started inside that writes after the transaction ended is an ordinary write.
      afterwards = new Promise((resolve) => setTimeout(resolve, 20)).then(() =>
        storage.createResource('p1', { resourceType: 'Patient', id: 'afterwards' }),
      );
      // Adapters that serialize writers refuse it (ERR_STORAGE_IN_TRANSACTION); others may run it.
      const outcome = await storage.createResource('p1', { resourceType: 'Patient' }).then(
        () => 'ok',
        (error: unknown) => code(error),
      );
      expect(['ok', 'ERR_STORAGE_IN_TRANSACTION']).toContain(outcome);
    });
    const late = await saved!.createResource('p1', { resourceType: 'Patient' }).then(
      () => 'ok',
      (error: unknown) => code(error) ?? 'error',
    );
    expect(late).not.toBe('ok');
    expect((await afterwards!).id).toBe('afterwards');
  });

  it('a failed operation inside a transaction leaves no partial writes', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'exists' });
    await storage.transaction(async (tx) => {
      await expect(
        tx.writeResources('p1', [
          { op: 'create', resource: { resourceType: 'Patient', id: 'half' } },
          { op: 'create', resource: { resourceType: 'Patient', id: 'exists' } },
        ]),
      ).rejects.toMatchObject({ code: CONFLICT });
      await tx.createResource('p1', { resourceType: 'Patient', id: 'other' });
    });
    await rejectsWith(storage.readResource('p1', 'Patient', 'half'), NOT_FOUND);
    expect((await storage.readResource('p1', 'Patient', 'other')).id).toBe('other');
  });
}

/** Exports: a snapshot of the live resources, filtered by since and compartments, projects apart, the worker descriptor. */
function exportTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  async function seedForExport() {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'pa' });
    await storage.createResource('p1', { resourceType: 'Patient', id: 'pb' });
    const a = await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'a',
      subject: { reference: 'Patient/pa' },
    });
    await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'b',
      subject: { reference: 'Patient/pb' },
    });
    await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'c',
      subject: { reference: 'Patient/pa' },
    });
    await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'gone',
      subject: { reference: 'Patient/pa' },
    });
    await storage.deleteResource('p1', 'Observation', 'gone');
    await storage.createResource('p2', { resourceType: 'Observation', id: 'other' });
    return a;
  }

  it('reads every live resource as of the snapshot, whatever happens after', async () => {
    const a = await seedForExport();
    const snapshot = await storage.exportSnapshot('p1');
    expect(Number.isNaN(Date.parse(snapshot.takenAt))).toBe(false);
    // takenAt is after every version it includes.
    expect(snapshot.takenAt >= a.meta.lastUpdated).toBe(true);
    // The snapshot is plain JSON.
    const plain = JSON.parse(JSON.stringify(snapshot)) as ExportSnapshot;
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'a',
      status: 'amended',
      subject: { reference: 'Patient/pb' },
    });
    await storage.deleteResource('p1', 'Observation', 'b');
    await storage.createResource('p1', { resourceType: 'Observation', id: 'late' });
    await storage.createResource('p1', { resourceType: 'Condition', id: 'late' });
    await storage.createResource('p1', { resourceType: 'Observation', id: 'gone' });
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', plain, { resourceType: 'Observation' }),
    );
    expect(rows.map((r) => r.id).sort()).toEqual(['a', 'b', 'c']);
    expect(rows.find((r) => r.id === 'a')).toEqual(a);
    expect(
      await collectNdjson(storage.exportReader.readResources('p1', plain, { resourceType: 'Condition' })),
    ).toEqual([]);
    // Deletions up to the snapshot, not re-created by then.
    const deleted = await collect(
      storage.exportReader.readDeleted('p1', plain, { resourceType: 'Observation' }),
    );
    expect(deleted.map((t: Tombstone) => t.id)).toEqual(['gone']);
    expect(deleted[0]).toMatchObject({ resourceType: 'Observation' });
    expect(Number.isNaN(Date.parse(deleted[0]!.deletedAt))).toBe(false);
    // A new snapshot sees the new state.
    const later = await storage.exportSnapshot('p1');
    const rows2 = await collectNdjson(
      storage.exportReader.readResources('p1', later, { resourceType: 'Observation' }),
    );
    expect(rows2.map((r) => r.id).sort()).toEqual(['a', 'c', 'gone', 'late']);
    expect(rows2.find((r) => r.id === 'a')!.status).toBe('amended');
    const deleted2 = await collect(
      storage.exportReader.readDeleted('p1', later, { resourceType: 'Observation' }),
    );
    expect(deleted2.map((t) => t.id)).toEqual(['b']);
    await storage.releaseSnapshot(snapshot);
    await storage.releaseSnapshot(later);
  });

  it('filters by since and by patient compartments as of the snapshot', async () => {
    await seedForExport();
    await new Promise((resolve) => setTimeout(resolve, 5));
    const mid = await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'd',
      subject: { reference: 'Patient/pb' },
    });
    const since = Date.parse(mid.meta.lastUpdated) - 1;
    const snapshot = await storage.exportSnapshot('p1', { patientIds: ['pa'] });
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'c',
      subject: { reference: 'Patient/pb' },
    });
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'b',
      subject: { reference: 'Patient/pa' },
    });
    const recent = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, { resourceType: 'Observation', since }),
    );
    expect(recent.map((r) => r.id)).toEqual(['d']);
    const ofPa = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, {
        resourceType: 'Observation',
        patientIds: ['pa'],
      }),
    );
    expect(ofPa.map((r) => r.id).sort()).toEqual(['a', 'c']);
    const patients = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient', patientIds: ['pa'] }),
    );
    expect(patients.map((r) => r.id)).toEqual(['pa']);
    const sinceDeleted = await collect(
      storage.exportReader.readDeleted('p1', snapshot, {
        resourceType: 'Observation',
        since: Date.now() + 1000,
      }),
    );
    expect(sinceDeleted).toEqual([]);
    await storage.releaseSnapshot(snapshot);
  });

  it('keeps projects apart in exports', async () => {
    await seedForExport();
    const snapshot = await storage.exportSnapshot('p2');
    const rows = await collectNdjson(
      storage.exportReader.readResources('p2', snapshot, { resourceType: 'Observation' }),
    );
    expect(rows.map((r) => r.id)).toEqual(['other']);
    await storage.releaseSnapshot(snapshot);
  });

  it('describes how a worker reopens it, as plain data when present', async () => {
    if (storage.descriptor) {
      expect(JSON.parse(JSON.stringify(storage.descriptor))).toEqual(storage.descriptor);
      expect(typeof storage.descriptor.module).toBe('string');
      expect(typeof storage.descriptor.exportName).toBe('string');
    }
    await Promise.resolve();
  });
}

/** Lifecycle: ping, calls after close, writes queued before close. */
function lifecycleTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

  it('answers ping while open and rejects it with StorageClosedError once closed', async () => {
    await expect(storage.ping()).resolves.toBeUndefined();
    await storage.close();
    await rejectsWith(storage.ping(), 'ERR_STORAGE_CLOSED');
  });

  it('rejects calls after close with StorageClosedError', async () => {
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await storage.close();
    await rejectsWith(storage.readResource('p1', 'Patient', 'a'), 'ERR_STORAGE_CLOSED');
    await rejectsWith(storage.createUser('p1', newUser('x')), 'ERR_STORAGE_CLOSED');
    await storage.close();
  });

  it('flushes writes already queued when closing', async () => {
    const writes = Array.from({ length: 20 }, (_, i) =>
      storage.createResource('p1', { resourceType: 'Patient', id: `q${i}` }),
    );
    await storage.close();
    const results = await Promise.all(writes);
    expect(results).toHaveLength(20);
  });
}
