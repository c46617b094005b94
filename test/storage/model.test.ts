// Property test: random transactions of user and resource writes, committed or aborted, against
// a plain model of the rules; then the store must agree with the model (and, for the file
// store, still agree after a reopen).
import fs from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { Storage, StorageOperations } from '../../src/storage/types.js';
import { tempDir } from '../helpers/temp-dir.js';

type Op =
  | { k: 'createUser'; name: string; ext: string | undefined }
  | { k: 'updateUser'; slot: number; name: string | undefined; ext: string | null | undefined }
  | { k: 'deleteUser'; slot: number }
  | { k: 'putResource'; id: string; value: number }
  | { k: 'createResource'; id: string }
  | { k: 'deleteResource'; id: string };

interface Model {
  users: Map<string, { userName: string; externalId?: string }>;
  resources: Map<string, { value: number; version: number; deleted: boolean }>;
}

const names = fc.constantFrom('ann', 'ANN', 'bob', 'Bob', 'cy');
const exts = fc.constantFrom('x', 'y', 'X', undefined);
const ids = fc.constantFrom('r1', 'r2', 'r3');
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ k: fc.constant('createUser' as const), name: names, ext: exts }),
  fc.record({
    k: fc.constant('updateUser' as const),
    slot: fc.nat(4),
    name: fc.option(names, { nil: undefined }),
    ext: fc.constantFrom('x', 'y', null, undefined),
  }),
  fc.record({ k: fc.constant('deleteUser' as const), slot: fc.nat(4) }),
  fc.record({ k: fc.constant('putResource' as const), id: ids, value: fc.nat(100) }),
  fc.record({ k: fc.constant('createResource' as const), id: ids }),
  fc.record({ k: fc.constant('deleteResource' as const), id: ids }),
);
const transactions = fc.array(
  fc.record({ ops: fc.array(op, { minLength: 1, maxLength: 5 }), abort: fc.boolean() }),
  {
    minLength: 1,
    maxLength: 8,
  },
);

function cloneModel(m: Model): Model {
  return {
    users: new Map([...m.users].map(([k, v]) => [k, { ...v }])),
    resources: new Map([...m.resources].map(([k, v]) => [k, { ...v }])),
  };
}

function nameTaken(m: Model, name: string, except?: string): boolean {
  return [...m.users].some(([id, u]) => id !== except && u.userName.toLowerCase() === name.toLowerCase());
}
function extTaken(m: Model, ext: string | undefined, except?: string): boolean {
  return ext !== undefined && [...m.users].some(([id, u]) => id !== except && u.externalId === ext);
}

/** Applies one op to the store and, when the model says it succeeds, to the model. */
async function apply(tx: StorageOperations, m: Model, o: Op): Promise<void> {
  const userIds = [...m.users.keys()].sort();
  const expectFailure = async (p: Promise<unknown>) => {
    await expect(p).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_STORAGE_/) as unknown });
  };
  switch (o.k) {
    case 'createUser': {
      const ok = !nameTaken(m, o.name) && !extTaken(m, o.ext);
      const p = tx.createUser('p1', {
        projectId: 'p1',
        userName: o.name,
        ...(o.ext ? { externalId: o.ext } : {}),
        userType: 'Patient',
        profileId: 'x',
        active: true,
        data: {},
      });
      if (!ok) return expectFailure(p);
      const u = await p;
      m.users.set(u.id, { userName: o.name, ...(o.ext ? { externalId: o.ext } : {}) });
      return;
    }
    case 'updateUser': {
      const id = userIds[o.slot % Math.max(1, userIds.length)];
      if (!id) return;
      const current = m.users.get(id)!;
      const next = { ...current };
      if (o.name !== undefined) next.userName = o.name;
      if (o.ext === null) delete next.externalId;
      else if (o.ext !== undefined) next.externalId = o.ext;
      const ok = !nameTaken(m, next.userName, id) && !extTaken(m, next.externalId, id);
      const changes = {
        ...(o.name !== undefined ? { userName: o.name } : {}),
        ...(o.ext === null ? { externalId: undefined } : o.ext !== undefined ? { externalId: o.ext } : {}),
      };
      const p = tx.updateUser('p1', id, changes);
      if (!ok) return expectFailure(p);
      await p;
      m.users.set(id, next);
      return;
    }
    case 'deleteUser': {
      const id = userIds[o.slot % Math.max(1, userIds.length)];
      if (!id) return;
      await tx.deleteUser('p1', id);
      m.users.delete(id);
      return;
    }
    case 'putResource': {
      const r = await tx.updateResource('p1', { resourceType: 'Basic', id: o.id, value: o.value });
      const before = m.resources.get(o.id);
      expect(r.created).toBe(!before || before.deleted);
      m.resources.set(o.id, { value: o.value, version: (before?.version ?? 0) + 1, deleted: false });
      expect(r.resource.meta.versionId).toBe(String(m.resources.get(o.id)!.version));
      return;
    }
    case 'createResource': {
      const before = m.resources.get(o.id);
      const p = tx.createResource('p1', { resourceType: 'Basic', id: o.id, value: -1 });
      if (before && !before.deleted) return expectFailure(p);
      await p;
      m.resources.set(o.id, { value: -1, version: (before?.version ?? 0) + 1, deleted: false });
      return;
    }
    case 'deleteResource': {
      await tx.deleteResource('p1', 'Basic', o.id);
      const before = m.resources.get(o.id);
      if (before && !before.deleted)
        m.resources.set(o.id, { ...before, version: before.version + 1, deleted: true });
      return;
    }
  }
}

async function check(storage: Storage, m: Model): Promise<void> {
  const users = await storage.listUsers('p1');
  expect(
    new Map(
      users.map((u) => [
        u.id,
        { userName: u.userName, ...(u.externalId !== undefined ? { externalId: u.externalId } : {}) },
      ]),
    ),
  ).toEqual(m.users);
  for (const [id, u] of m.users) {
    expect((await storage.findUsers('p1', { userName: u.userName.toUpperCase() })).map((x) => x.id)).toEqual([
      id,
    ]);
    if (u.externalId)
      expect((await storage.findUsers('p1', { externalId: u.externalId })).map((x) => x.id)).toEqual([id]);
  }
  for (const [id, r] of m.resources) {
    if (r.deleted) {
      await expect(storage.readResource('p1', 'Basic', id)).rejects.toMatchObject({ deleted: true });
    } else {
      const stored = await storage.readResource('p1', 'Basic', id);
      expect([stored.value, stored.meta.versionId]).toEqual([r.value, String(r.version)]);
    }
  }
  const live = [...m.resources]
    .filter(([, r]) => !r.deleted)
    .map(([id]) => id)
    .sort();
  expect((await storage.searchResources('p1', 'Basic', { sort: '_id' })).resources.map((r) => r.id)).toEqual(
    live,
  );
  const snapshot = await storage.exportSnapshot('p1');
  let lines = 0;
  for await (const chunk of storage.exportReader.readResources('p1', snapshot, { resourceType: 'Basic' }))
    lines += chunk.count;
  expect(lines).toBe(live.length);
  await storage.releaseSnapshot(snapshot);
}

async function run(storage: Storage, txs: { ops: Op[]; abort: boolean }[], model: Model): Promise<Model> {
  let m = model;
  for (const { ops, abort } of txs) {
    const draft = cloneModel(m);
    const outcome = storage.transaction(async (tx) => {
      for (const o of ops) await apply(tx, draft, o);
      if (abort) throw new Error('abort');
    });
    if (abort) {
      await expect(outcome).rejects.toThrow('abort');
    } else {
      await outcome;
      m = draft;
    }
    await check(storage, m);
  }
  return m;
}

const empty = (): Model => ({ users: new Map(), resources: new Map() });

describe('storage model', () => {
  it('memoryStorage agrees with the model', async () => {
    await fc.assert(
      fc.asyncProperty(transactions, async (txs) => {
        const storage = memoryStorage();
        await run(storage, txs, empty());
        await storage.close();
      }),
      { numRuns: 60 },
    );
  });

  it('fileStorage agrees with the model, also after reopening', async () => {
    await fc.assert(
      fc.asyncProperty(transactions, async (txs) => {
        const dir = tempDir('fpk-model-');
        try {
          let storage = await fileStorage({ dir, durability: 'write' });
          const m = await run(storage, txs, empty());
          await storage.close();
          storage = await fileStorage({ dir, durability: 'write' });
          await check(storage, m);
          await storage.close();
        } finally {
          fs.rmSync(dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 20 },
    );
  });
});
