import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type {
  ExportSnapshot,
  IdentifierToken,
  NdjsonChunk,
  NewUser,
  Storage,
  StorageOperations,
  StoredResource,
  Tombstone,
} from '../storage/types.js';
import { auditStorageContract } from './audit-contract.js';

// The storage contract suite, shipped as `fhir-platform-kit/testing` so that an adapter's author
// can run it (with vitest) against their adapter. The package's own adapters run it in test/storage.

/** What a contract run needs from an adapter: a fresh, empty store and how to dispose of it. */
export type MakeStorage = () => Promise<{ storage: Storage; cleanup: () => Promise<void> }>;

const decoder = new TextDecoder();

/** Reads an export stream back into resources (asserting through vitest), checking each chunk's `count`. */
export async function collectNdjson(chunks: AsyncIterable<NdjsonChunk>): Promise<StoredResource[]> {
  const out: StoredResource[] = [];
  for await (const chunk of chunks) {
    const text = typeof chunk.data === 'string' ? chunk.data : decoder.decode(chunk.data);
    expect(text.endsWith('\n')).toBe(true);
    const lines = text.split('\n').slice(0, -1);
    expect(lines.length).toBe(chunk.count);
    for (const line of lines) out.push(JSON.parse(line) as StoredResource);
  }
  return out;
}

export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

function code(error: unknown): string | undefined {
  return (error as { code?: string }).code;
}

async function rejectsWith(promise: Promise<unknown>, expected: string): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    expect(code(error)).toBe(expected);
    return error;
  }
  throw new Error(`expected a rejection with ${expected}`);
}

const NOT_FOUND = 'ERR_STORAGE_NOT_FOUND';
const CONFLICT = 'ERR_STORAGE_CONFLICT';
const PRECONDITION = 'ERR_STORAGE_PRECONDITION_FAILED';

/** The `projectId` inside the record is ignored: the argument of the call wins. */
function newUser(userName: string, extra: Partial<NewUser> = {}): NewUser {
  return {
    projectId: 'ignored',
    userName,
    userType: 'Practitioner' as const,
    profileId: `prof-${userName}`,
    active: true,
    data: { displayName: userName },
    ...extra,
  };
}

/**
 * The storage contract: every adapter runs this suite. `makeStorage` returns a fresh, empty store
 * and a cleanup that closes it and removes whatever it created.
 */
export function runStorageContract(name: string, makeStorage: MakeStorage): void {
  describe(`storage contract: ${name}`, () => {
    let storage: Storage;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      ({ storage, cleanup } = await makeStorage());
    });
    afterEach(async () => {
      await cleanup();
    });

    auditStorageContract(() => storage);

    describe('projects', () => {
      it('creates, reads, updates, lists and deletes', async () => {
        const created = await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
        expect(created).toMatchObject({ id: 'p1', name: 'One', strictMode: false, version: 1 });
        expect(typeof created.createdAt).toBe('string');
        expect(await storage.readProject('p1')).toEqual(created);
        await rejectsWith(storage.createProject({ id: 'p1', name: 'Again', strictMode: true }), CONFLICT);
        const updated = await storage.updateProject('p1', { name: 'Uno', ownerUserId: 'u1' });
        expect(updated).toMatchObject({
          name: 'Uno',
          ownerUserId: 'u1',
          version: 2,
          createdAt: created.createdAt,
        });
        await storage.createProject({ id: 'p2', name: 'Two', strictMode: true });
        expect((await storage.listProjects()).map((p) => p.id).sort()).toEqual(['p1', 'p2']);
        await storage.deleteProject('p1');
        await rejectsWith(storage.readProject('p1'), NOT_FOUND);
        await rejectsWith(storage.updateProject('p1', { name: 'x' }), NOT_FOUND);
        await rejectsWith(storage.deleteProject('p1'), NOT_FOUND);
        expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p2']);
      });

      it('keeps SCIM settings on create, replaces them on update', async () => {
        const created = await storage.createProject({
          id: 'p1',
          name: 'One',
          strictMode: false,
          scim: { defaultUserType: 'Patient', echoUserName: true },
        });
        expect(created.scim).toEqual({ defaultUserType: 'Patient', echoUserName: true });
        expect((await storage.readProject('p1')).scim).toEqual(created.scim);
        const updated = await storage.updateProject('p1', { scim: { echoUserName: false } });
        expect(updated).toMatchObject({ version: 2, scim: { echoUserName: false } });
        expect((await storage.readProject('p1')).scim).toEqual({ echoUserName: false });
        // Other changes leave the settings alone.
        await storage.updateProject('p1', { name: 'Uno' });
        expect((await storage.listProjects())[0]!.scim).toEqual({ echoUserName: false });
      });

      it('deleting a project removes everything in it and nothing else', async () => {
        for (const id of ['p1', 'p2']) {
          await storage.createProject({ id, name: id, strictMode: false });
          await storage.createUser(id, newUser('alice'));
          await storage.createResource(id, { resourceType: 'Patient', id: 'pat' });
          await storage.createMembership(id, { projectId: 'ignored', admin: true, userId: 'x' });
          await storage.createClient({
            id: `c-${id}`,
            projectId: id,
            name: 'c',
            scope: '',
            admin: false,
            superAdmin: false,
          });
          await storage.createExportJob({
            id: 'job',
            projectId: id,
            ownerId: 'c',
            status: 'accepted',
            request: 'http://x/$export',
            transactionTime: new Date().toISOString(),
            params: {},
          });
        }
        await storage.deleteProject('p1');
        expect(await storage.listUsers('p1')).toEqual([]);
        await rejectsWith(storage.readResource('p1', 'Patient', 'pat'), NOT_FOUND);
        expect(await storage.listMemberships('p1')).toEqual([]);
        await rejectsWith(storage.readClient('c-p1'), NOT_FOUND);
        await rejectsWith(storage.readExportJob('p1', 'job'), NOT_FOUND);
        expect(await storage.listUsers('p2')).toHaveLength(1);
        expect((await storage.readResource('p2', 'Patient', 'pat')).id).toBe('pat');
        expect((await storage.readClient('c-p2')).projectId).toBe('p2');
        // The id can be reused afterwards, starting empty.
        await storage.createProject({ id: 'p1', name: 'again', strictMode: false });
        await storage.createUser('p1', newUser('alice'));
        expect((await storage.searchResources('p1', 'Patient')).total).toBe(0);
      });
    });

    describe('users', () => {
      it('creates with a generated id and reads back a copy', async () => {
        const user = await storage.createUser('p1', newUser('alice', { externalId: 'ext-1' }));
        expect(user.id).toMatch(/\S+/);
        expect(user).toMatchObject({ projectId: 'p1', userName: 'alice', externalId: 'ext-1', version: 1 });
        expect(user.createdAt).toBe(user.updatedAt);
        const read = await storage.readUser('p1', user.id);
        expect(read).toEqual(user);
        read.data.displayName = 'changed';
        expect((await storage.readUser('p1', user.id)).data.displayName).toBe('alice');
        const given = await storage.createUser('p1', { ...newUser('bob'), id: 'u-bob' });
        expect(given.id).toBe('u-bob');
        await rejectsWith(storage.createUser('p1', { ...newUser('carol'), id: 'u-bob' }), CONFLICT);
      });

      it('keeps userName unique case-insensitively and externalId exactly, per project', async () => {
        await storage.createUser('p1', newUser('Alice', { externalId: 'E1' }));
        const e1 = await rejectsWith(storage.createUser('p1', newUser('aLICE')), CONFLICT);
        expect((e1 as { attribute?: string }).attribute).toBe('userName');
        const e2 = await rejectsWith(
          storage.createUser('p1', newUser('bob', { externalId: 'E1' })),
          CONFLICT,
        );
        expect((e2 as { attribute?: string }).attribute).toBe('externalId');
        await storage.createUser('p1', newUser('carol', { externalId: 'e1' }));
        // Another project has its own names.
        await storage.createUser('p2', newUser('alice', { externalId: 'E1' }));
      });

      it('finds by userName (case-insensitive), externalId and profileId', async () => {
        const a = await storage.createUser('p1', newUser('Alice', { externalId: 'E1' }));
        await storage.createUser('p1', newUser('bob', { profileId: 'shared' }));
        await storage.createUser('p1', newUser('carol', { profileId: 'shared' }));
        await storage.createUser('p2', newUser('alice'));
        expect(await storage.findUsers('p1', { userName: 'ALICE' })).toEqual([a]);
        expect(await storage.findUsers('p1', { externalId: 'E1' })).toEqual([a]);
        expect(await storage.findUsers('p1', { externalId: 'e1' })).toEqual([]);
        expect(
          (await storage.findUsers('p1', { profileId: 'shared' })).map((u) => u.userName).sort(),
        ).toEqual(['bob', 'carol']);
        expect(await storage.findUsers('p1', { userName: 'alice', externalId: 'nope' })).toEqual([]);
        expect(await storage.findUsers('p3', { userName: 'alice' })).toEqual([]);
      });

      it('updates with ifVersion, renames free the old name, deletes free both names', async () => {
        const a = await storage.createUser('p1', newUser('alice', { externalId: 'E1' }));
        await storage.createUser('p1', newUser('bob'));
        await rejectsWith(storage.updateUser('p1', a.id, { userName: 'BOB' }), CONFLICT);
        await rejectsWith(storage.updateUser('p1', a.id, { active: false }, { ifVersion: 7 }), PRECONDITION);
        const renamed = await storage.updateUser('p1', a.id, { userName: 'alicia' }, { ifVersion: 1 });
        expect(renamed).toMatchObject({
          userName: 'alicia',
          version: 2,
          externalId: 'E1',
          createdAt: a.createdAt,
        });
        // Same name with different case on the same user is fine.
        await storage.updateUser('p1', a.id, { userName: 'ALICIA' });
        expect(await storage.findUsers('p1', { userName: 'alice' })).toEqual([]);
        await storage.createUser('p1', newUser('alice'));
        const noExt = await storage.updateUser('p1', a.id, { externalId: undefined });
        expect(noExt.externalId).toBeUndefined();
        await storage.createUser('p1', newUser('dave', { externalId: 'E1' }));
        await storage.deleteUser('p1', a.id);
        await rejectsWith(storage.readUser('p1', a.id), NOT_FOUND);
        await rejectsWith(storage.deleteUser('p1', a.id), NOT_FOUND);
        await rejectsWith(storage.updateUser('p1', a.id, { active: false }), NOT_FOUND);
        await storage.createUser('p1', newUser('alicia'));
      });

      it('lets exactly one of concurrent creates with the same userName win', async () => {
        const results = await Promise.allSettled(
          ['Zed', 'zed', 'ZED', 'zEd'].map((name) => storage.createUser('p1', newUser(name))),
        );
        expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        for (const r of results) if (r.status === 'rejected') expect(code(r.reason)).toBe(CONFLICT);
        expect(await storage.listUsers('p1')).toHaveLength(1);
      });

      it('lists users by createdAt then id and isolates projects', async () => {
        const ids: string[] = [];
        for (const n of ['c', 'a', 'b']) ids.push((await storage.createUser('p1', newUser(n))).id);
        const list = await storage.listUsers('p1');
        const sorted = [...list].sort((x, y) =>
          x.createdAt < y.createdAt ? -1 : x.createdAt > y.createdAt ? 1 : x.id < y.id ? -1 : 1,
        );
        expect(list).toEqual(sorted);
        expect(list).toHaveLength(3);
        await rejectsWith(storage.readUser('p2', ids[0]!), NOT_FOUND);
        await rejectsWith(storage.updateUser('p2', ids[0]!, { active: false }), NOT_FOUND);
        await rejectsWith(storage.deleteUser('p2', ids[0]!), NOT_FOUND);
        expect(await storage.listUsers('p2')).toEqual([]);
      });

      // Lookup speed is measured by `npm run bench` (SCIM userName eq at 100k users), not timed here.
      it('looks up userName case-insensitively among many users', async () => {
        await storage.transaction(async (tx) => {
          for (let i = 0; i < 20_000; i++)
            await tx.createUser('p1', newUser(`user${i}`, { externalId: `x${i}` }));
        });
        for (let i = 0; i < 1000; i++) {
          const n = (i * 17) % 20_000;
          const found = await storage.findUsers('p1', { userName: `USER${n}` });
          expect(found.map((u) => u.userName)).toEqual([`user${n}`]);
        }
      });
    });

    describe('memberships', () => {
      it('creates, lists with filters, deletes', async () => {
        const m1 = await storage.createMembership('p1', {
          projectId: 'ignored',
          userId: 'u1',
          admin: true,
          profile: 'Practitioner/1',
        });
        const m2 = await storage.createMembership('p1', {
          projectId: 'ignored',
          clientId: 'c1',
          admin: false,
        });
        await storage.createMembership('p2', { projectId: 'ignored', userId: 'u1', admin: false });
        expect(m1).toMatchObject({ projectId: 'p1', userId: 'u1', admin: true });
        expect((await storage.listMemberships('p1')).map((m) => m.id).sort()).toEqual([m1.id, m2.id].sort());
        expect(await storage.listMemberships('p1', { userId: 'u1' })).toEqual([m1]);
        expect(await storage.listMemberships('p1', { clientId: 'c1' })).toEqual([m2]);
        await rejectsWith(storage.deleteMembership('p2', m1.id), NOT_FOUND);
        await storage.deleteMembership('p1', m1.id);
        expect(await storage.listMemberships('p1')).toEqual([m2]);
        await rejectsWith(storage.deleteMembership('p1', m1.id), NOT_FOUND);
      });
    });

    describe('clients', () => {
      it('creates, reads by client_id, lists per project, updates', async () => {
        const c = await storage.createClient({
          id: 'client-1',
          projectId: 'p1',
          name: 'App',
          secretHash: 'h',
          scope: 'system/*.read',
          admin: false,
          superAdmin: false,
        });
        expect(c).toMatchObject({ id: 'client-1', revoked: false });
        await storage.createClient({
          id: 'root',
          projectId: null,
          name: 'Root',
          scope: '',
          admin: true,
          superAdmin: true,
        });
        await rejectsWith(
          storage.createClient({
            id: 'client-1',
            projectId: 'p2',
            name: 'x',
            scope: '',
            admin: false,
            superAdmin: false,
          }),
          CONFLICT,
        );
        expect(await storage.readClient('client-1')).toEqual(c);
        expect((await storage.readClient('root')).projectId).toBeNull();
        expect((await storage.listClients('p1')).map((x) => x.id)).toEqual(['client-1']);
        expect(await storage.listClients('p2')).toEqual([]);
        const updated = await storage.updateClient('client-1', { revoked: true, jwksUri: 'https://x/jwks' });
        expect(updated).toMatchObject({
          revoked: true,
          jwksUri: 'https://x/jwks',
          projectId: 'p1',
          name: 'App',
        });
        expect(await storage.readClient('client-1')).toEqual(updated);
        await rejectsWith(storage.readClient('nope'), NOT_FOUND);
        await rejectsWith(storage.updateClient('nope', { name: 'x' }), NOT_FOUND);
      });
    });

    describe('signing keys and one-time values', () => {
      it('saves (upserting by kid) and lists signing keys', async () => {
        const key = {
          kid: 'k1',
          alg: 'ES256',
          privateJwk: { d: '1' },
          publicJwk: { x: '1' },
          createdAt: '2024-01-01T00:00:00.000Z',
        };
        await storage.saveSigningKey(key);
        await storage.saveSigningKey({ ...key, kid: 'k2', createdAt: '2024-02-01T00:00:00.000Z' });
        await storage.saveSigningKey({ ...key, retiredAt: '2024-03-01T00:00:00.000Z' });
        const keys = await storage.listSigningKeys();
        expect(keys.map((k) => k.kid)).toEqual(['k1', 'k2']);
        expect(keys[0]!.retiredAt).toBe('2024-03-01T00:00:00.000Z');
      });

      it('useOnce detects replays until expiry', async () => {
        expect(await storage.useOnce('jti-1', Date.now() + 60_000)).toBe(true);
        expect(await storage.useOnce('jti-1', Date.now() + 60_000)).toBe(false);
        expect(await storage.useOnce('jti-2', Date.now() - 1)).toBe(true);
        expect(await storage.useOnce('jti-2', Date.now() + 60_000)).toBe(true);
        const results = await Promise.all(
          [1, 2, 3, 4].map(() => storage.useOnce('jti-3', Date.now() + 60_000)),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
      });
    });

    describe('export jobs', () => {
      const job = (id: string, projectId: string) => ({
        id,
        projectId,
        ownerId: 'client-1',
        status: 'accepted' as const,
        request: 'http://localhost/fhir/R4/$export',
        transactionTime: '2024-01-01T00:00:00.000Z',
        params: { _type: ['Patient'] },
      });

      it('creates, reads, updates with ifVersion, lists and deletes', async () => {
        const j = await storage.createExportJob(job('j1', 'p1'));
        expect(j).toMatchObject({ id: 'j1', version: 1, status: 'accepted' });
        await rejectsWith(storage.createExportJob(job('j1', 'p1')), CONFLICT);
        await storage.createExportJob(job('j2', 'p2'));
        await rejectsWith(storage.readExportJob('p2', 'j1'), NOT_FOUND);
        const updated = await storage.updateExportJob(
          'p1',
          'j1',
          { status: 'in-progress' },
          { ifVersion: 1 },
        );
        expect(updated).toMatchObject({ status: 'in-progress', version: 2 });
        await rejectsWith(
          storage.updateExportJob('p1', 'j1', { status: 'completed' }, { ifVersion: 1 }),
          PRECONDITION,
        );
        expect((await storage.listExportJobs()).map((x) => x.id).sort()).toEqual(['j1', 'j2']);
        expect((await storage.listExportJobs({ projectId: 'p2' })).map((x) => x.id)).toEqual(['j2']);
        expect((await storage.listExportJobs({ status: ['in-progress'] })).map((x) => x.id)).toEqual(['j1']);
        await rejectsWith(storage.deleteExportJob('p2', 'j1'), NOT_FOUND);
        await storage.deleteExportJob('p1', 'j1');
        await rejectsWith(storage.readExportJob('p1', 'j1'), NOT_FOUND);
      });
    });

    describe('resources', () => {
      it('creates with id, versionId and lastUpdated, and reads copies', async () => {
        const r = await storage.createResource('p1', { resourceType: 'Patient', name: [{ family: 'Doe' }] });
        expect(r.id).toMatch(/\S+/);
        expect(r.meta.versionId).toMatch(/\S+/);
        expect(Number.isNaN(Date.parse(r.meta.lastUpdated))).toBe(false);
        const read = await storage.readResource('p1', 'Patient', r.id);
        expect(read).toEqual(r);
        (read.name as { family: string }[])[0]!.family = 'X';
        expect(await storage.readResource('p1', 'Patient', r.id)).toEqual(r);
        const given = await storage.createResource('p1', {
          resourceType: 'Patient',
          id: 'given',
          meta: { source: 's' },
        });
        expect(given.id).toBe('given');
        expect(given.meta.source).toBe('s');
        await rejectsWith(storage.createResource('p1', { resourceType: 'Patient', id: 'given' }), CONFLICT);
        await rejectsWith(storage.readResource('p1', 'Patient', 'missing'), NOT_FOUND);
        await rejectsWith(storage.readResource('p1', 'Observation', 'given'), NOT_FOUND);
        await rejectsWith(storage.readResource('p2', 'Patient', 'given'), NOT_FOUND);
      });

      it('rejects an invalid resource type', async () => {
        await rejectsWith(storage.createResource('p1', { resourceType: '../etc' }), 'ERR_STORAGE_INVALID');
      });

      it('updates: new versionId, increasing lastUpdated, created flag, ifMatch', async () => {
        const { resource: v1, created } = await storage.updateResource('p1', {
          resourceType: 'Patient',
          id: 'a',
          active: true,
        });
        expect(created).toBe(true);
        const { resource: v2, created: created2 } = await storage.updateResource('p1', {
          resourceType: 'Patient',
          id: 'a',
          active: false,
        });
        expect(created2).toBe(false);
        expect(v2.meta.versionId).not.toBe(v1.meta.versionId);
        expect(Date.parse(v2.meta.lastUpdated)).toBeGreaterThanOrEqual(Date.parse(v1.meta.lastUpdated));
        expect(v2.meta.lastUpdated > v1.meta.lastUpdated).toBe(true);
        await rejectsWith(
          storage.updateResource('p1', { resourceType: 'Patient', id: 'a' }, { ifMatch: v1.meta.versionId }),
          PRECONDITION,
        );
        const { resource: v3 } = await storage.updateResource(
          'p1',
          { resourceType: 'Patient', id: 'a', gender: 'other' },
          { ifMatch: v2.meta.versionId },
        );
        expect(v3.active).toBeUndefined();
        expect(await storage.readResource('p1', 'Patient', 'a')).toEqual(v3);
      });

      it('lastUpdated strictly increases across writes', async () => {
        const stamps: string[] = [];
        for (let i = 0; i < 50; i++)
          stamps.push((await storage.createResource('p1', { resourceType: 'Basic' })).meta.lastUpdated);
        const more = await Promise.all(
          Array.from({ length: 50 }, () => storage.createResource('p1', { resourceType: 'Basic' })),
        );
        stamps.push(...more.map((r) => r.meta.lastUpdated).sort());
        expect(new Set(stamps).size).toBe(stamps.length);
        for (let i = 1; i < stamps.length; i++) expect(stamps[i]! > stamps[i - 1]!).toBe(true);
      });

      it('deletes into a tombstone; re-creates after delete; deleting an absent id is a no-op', async () => {
        const r = await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
        await rejectsWith(storage.deleteResource('p1', 'Patient', 'a', { ifMatch: 'nope' }), PRECONDITION);
        await storage.deleteResource('p1', 'Patient', 'a', { ifMatch: r.meta.versionId });
        const gone = await rejectsWith(storage.readResource('p1', 'Patient', 'a'), NOT_FOUND);
        expect((gone as { deleted?: boolean }).deleted).toBe(true);
        const missing = await rejectsWith(storage.readResource('p1', 'Patient', 'zzz'), NOT_FOUND);
        expect((missing as { deleted?: boolean }).deleted).toBe(false);
        await storage.deleteResource('p1', 'Patient', 'a');
        await storage.deleteResource('p1', 'Patient', 'never');
        expect((await storage.searchResources('p1', 'Patient')).total).toBe(0);
        const again = await storage.createResource('p1', { resourceType: 'Patient', id: 'a', active: true });
        expect(again.meta.versionId).not.toBe(r.meta.versionId);
        expect((await storage.readResource('p1', 'Patient', 'a')).active).toBe(true);
        const { created } = await storage.updateResource('p1', { resourceType: 'Patient', id: 'a' });
        expect(created).toBe(false);
      });

      it('writeResources is all-or-nothing', async () => {
        await storage.createResource('p1', { resourceType: 'Patient', id: 'exists' });
        await rejectsWith(
          storage.writeResources('p1', [
            { op: 'create', resource: { resourceType: 'Patient', id: 'new1' } },
            { op: 'update', resource: { resourceType: 'Patient', id: 'exists', active: true } },
            { op: 'create', resource: { resourceType: 'Patient', id: 'exists' } },
          ]),
          CONFLICT,
        );
        await rejectsWith(storage.readResource('p1', 'Patient', 'new1'), NOT_FOUND);
        expect((await storage.readResource('p1', 'Patient', 'exists')).active).toBeUndefined();
        const results = await storage.writeResources('p1', [
          { op: 'create', resource: { resourceType: 'Patient', id: 'new1' } },
          { op: 'update', resource: { resourceType: 'Patient', id: 'new1', active: true } },
          { op: 'update', resource: { resourceType: 'Observation', id: 'o1', status: 'final' } },
          { op: 'delete', resourceType: 'Patient', id: 'exists' },
        ]);
        expect(results.map((r) => r.op)).toEqual(['create', 'update', 'update', 'delete']);
        expect(results[1]!.created).toBe(false);
        expect(results[2]!.created).toBe(true);
        expect(results[3]!.resource).toBeUndefined();
        expect((await storage.readResource('p1', 'Patient', 'new1')).active).toBe(true);
        await rejectsWith(storage.readResource('p1', 'Patient', 'exists'), NOT_FOUND);
      });

      it('never loses a write under concurrent ifMatch updates', async () => {
        await storage.createResource('p1', { resourceType: 'Basic', id: 'counter', count: 0 });
        const worker = async (increments: number) => {
          for (let done = 0; done < increments;) {
            const current = await storage.readResource('p1', 'Basic', 'counter');
            try {
              await storage.updateResource(
                'p1',
                { ...current, count: (current.count as number) + 1 },
                { ifMatch: current.meta.versionId },
              );
              done += 1;
            } catch (error) {
              if (code(error) !== PRECONDITION) throw error;
            }
          }
        };
        await Promise.all([worker(10), worker(10), worker(10), worker(10)]);
        expect((await storage.readResource('p1', 'Basic', 'counter')).count).toBe(40);
      });
    });

    describe('search', () => {
      async function seed() {
        const made: StoredResource[] = [];
        for (const [id, subject] of [
          ['o1', 'Patient/a'],
          ['o2', 'Patient/b'],
          ['o3', 'Patient/a'],
          ['o4', 'Patient/c'],
        ] as const) {
          made.push(
            await storage.createResource('p1', {
              resourceType: 'Observation',
              id,
              subject: { reference: subject },
            }),
          );
        }
        await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
        await storage.createResource('p2', {
          resourceType: 'Observation',
          id: 'o1',
          subject: { reference: 'Patient/a' },
        });
        return made;
      }

      it('returns every live resource of a type, by lastUpdated then id by default', async () => {
        const made = await seed();
        await storage.deleteResource('p1', 'Observation', 'o4');
        const page = await storage.searchResources('p1', 'Observation');
        expect(page.total).toBe(3);
        expect(page.resources).toEqual(made.slice(0, 3));
        expect((await storage.searchResources('p1', 'Condition')).total).toBe(0);
      });

      it('filters by ids, lastUpdated, compartment and where', async () => {
        const made = await seed();
        expect(
          (await storage.searchResources('p1', 'Observation', { ids: ['o2', 'o3', 'zz'] })).resources.map(
            (r) => r.id,
          ),
        ).toEqual(['o2', 'o3']);
        const t2 = Date.parse(made[1]!.meta.lastUpdated);
        const after = await storage.searchResources('p1', 'Observation', { lastUpdated: { gt: t2 } });
        expect(after.resources.every((r) => Date.parse(r.meta.lastUpdated) >= t2)).toBe(true);
        expect(after.resources.map((r) => r.id)).not.toContain('o1');
        const upTo = await storage.searchResources('p1', 'Observation', {
          lastUpdated: { le: Date.parse(made[0]!.meta.lastUpdated) },
        });
        expect(upTo.resources.map((r) => r.id)).toContain('o1');
        expect(upTo.resources.map((r) => r.id)).not.toContain('o4');
        const all = await storage.searchResources('p1', 'Observation', {
          lastUpdated: { ge: 0, lt: Date.now() + 60_000 },
        });
        expect(all.total).toBe(4);
        const comp = await storage.searchResources('p1', 'Observation', { compartment: ['a'] });
        expect(comp.resources.map((r) => r.id)).toEqual(['o1', 'o3']);
        const comp2 = await storage.searchResources('p1', 'Observation', {
          compartment: ['a', 'b'],
          sort: '-_id',
        });
        expect(comp2.resources.map((r) => r.id)).toEqual(['o3', 'o2', 'o1']);
        expect(
          (await storage.searchResources('p1', 'Patient', { compartment: ['a'] })).resources.map((r) => r.id),
        ).toEqual(['a']);
        const where = await storage.searchResources('p1', 'Observation', {
          where: (r) => (r.subject as { reference: string }).reference === 'Patient/a',
        });
        expect(where.total).toBe(2);
        // The compartment index follows updates.
        await storage.updateResource('p1', {
          resourceType: 'Observation',
          id: 'o1',
          subject: { reference: 'Patient/b' },
        });
        expect(
          (await storage.searchResources('p1', 'Observation', { compartment: ['a'] })).resources.map(
            (r) => r.id,
          ),
        ).toEqual(['o3']);
        await storage.deleteResource('p1', 'Observation', 'o2');
        expect(
          (await storage.searchResources('p1', 'Observation', { compartment: ['b'] })).resources.map(
            (r) => r.id,
          ),
        ).toEqual(['o1']);
      });

      it('sorts, pages with offset and count, and counts totals', async () => {
        await seed();
        const byId = await storage.searchResources('p1', 'Observation', { sort: '_id' });
        expect(byId.resources.map((r) => r.id)).toEqual(['o1', 'o2', 'o3', 'o4']);
        const desc = await storage.searchResources('p1', 'Observation', { sort: '-_lastUpdated' });
        expect(desc.resources.map((r) => r.id)).toEqual(['o4', 'o3', 'o2', 'o1']);
        const page = await storage.searchResources('p1', 'Observation', { sort: '_id', offset: 1, count: 2 });
        expect(page).toMatchObject({ total: 4 });
        expect(page.resources.map((r) => r.id)).toEqual(['o2', 'o3']);
        const none = await storage.searchResources('p1', 'Observation', { count: 0 });
        expect(none).toEqual({ total: 4, resources: [] });
        const wherePage = await storage.searchResources('p1', 'Observation', {
          sort: '_id',
          offset: 1,
          count: 1,
          where: (r) => r.id !== 'o2',
        });
        expect(wherePage.total).toBe(3);
        expect(wherePage.resources.map((r) => r.id)).toEqual(['o3']);
        const past = await storage.searchResources('p1', 'Observation', { offset: 10 });
        expect(past).toEqual({ total: 4, resources: [] });
      });
    });

    describe('identifier search', () => {
      /** Ids of the matches of `tokens` (ORed), by id. */
      async function ids(tokens: IdentifierToken[], projectId = 'p1', ops: StorageOperations = storage) {
        const page = await ops.searchResources(projectId, 'Observation', { identifier: tokens, sort: '_id' });
        expect(page.total).toBe(page.resources.length);
        return page.resources.map((r) => r.id);
      }

      async function seed() {
        const observation = (id: string, identifier: unknown) => ({
          resourceType: 'Observation',
          id,
          ...(identifier === undefined ? {} : { identifier }),
          subject: { reference: 'Patient/a' },
        });
        await storage.writeResources('p1', [
          { op: 'create', resource: observation('o1', [{ system: 'urn:lab', value: '1' }]) },
          // Several identifiers per resource; one of them without a system.
          {
            op: 'create',
            resource: observation('o2', [
              { system: 'urn:lab', value: '2' },
              { system: 'urn:mrn', value: '1' },
              { value: 'free' },
            ]),
          },
          // A single identifier object (not an array), and one with a system but no value.
          { op: 'create', resource: observation('o3', { system: 'urn:other', value: '1' }) },
          { op: 'create', resource: observation('o4', [{ system: 'urn:lab' }, { value: 1 }]) },
          { op: 'create', resource: observation('o5', undefined) },
          // Parts that would run together if keys were plain concatenations.
          { op: 'create', resource: observation('o6', [{ system: 'urn:a|b', value: 'c' }]) },
          { op: 'create', resource: observation('o7', [{ system: 'urn:a', value: 'b|c' }]) },
        ]);
        // Other types and projects never match.
        await storage.createResource('p1', {
          resourceType: 'Patient',
          id: 'a',
          identifier: [{ system: 'urn:lab', value: '1' }],
        });
        await storage.createResource('p2', observation('o1', [{ system: 'urn:lab', value: '1' }]));
      }

      it('matches system|value, value, system| and |value on any identifier element', async () => {
        await seed();
        expect(await ids([{ system: 'urn:lab', value: '1' }])).toEqual(['o1']);
        expect(await ids([{ system: 'urn:mrn', value: '1' }])).toEqual(['o2']);
        // o4's `value: 1` is a number, not the string '1': no match.
        expect(await ids([{ value: '1' }])).toEqual(['o1', 'o2', 'o3']);
        expect(await ids([{ system: 'urn:lab' }])).toEqual(['o1', 'o2', 'o4']);
        expect(await ids([{ system: null, value: 'free' }])).toEqual(['o2']);
        expect(await ids([{ system: null, value: '1' }])).toEqual([]);
        expect(await ids([{ system: null }])).toEqual(['o2', 'o4']);
        expect(await ids([{ system: 'urn:lab', value: '3' }])).toEqual([]);
        expect(await ids([{ system: 'urn:a|b', value: 'c' }])).toEqual(['o6']);
        expect(await ids([{ system: 'urn:a', value: 'b|c' }])).toEqual(['o7']);
        // Tokens are ORed; a token with neither part matches nothing.
        expect(await ids([{ system: 'urn:other' }, { system: 'urn:lab', value: '2' }, {}])).toEqual([
          'o2',
          'o3',
        ]);
        expect(await ids([])).toEqual([]);
        expect(await ids([{ system: 'urn:lab', value: '1' }], 'p2')).toEqual(['o1']);
        expect(await ids([{ system: 'urn:lab', value: '1' }], 'p3')).toEqual([]);
      });

      it('combines with ids, compartment, lastUpdated, where, sort and paging', async () => {
        await seed();
        const lab = [{ system: 'urn:lab' }];
        const search = (extra: object) =>
          storage.searchResources('p1', 'Observation', { identifier: lab, sort: '_id', ...extra });
        expect((await search({ ids: ['o2', 'o3', 'o4'] })).resources.map((r) => r.id)).toEqual(['o2', 'o4']);
        expect((await search({ compartment: ['a'] })).total).toBe(3);
        expect((await search({ compartment: ['b'] })).total).toBe(0);
        expect((await search({ lastUpdated: { gt: Date.now() + 60_000 } })).total).toBe(0);
        expect(
          (await search({ where: (r: StoredResource) => r.id !== 'o1' })).resources.map((r) => r.id),
        ).toEqual(['o2', 'o4']);
        const page = await search({ sort: '-_id', offset: 1, count: 1 });
        expect(page.total).toBe(3);
        expect(page.resources.map((r) => r.id)).toEqual(['o2']);
        expect(await search({ count: 0 })).toEqual({ total: 3, resources: [] });
      });

      it('follows updates and deletes, in transactions too', async () => {
        await seed();
        // An update that changes the identifiers: the old keys stop matching, the new ones match.
        await storage.updateResource('p1', {
          resourceType: 'Observation',
          id: 'o1',
          identifier: [{ system: 'urn:lab', value: '9' }],
        });
        expect(await ids([{ system: 'urn:lab', value: '1' }])).toEqual([]);
        expect(await ids([{ system: 'urn:lab', value: '9' }])).toEqual(['o1']);
        // An update that drops them.
        await storage.updateResource('p1', { resourceType: 'Observation', id: 'o2' });
        expect(await ids([{ system: 'urn:mrn', value: '1' }])).toEqual([]);
        expect(await ids([{ system: 'urn:lab' }])).toEqual(['o1', 'o4']);
        await storage.deleteResource('p1', 'Observation', 'o4');
        expect(await ids([{ system: 'urn:lab' }])).toEqual(['o1']);
        // Re-created after its delete, with another identifier.
        await storage.createResource('p1', {
          resourceType: 'Observation',
          id: 'o4',
          identifier: { system: 'urn:new', value: 'x' },
        });
        expect(await ids([{ value: 'x' }])).toEqual(['o4']);
        // Several versions of one resource in one batch: only the last one counts.
        await storage.writeResources('p1', [
          {
            op: 'update',
            resource: { resourceType: 'Observation', id: 'o8', identifier: [{ value: 'v1' }] },
          },
          {
            op: 'update',
            resource: { resourceType: 'Observation', id: 'o8', identifier: [{ value: 'v2' }] },
          },
          {
            op: 'update',
            resource: { resourceType: 'Observation', id: 'o9', identifier: [{ value: 'v1' }] },
          },
          { op: 'delete', resourceType: 'Observation', id: 'o9' },
        ]);
        expect(await ids([{ value: 'v1' }, { value: 'v2' }])).toEqual(['o8']);
        // Inside a transaction: its own writes are seen through tx only, and rolled back on throw.
        await expect(
          storage.transaction(async (tx) => {
            await tx.updateResource('p1', {
              resourceType: 'Observation',
              id: 'o1',
              identifier: [{ value: 'tx' }],
            });
            await tx.deleteResource('p1', 'Observation', 'o4');
            expect(await ids([{ value: 'tx' }], 'p1', tx)).toEqual(['o1']);
            expect(await ids([{ system: 'urn:lab', value: '9' }], 'p1', tx)).toEqual([]);
            expect(await ids([{ value: 'x' }], 'p1', tx)).toEqual([]);
            throw new Error('roll back');
          }),
        ).rejects.toThrow('roll back');
        expect(await ids([{ value: 'tx' }])).toEqual([]);
        expect(await ids([{ system: 'urn:lab', value: '9' }])).toEqual(['o1']);
        expect(await ids([{ value: 'x' }])).toEqual(['o4']);
        await storage.createProject({ id: 'p1', name: 'P', strictMode: false });
        await storage.deleteProject('p1');
        expect(await ids([{ value: 'x' }])).toEqual([]);
      });

      it('finds identifiers of any length and characters', async () => {
        const long = 'x'.repeat(5000);
        const values = ['a\u0000b', `${long}1`, `${long}2`, 'é€😀', ' '];
        await storage.writeResources(
          'p1',
          values.map((value, i) => ({
            op: 'create' as const,
            resource: {
              resourceType: 'Observation',
              id: `o${i}`,
              identifier: [{ system: `urn:${value}`, value }],
            },
          })),
        );
        for (const [i, value] of values.entries()) {
          expect(await ids([{ value }])).toEqual([`o${i}`]);
          expect(await ids([{ system: `urn:${value}`, value }])).toEqual([`o${i}`]);
          expect(await ids([{ system: `urn:${value}` }])).toEqual([`o${i}`]);
        }
        expect(await ids([{ value: 'a' }, { value: long }, { value: '' }])).toEqual([]);
      });

      it('reads only the matching resources (an index, not a scan of the type)', async () => {
        const writes = [];
        for (let i = 0; i < 600; i++) {
          writes.push({
            op: 'create' as const,
            resource: {
              resourceType: 'Observation',
              id: `o${i}`,
              identifier: [{ system: 'urn:lab', value: String(i) }],
            },
          });
        }
        await storage.writeResources('p1', writes);
        const parse = vi.spyOn(JSON, 'parse');
        try {
          expect(await ids([{ system: 'urn:lab', value: '42' }, { value: '7' }])).toEqual(['o42', 'o7']);
          // One parse per resource read (a scan would parse all 600).
          expect(parse.mock.calls.length).toBeLessThanOrEqual(2);
        } finally {
          parse.mockRestore();
        }
      });
    });

    describe('transactions', () => {
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
    });

    describe('exports', () => {
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
    });

    describe('lifecycle', () => {
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
    });
  });
}
