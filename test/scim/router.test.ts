import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ENTERPRISE_USER_SCHEMA_ID, PATCH_OP_SCHEMA_ID } from '../../src/scim/schema.js';
import { testToken } from '../helpers/test-auth.js';
import { expectScimError } from '../helpers/protocol-errors.js';
import { createScimApp, MOUNT, SCIM } from './scim-app.js';

const CORE = 'urn:ietf:params:scim:schemas:core:2.0:User';
const GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';

function newUser(overrides: Record<string, unknown> = {}) {
  return {
    schemas: [CORE],
    userName: 'alice@example.org',
    userType: 'Practitioner',
    externalId: 'ext-alice',
    name: { givenName: 'Alice', familyName: 'Liddell' },
    emails: [{ value: 'alice@example.org', type: 'work', primary: true }],
    ...overrides,
  };
}

async function setup(options = {}) {
  const ctx = await createScimApp(options);
  const agent = request(ctx.app);
  const as = (token: string) => ({
    get: (path: string) => agent.get(`${MOUNT}${path}`).set('Authorization', token),
    post: (path: string, body?: unknown) =>
      agent
        .post(`${MOUNT}${path}`)
        .set('Authorization', token)
        .set('Content-Type', SCIM)
        .send(JSON.stringify(body)),
    put: (path: string, body: unknown) =>
      agent
        .put(`${MOUNT}${path}`)
        .set('Authorization', token)
        .set('Content-Type', SCIM)
        .send(JSON.stringify(body)),
    patch: (path: string, body: unknown) =>
      agent
        .patch(`${MOUNT}${path}`)
        .set('Authorization', token)
        .set('Content-Type', SCIM)
        .send(JSON.stringify(body)),
    delete: (path: string) => agent.delete(`${MOUNT}${path}`).set('Authorization', token),
  });
  return { ...ctx, agent, a: as(ctx.admin), b: as(ctx.adminB), as };
}

const patchOp = (...Operations: unknown[]) => ({ schemas: [PATCH_OP_SCHEMA_ID], Operations });

describe('scimRouter: users', () => {
  it('creates a user with its profile resource and membership', async () => {
    const { a, storage } = await setup();
    const res = await a.post('/Users', newUser());
    expect(res.status).toBe(201);
    expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
    expect(res.headers.location).toBe(res.body.meta.location);
    expect(res.headers.location).toMatch(new RegExp(`${MOUNT}/Users/${res.body.id}$`));
    expect(res.headers.etag).toBe('W/"1"');
    expect(res.body.meta.version).toBe('W/"1"');
    expect(res.body.userType).toBe('Practitioner');
    expect(res.body.active).toBe(true);
    const user = await storage.readUser('proj-a', res.body.id);
    expect(user.userName).toBe('alice@example.org');
    expect(res.body.userName).toBe(user.profileId);
    const profile = await storage.readResource('proj-a', 'Practitioner', user.profileId);
    expect(profile.name).toEqual([{ use: 'official', family: 'Liddell', given: ['Alice'] }]);
    expect(profile.telecom).toEqual([{ system: 'email', value: 'alice@example.org', use: 'work', rank: 1 }]);
    const memberships = await storage.listMemberships('proj-a', { userId: user.id });
    expect(memberships).toMatchObject([{ admin: false, profile: `Practitioner/${user.profileId}` }]);
  });

  it('echoes the provided userName with echoUserName', async () => {
    const { a } = await setup({ echoUserName: true });
    const res = await a.post('/Users', newUser());
    expect(res.body.userName).toBe('alice@example.org');
  });

  it('requires a valid userType', async () => {
    const { a } = await setup();
    expectScimError(await a.post('/Users', newUser({ userType: undefined })), 400, 'invalidValue');
    expectScimError(await a.post('/Users', newUser({ userType: 'Robot' })), 400, 'invalidValue');
    expect((await a.post('/Users', newUser({ userType: 'patient' }))).body.userType).toBe('Patient');
  });

  it('finds users by provided userName, profile id and externalId', async () => {
    const { a } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    for (const filter of [
      'userName eq "ALICE@example.org"',
      `userName eq "${created.userName}"`,
      'externalId eq "ext-alice"',
      `id eq "${created.id}"`,
      'emails[type eq "work"].value eq "alice@example.org"',
      'name.familyName sw "lid"',
    ]) {
      const res = await a.get(`/Users?filter=${encodeURIComponent(filter)}`);
      expect(res.status, filter).toBe(200);
      expect(res.body.totalResults, filter).toBe(1);
      expect(res.body.Resources[0].id).toBe(created.id);
    }
    const none = await a.get(`/Users?filter=${encodeURIComponent('externalId eq "EXT-ALICE"')}`);
    expect(none.body).toMatchObject({ totalResults: 0, itemsPerPage: 0, startIndex: 1, Resources: [] });
  });

  it('answers 400 invalidFilter for bad filters and never 500 for users lacking attributes', async () => {
    const { a } = await setup();
    await a.post('/Users', { userName: 'bare', userType: 'Patient' });
    expectScimError(await a.get(`/Users?filter=${encodeURIComponent('userName eq')}`), 400, 'invalidFilter');
    expectScimError(
      await a.get(`/Users?filter=${encodeURIComponent('active gt true')}`),
      400,
      'invalidFilter',
    );
    for (const filter of [
      'emails.value co "x"',
      'name.givenName pr',
      'meta.created gt "2000-01-01T00:00:00Z"',
    ]) {
      const res = await a.get(`/Users?filter=${encodeURIComponent(filter)}`);
      expect(res.status).toBe(200);
    }
  });

  it('pages with stable order, count limits and sorting', async () => {
    const { a } = await setup({ maxResults: 3 });
    const names = ['carol', 'alice', 'bob', 'dave', 'eve'];
    for (const n of names) await a.post('/Users', newUser({ userName: n, externalId: n, displayName: n }));
    const all = await a.get('/Users?count=100');
    expect(all.body.itemsPerPage).toBe(3);
    expect(all.body.totalResults).toBe(5);
    const page1 = await a.get('/Users?startIndex=0&count=2');
    const page2 = await a.get('/Users?startIndex=3&count=2');
    const page3 = await a.get('/Users?startIndex=5&count=2');
    const ids = [...page1.body.Resources, ...page2.body.Resources, ...page3.body.Resources].map(
      (r) => r.externalId,
    );
    expect(ids).toEqual(names);
    expect(page1.body.startIndex).toBe(1);
    expect(page3.body.itemsPerPage).toBe(1);
    const zero = await a.get('/Users?count=-4');
    expect(zero.body).toMatchObject({ totalResults: 5, itemsPerPage: 0, Resources: [] });
    const sorted = await a.get('/Users?sortBy=displayName&sortOrder=descending&count=3');
    expect(sorted.body.Resources.map((r: { displayName: string }) => r.displayName)).toEqual([
      'eve',
      'dave',
      'carol',
    ]);
    expectScimError(await a.get('/Users?count=abc'), 400, 'invalidValue');
    expectScimError(await a.get('/Users?sortOrder=sideways'), 400, 'invalidValue');
  });

  it('applies attributes and excludedAttributes, always returning id', async () => {
    const { a } = await setup();
    const created = (await a.post('/Users?attributes=userName', newUser())).body;
    expect(Object.keys(created).sort()).toEqual(['id', 'schemas', 'userName']);
    const read = await a.get(`/Users/${created.id}?excludedAttributes=emails,id,name.givenName`);
    expect(read.body.id).toBe(created.id);
    expect(read.body.emails).toBeUndefined();
    expect(read.body.name).toEqual({ familyName: 'Liddell' });
    const list = await a.get('/Users?attributes=externalId');
    expect(list.body.Resources).toEqual([{ schemas: [CORE], id: created.id, externalId: 'ext-alice' }]);
    const search = await a.post('/Users/.search', {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:SearchRequest'],
      filter: 'userName eq "alice@example.org"',
      attributes: ['displayName', 'userName'],
      startIndex: 1,
      count: 10,
    });
    expect(search.status).toBe(200);
    expect(search.body.Resources[0]).toEqual({ schemas: [CORE], id: created.id, userName: created.userName });
    const root = await a.post('/.search', { filter: 'externalId eq "ext-alice"' });
    expect(root.body.totalResults).toBe(1);
  });

  it('enforces uniqueness of userName (case-insensitive) and externalId per project', async () => {
    const { a, b } = await setup();
    await a.post('/Users', newUser());
    expectScimError(
      await a.post('/Users', newUser({ userName: 'ALICE@example.org', externalId: 'x' })),
      409,
      'uniqueness',
    );
    expectScimError(await a.post('/Users', newUser({ userName: 'other' })), 409, 'uniqueness');
    expect((await b.post('/Users', newUser())).status).toBe(201);
  });

  it('keeps projects apart', async () => {
    const { a, b } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    expectScimError(await b.get(`/Users/${created.id}`), 404);
    expectScimError(
      await b.patch(`/Users/${created.id}`, patchOp({ op: 'replace', value: { active: false } })),
      404,
    );
    expectScimError(await b.delete(`/Users/${created.id}`), 404);
    expect((await b.get('/Users')).body.totalResults).toBe(0);
    expect((await b.get('/Users?filter=userName%20eq%20%22alice@example.org%22')).body.totalResults).toBe(0);
  });

  it('replaces with PUT, keeping the profile in sync', async () => {
    const { a, storage } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    const put = await a.put(`/Users/${created.id}`, {
      ...newUser(),
      id: created.id,
      name: { givenName: 'Alicia', familyName: 'Liddell' },
      emails: [{ value: 'alicia@example.org', type: 'home' }],
      externalId: undefined,
    });
    expect(put.status).toBe(200);
    expect(put.body.meta.version).toBe('W/"2"');
    expect(put.body.externalId).toBeUndefined();
    expect(put.body.name.givenName).toBe('Alicia');
    const user = await storage.readUser('proj-a', created.id);
    const profile = await storage.readResource('proj-a', 'Practitioner', user.profileId);
    expect(profile.name).toEqual([{ use: 'official', family: 'Liddell', given: ['Alicia'] }]);
    expect(profile.telecom).toEqual([{ system: 'email', value: 'alicia@example.org', use: 'home' }]);
    expectScimError(await a.put(`/Users/${created.id}`, { ...newUser(), id: 'other' }), 400, 'mutability');
    expectScimError(await a.put(`/Users/${created.id}`, newUser({ userType: 'Patient' })), 400, 'mutability');
    expectScimError(await a.put('/Users/nope', newUser()), 404);
    // A replace that does not mention active keeps the current value.
    await a.patch(`/Users/${created.id}`, patchOp({ op: 'replace', path: 'active', value: false }));
    const kept = await a.put(`/Users/${created.id}`, newUser({ displayName: 'changed' }));
    expect(kept.body).toMatchObject({ active: false, displayName: 'changed' });
  });

  it('patches, deactivating while keeping the user readable', async () => {
    const { a, storage } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    const res = await a.patch(`/Users/${created.id}`, patchOp({ op: 'replace', value: { active: false } }));
    expect(res.status).toBe(200);
    expect(res.body.active).toBe(false);
    expect((await storage.readUser('proj-a', created.id)).active).toBe(false);
    expect((await a.get(`/Users/${created.id}`)).body.active).toBe(false);
    expectScimError(await a.patch(`/Users/${created.id}`, patchOp({ op: 'remove' })), 400, 'noTarget');
    expectScimError(
      await a.patch(`/Users/${created.id}`, patchOp({ op: 'add', path: 'bogus', value: 1 })),
      400,
      'invalidPath',
    );
    expectScimError(
      await a.patch(`/Users/${created.id}`, patchOp({ op: 'replace', path: 'userType', value: 'Patient' })),
      400,
      'mutability',
    );
    expectScimError(await a.patch(`/Users/${created.id}`, { Operations: [] }), 400, 'invalidSyntax');
    const polluted = await a.patch(
      `/Users/${created.id}`,
      patchOp({ op: 'add', path: '__proto__.x', value: 1 }),
    );
    expectScimError(polluted, 400);
    expect((await a.get(`/Users/${created.id}`)).body.meta.version).toBe('W/"2"');
  });

  it('PATCH remove of active sets it to its default (true, as a user created without it); other removes apply or answer 400', async () => {
    const { a, storage } = await setup({ defaultUserType: 'Practitioner' });
    const created = (await a.post('/Users', newUser({ active: false }))).body;
    expect(created.active).toBe(false);
    const path = `/Users/${created.id}`;
    const removed = await a.patch(path, patchOp({ op: 'remove', path: 'active' }));
    expect(removed.status).toBe(200);
    expect(removed.body.active).toBe(true);
    expect(removed.body.meta.version).toBe('W/"2"');
    expect((await storage.readUser('proj-a', created.id)).active).toBe(true);
    // A null value unassigns too (RFC 7644 §3.5.2), with a path or without.
    for (const unassign of [
      { op: 'replace', path: 'active', value: null },
      { op: 'replace', value: { active: null } },
    ]) {
      expect(
        (await a.patch(path, patchOp({ op: 'replace', path: 'active', value: false }))).body.active,
      ).toBe(false);
      expect((await a.patch(path, patchOp(unassign))).body.active).toBe(true);
    }
    // Removing active from an active user changes nothing (no new version).
    const { version } = (await a.get(path)).body.meta;
    const again = await a.patch(path, patchOp({ op: 'remove', path: 'active' }));
    expect(again.body).toMatchObject({ active: true, meta: { version } });
    // Other attributes are removed, the profile following.
    const others = await a.patch(
      path,
      patchOp(
        { op: 'remove', path: 'externalId' },
        { op: 'remove', path: 'name.givenName' },
        { op: 'remove', path: 'emails[type eq "work"]' },
      ),
    );
    expect(others.status).toBe(200);
    expect(others.body).not.toHaveProperty('externalId');
    expect(others.body).not.toHaveProperty('emails');
    expect(others.body.name).toEqual({ familyName: 'Liddell' });
    const user = await storage.readUser('proj-a', created.id);
    expect(user.externalId).toBeUndefined();
    const profile = await storage.readResource('proj-a', 'Practitioner', user.profileId);
    expect(profile.name).toEqual([{ use: 'official', family: 'Liddell' }]);
    expect(profile).not.toHaveProperty('telecom');
    // What cannot be removed is refused, never answered 200 unchanged (even with a defaultUserType).
    expectScimError(await a.patch(path, patchOp({ op: 'remove', path: 'userType' })), 400, 'mutability');
    expectScimError(await a.patch(path, patchOp({ op: 'remove', path: 'userName' })), 400, 'invalidValue');
    expectScimError(await a.patch(path, patchOp({ op: 'remove', path: 'groups' })), 400, 'mutability');
    expect((await a.get(path)).body.meta.version).toBe(others.body.meta.version);
  });

  it('honours If-Match and If-None-Match', async () => {
    const { a, agent, admin } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    const path = `${MOUNT}/Users/${created.id}`;
    const notModified = await agent.get(path).set('Authorization', admin).set('If-None-Match', 'W/"1"');
    expect(notModified.status).toBe(304);
    expect((await agent.get(path).set('Authorization', admin).set('If-None-Match', 'W/"9"')).status).toBe(
      200,
    );
    const stale = await agent
      .patch(path)
      .set('Authorization', admin)
      .set('If-Match', 'W/"7"')
      .set('Content-Type', SCIM)
      .send(JSON.stringify(patchOp({ op: 'replace', path: 'displayName', value: 'x' })));
    expectScimError(stale, 412);
    const fresh = await agent
      .patch(path)
      .set('Authorization', admin)
      .set('If-Match', 'W/"1"')
      .set('Content-Type', 'application/json')
      .send(JSON.stringify(patchOp({ op: 'replace', path: 'displayName', value: 'x' })));
    expect(fresh.status).toBe(200);
    expect(fresh.headers.etag).toBe('W/"2"');
    expectScimError(await agent.delete(path).set('Authorization', admin).set('If-Match', 'W/"1"'), 412);
  });

  it('never loses a concurrent write', async () => {
    const { a } = await setup();
    const created = (await a.post('/Users', newUser({ emails: [] }))).body;
    const n = 10;
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        a.patch(
          `/Users/${created.id}`,
          patchOp({ op: 'add', path: 'emails', value: [{ value: `u${i}@x.org` }] }),
        ),
      ),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    const final = (await a.get(`/Users/${created.id}`)).body;
    expect(final.emails).toHaveLength(n);
    expect(final.meta.version).toBe(`W/"${n + 1}"`);
  });

  it('deletes the user and membership but not the profile; names are reusable', async () => {
    const { a, storage } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    const user = await storage.readUser('proj-a', created.id);
    const del = await a.delete(`/Users/${created.id}`);
    expect(del.status).toBe(204);
    expectScimError(await a.get(`/Users/${created.id}`), 404);
    expectScimError(await a.delete(`/Users/${created.id}`), 404);
    expectScimError(
      await a.patch(`/Users/${created.id}`, patchOp({ op: 'replace', value: { active: true } })),
      404,
    );
    expect((await a.get('/Users?filter=userName%20eq%20%22alice@example.org%22')).body.totalResults).toBe(0);
    expect(await storage.listMemberships('proj-a', { userId: created.id })).toEqual([]);
    expect((await storage.readResource('proj-a', 'Practitioner', user.profileId)).id).toBe(user.profileId);
    expect((await a.post('/Users', newUser())).status).toBe(201);
  });

  it('round-trips the enterprise extension', async () => {
    const { a } = await setup();
    const created = await a.post(
      '/Users',
      newUser({
        schemas: [CORE, ENTERPRISE_USER_SCHEMA_ID],
        [ENTERPRISE_USER_SCHEMA_ID]: { department: 'Cardio' },
      }),
    );
    expect(created.body.schemas).toEqual([CORE, ENTERPRISE_USER_SCHEMA_ID]);
    expect(created.body[ENTERPRISE_USER_SCHEMA_ID]).toEqual({ department: 'Cardio' });
    const found = await a.get(
      `/Users?filter=${encodeURIComponent(`${ENTERPRISE_USER_SCHEMA_ID}:department eq "cardio"`)}`,
    );
    expect(found.body.totalResults).toBe(1);
  });
});

describe('scimRouter: protocol', () => {
  it('answers 401 with WWW-Authenticate, 403 for non-admins', async () => {
    const { agent, as } = await setup();
    const anonymous = await agent.get(`${MOUNT}/Users`);
    expectScimError(anonymous, 401);
    expect(anonymous.headers['www-authenticate']).toMatch(/^Bearer/);
    expectScimError(await as(testToken({ projectId: 'proj-a' })).get('/Users'), 403);
    expectScimError(await as(testToken({ projectId: null, superAdmin: true })).get('/Users'), 403);
    expect((await as(testToken({ projectId: 'proj-a', superAdmin: true })).get('/Users')).status).toBe(200);
  });

  it('answers SCIM errors for bad bodies', async () => {
    const { agent, admin, a } = await setup({ bodyLimit: 1000 });
    const malformed = await agent
      .post(`${MOUNT}/Users`)
      .set('Authorization', admin)
      .set('Content-Type', SCIM)
      .send('{"userName": ');
    expectScimError(malformed, 400, 'invalidSyntax');
    const big = await a.post('/Users', newUser({ displayName: 'x'.repeat(2000) }));
    expectScimError(big, 413);
    const xml = await agent
      .post(`${MOUNT}/Users`)
      .set('Authorization', admin)
      .set('Content-Type', 'text/xml')
      .send('<x/>');
    expectScimError(xml, 415);
    expectScimError(await a.post('/Users', [1, 2]), 400, 'invalidSyntax');
    expectScimError(await a.post('/Users', newUser({ active: 'perhaps' })), 400, 'invalidValue');
    expectScimError(
      await a.post('/Users', newUser({ name: { givenName: { nested: true } } })),
      400,
      'invalidValue',
    );
  });

  it('answers 405 for wrong methods and 404 for unknown paths', async () => {
    const { a, agent, admin } = await setup();
    const wrong = await agent.delete(`${MOUNT}/Users`).set('Authorization', admin);
    expectScimError(wrong, 405);
    expect(wrong.headers.allow).toBe('GET, POST');
    expectScimError(await a.put('/ServiceProviderConfig', {}), 405);
    expectScimError(await a.get('/Users/.search'), 405);
    expectScimError(await a.get('/Groups/.search'), 405);
    expect((await agent.delete(`${MOUNT}/Groups`).set('Authorization', admin)).headers.allow).toBe(
      'GET, POST',
    );
    expectScimError(await a.get('/Roles'), 404);
  });

  it('serves discovery endpoints', async () => {
    const { a } = await setup({ maxResults: 50 });
    const spc = await a.get('/ServiceProviderConfig');
    expect(spc.status).toBe(200);
    expect(spc.headers['content-type']).toMatch(/application\/scim\+json/);
    expect(spc.body).toMatchObject({
      patch: { supported: true },
      bulk: { supported: false },
      filter: { supported: true, maxResults: 50 },
      sort: { supported: true },
      etag: { supported: true },
      changePassword: { supported: false },
    });
    const types = await a.get('/ResourceTypes');
    expect(types.body.Resources).toMatchObject([
      { id: 'User', endpoint: '/Users', schema: CORE },
      { id: 'Group', endpoint: '/Groups', schema: GROUP, schemaExtensions: [] },
    ]);
    expect((await a.get('/ResourceTypes/User')).body.id).toBe('User');
    expect((await a.get('/ResourceTypes/Group')).body.endpoint).toBe('/Groups');
    expectScimError(await a.get('/ResourceTypes/Role'), 404);
    const schemas = await a.get('/Schemas');
    expect(schemas.body.totalResults).toBe(3);
    expect(schemas.body.Resources.map((r: { id: string }) => r.id)).toContain(GROUP);
    const group = await a.get(`/Schemas/${GROUP}`);
    expect(group.body.attributes.find((x: { name: string }) => x.name === 'displayName')).toMatchObject({
      required: true,
      uniqueness: 'server',
      caseExact: false,
    });
    expect(
      group.body.attributes
        .find((x: { name: string }) => x.name === 'members')
        .subAttributes.map((x: { name: string }) => x.name),
    ).toEqual(['value', '$ref', 'display', 'type']);
    const core = await a.get(`/Schemas/${CORE}`);
    expect(core.body.attributes.find((x: { name: string }) => x.name === 'userName')).toMatchObject({
      uniqueness: 'server',
      caseExact: false,
    });
    expectScimError(await a.get('/Schemas/urn:nope'), 404);
    expectScimError(await a.get('/Schemas?filter=id%20pr'), 403);
    expectScimError(await a.get('/ResourceTypes?filter=id%20pr'), 403);
  });

  it('validates options early', async () => {
    const { scimRouter } = await import('../../src/scim/router.js');
    const { memoryStorage } = await import('../../src/stores.js');
    expect(() =>
      scimRouter({ storage: memoryStorage(), authenticate: () => undefined, maxResults: 0 }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
  });
});

describe('scimRouter: robustness', () => {
  it('answers a SCIM error, never a 500, to arbitrary bodies and filters', async () => {
    const fc = (await import('fast-check')).default;
    const { a } = await setup();
    const created = (await a.post('/Users', newUser())).body;
    const body = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record({
        userType: fc.constantFrom('Patient', 'x', 5),
        userName: fc.jsonValue(),
        name: fc.jsonValue(),
        emails: fc.jsonValue(),
      }),
      fc.record({
        schemas: fc.constant([PATCH_OP_SCHEMA_ID]),
        Operations: fc.array(
          fc.record({
            op: fc.constantFrom('add', 'Replace', 'remove', 'x'),
            path: fc.string(),
            value: fc.jsonValue({ maxDepth: 2 }),
          }),
          { maxLength: 3 },
        ),
      }),
    );
    await fc.assert(
      fc.asyncProperty(body, fc.string({ maxLength: 40 }), async (json, filter) => {
        for (const res of [
          await a.post('/Users', json),
          await a.put(`/Users/${created.id}`, json),
          await a.patch(`/Users/${created.id}`, json),
          await a.post('/.search', json),
          await a.get(`/Users?filter=${encodeURIComponent(filter)}&sortBy=${encodeURIComponent(filter)}`),
        ]) {
          expect(res.status).toBeLessThan(500);
          expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
        }
      }),
      { numRuns: 60 },
    );
  });
});
