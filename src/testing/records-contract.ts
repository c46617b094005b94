import { beforeEach, describe, expect, it } from 'vitest';
import type { Storage } from '../storage/types.js';
import { CONFLICT, NOT_FOUND, PRECONDITION, newUser, rejectsWith, code } from './contract-helpers.js';

/**
 * The records' part of the storage contract: projects, users, memberships, clients, signing keys and one-time values, export jobs. Called inside `runStorageContract`, which makes a fresh store before each test.
 */
export function recordsStorageContract(getStorage: () => Storage): void {
  describe('projects', () => projectRecords(getStorage));
  describe('users', () => userRecords(getStorage));
  describe('memberships', () => membershipRecords(getStorage));
  describe('clients', () => clientRecords(getStorage));
  describe('signing keys and one-time values', () => keyRecords(getStorage));
  describe('export jobs', () => exportJobRecords(getStorage));
}

/** Projects: create, read, update, list, delete, and what deleting one removes. */
function projectRecords(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

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

  it("keeps a project's import sources, private keys included, and clears them", async () => {
    const importSources = [
      {
        url: 'https://source.example.org/fhir',
        tokenUrl: 'https://source.example.org/token',
        clientId: 'platform',
        privateKey: { kty: 'EC', crv: 'P-384', x: 'x', y: 'y', d: 'd', kid: 'k1' },
        scope: 'system/*.read',
      },
    ];
    const created = await storage.createProject({ id: 'p1', name: 'One', strictMode: false, importSources });
    expect(created.importSources).toEqual(importSources);
    const second = {
      url: 'http://localhost:8080/fhir',
      tokenUrl: 'http://localhost:8080/token',
      clientId: 'platform-2',
      privateKey: { kty: 'RSA', n: 'n', e: 'AQAB', d: 'd' },
    };
    const updated = await storage.updateProject('p1', { importSources: [...importSources, second] });
    expect(updated.importSources).toEqual([...importSources, second]);
    expect((await storage.readProject('p1')).importSources).toEqual([...importSources, second]);
    // Other changes leave them alone; an update setting them undefined clears them.
    await storage.updateProject('p1', { name: 'Uno' });
    expect((await storage.listProjects())[0]!.importSources).toEqual([...importSources, second]);
    await storage.updateProject('p1', { importSources: undefined });
    expect((await storage.readProject('p1')).importSources).toBeUndefined();
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
}

/** Users: ids, unique names, lookups, versions, concurrent creates, listing. */
function userRecords(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

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
    const e2 = await rejectsWith(storage.createUser('p1', newUser('bob', { externalId: 'E1' })), CONFLICT);
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
    expect((await storage.findUsers('p1', { profileId: 'shared' })).map((u) => u.userName).sort()).toEqual([
      'bob',
      'carol',
    ]);
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
}

/** Memberships: create, list with filters, delete. */
function membershipRecords(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

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
}

/** Clients: create, read by client_id, list per project, update. */
function clientRecords(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

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
}

/** Signing keys (upserted by kid) and one-time values (replays until expiry). */
function keyRecords(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

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
    const results = await Promise.all([1, 2, 3, 4].map(() => storage.useOnce('jti-3', Date.now() + 60_000)));
    expect(results.filter(Boolean)).toHaveLength(1);
  });
}

/** Export jobs: create, read, update with ifVersion, list, delete. */
function exportJobRecords(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });

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
    const updated = await storage.updateExportJob('p1', 'j1', { status: 'in-progress' }, { ifVersion: 1 });
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
}
