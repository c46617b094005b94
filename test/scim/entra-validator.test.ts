// Replays the scenarios of Microsoft's SCIM validation (the Entra ID SCIM validator and the test
// collection of Microsoft's SCIM reference code), in their order, against a router set up for
// identity providers: no `userType` in any body, `userName` read back as sent. Bodies are in the
// validator's style: capitalised attribute names (`Primary`, `Department`, `Manager.Value`),
// string booleans, nulls inside complex values, read-only `meta` and empty `roles`.
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { ScimRouterOptions } from '../../src/scim/router.js';
import { createScimApp, MOUNT } from './scim-app.js';

const CORE = 'urn:ietf:params:scim:schemas:core:2.0:User';
const ENTERPRISE = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

const user1 = {
  userName: 'UserName123',
  active: true,
  displayName: 'BobIsAmazing',
  schemas: [CORE],
  externalId: 'c1f2a3e4-0001-4b5c-9d8e-7f6a5b4c3d2e',
  name: { formatted: 'Ryan Leenay', familyName: 'Leenay', givenName: 'Ryan' },
  emails: [
    { Primary: true, type: 'work', value: 'testing@bob.example' },
    { Primary: false, type: 'home', value: 'testinghome@bob.example' },
  ],
};

const enterpriseUser = {
  userName: 'UserName222',
  active: 'True',
  displayName: 'lennay',
  schemas: [ENTERPRISE, CORE],
  externalId: 'c1f2a3e4-0002-4b5c-9d8e-7f6a5b4c3d2e',
  name: { formatted: 'Andrew Ryan', familyName: 'Ryan', givenName: 'Andrew' },
  emails: [{ Primary: true, type: 'work', value: 'testing@bob2.example' }],
  addresses: [
    { country: 'Bermuda', locality: 'West Mercedes', type: 'work', primary: false },
    { country: null, formatted: '18522 Lisa Unions', locality: null, type: 'other', primary: false },
  ],
  phoneNumbers: [{ type: 'work', primary: true, value: '312-320-0932' }],
  meta: { created: '2019-09-18T18:15:26.5788954+00:00', resourceType: 'User' },
  roles: [],
  title: 'Site engineer',
  [ENTERPRISE]: { Department: 'bob', Manager: { Value: 'SuzzyQ' } },
};

/** The two ways to set a router up for identity providers: router options, or project settings. */
const setups: [string, Partial<ScimRouterOptions>, boolean][] = [
  ['router options', { defaultUserType: 'Practitioner', echoUserName: true }, false],
  ['project settings', {}, true],
];

describe.each(setups)("Microsoft's SCIM validation scenarios (%s)", (_name, options, perProject) => {
  it('create, read, project, filter, patch, replace, reject and delete users', async () => {
    const { app, admin, storage } = await createScimApp(options);
    if (perProject) {
      await storage.updateProject('proj-a', {
        scim: { defaultUserType: 'Practitioner', echoUserName: true },
      });
    }
    const agent = request(app);
    const get = (path: string) => agent.get(`${MOUNT}${path}`).set('Authorization', admin);
    const write = (method: 'post' | 'put' | 'patch', path: string, body: string | object) =>
      agent[method](`${MOUNT}${path}`)
        .set('Authorization', admin)
        .set('Content-Type', 'application/json')
        .send(typeof body === 'string' ? body : JSON.stringify(body));
    const patch = (id: string, ...Operations: unknown[]) =>
      write('patch', `/Users/${id}`, { schemas: [PATCH_OP], Operations });
    const filter = (expression: string) => get(`/Users?filter=${encodeURIComponent(expression)}`);
    const expectError = (res: request.Response, status: number, scimType?: string) => {
      expect(res.status).toBe(status);
      expect(res.body.schemas).toEqual([ERROR]);
      expect(res.body.status).toBe(String(status));
      if (scimType) expect(res.body.scimType).toBe(scimType);
    };

    // The user does not exist yet.
    expect((await filter('userName eq "UserName123"')).body.totalResults).toBe(0);

    // Create User and EnterpriseUser, both without userType.
    const created1 = await write('post', '/Users', user1);
    expect(created1.status).toBe(201);
    expect(created1.body).toMatchObject({ userName: 'UserName123', userType: 'Practitioner', active: true });
    const id1 = created1.body.id as string;
    const stored1 = await storage.readUser('proj-a', id1);
    expect(stored1).toMatchObject({ userName: 'UserName123', userType: 'Practitioner' });
    const profile1 = await storage.readResource('proj-a', 'Practitioner', stored1.profileId);
    expect(profile1.name).toMatchObject([{ family: 'Leenay', given: ['Ryan'] }]);

    const created2 = await write('post', '/Users', enterpriseUser);
    expect(created2.status).toBe(201);
    expect(created2.body.userName).toBe('UserName222');
    expect(created2.body.active).toBe(true);
    expect(created2.body.schemas).toEqual([CORE, ENTERPRISE]);
    expect(created2.body[ENTERPRISE]).toEqual({ department: 'bob', manager: { value: 'SuzzyQ' } });
    expect(created2.body.addresses).toEqual([
      { country: 'Bermuda', locality: 'West Mercedes', type: 'work', primary: false },
      { formatted: '18522 Lisa Unions', type: 'other', primary: false },
    ]);
    expect(created2.body).not.toHaveProperty('roles');
    const id2 = created2.body.id as string;

    // Get each by id.
    for (const [id, userName] of [
      [id1, 'UserName123'],
      [id2, 'UserName222'],
    ] as const) {
      const res = await get(`/Users/${id}`);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ id, userName });
    }

    // Attribute projection: only the asked attributes (plus id and schemas), or all but the excluded.
    const projected = await get('/Users?attributes=userName,emails');
    expect(projected.status).toBe(200);
    expect(projected.body.totalResults).toBe(2);
    for (const resource of projected.body.Resources as Record<string, unknown>[]) {
      expect(Object.keys(resource).sort()).toEqual(['emails', 'id', 'schemas', 'userName']);
    }
    expect(projected.body.Resources.map((r: { userName: string }) => r.userName).sort()).toEqual([
      'UserName123',
      'UserName222',
    ]);
    const excluded = await get(`/Users/${id1}?excludedAttributes=emails,name`);
    expect(excluded.body).not.toHaveProperty('emails');
    expect(excluded.body).not.toHaveProperty('name');
    expect(excluded.body).toMatchObject({ id: id1, userName: 'UserName123', displayName: 'BobIsAmazing' });

    // Filters on displayName (capitalised, on `Users/`), userName (any case), externalId.
    const byDisplayName = await get('/Users/?filter=DisplayName+eq+%22BobIsAmazing%22');
    expect(byDisplayName.status).toBe(200);
    expect(byDisplayName.body.totalResults).toBe(1);
    expect(byDisplayName.body.Resources[0]).toMatchObject({ id: id1, userName: 'UserName123' });
    for (const expression of ['userName eq "username123"', `externalId eq "${user1.externalId}"`]) {
      const res = await filter(expression);
      expect(res.body.totalResults, expression).toBe(1);
      expect(res.body.Resources[0], expression).toMatchObject({ id: id1, userName: 'UserName123' });
    }
    expect((await filter('userName eq "nobody"')).body.totalResults).toBe(0);
    expect((await filter(`externalId eq "${user1.externalId.toUpperCase()}"`)).body.totalResults).toBe(0);
    const paged = await get('/Users?startIndex=1&count=1');
    expect(paged.body).toMatchObject({ totalResults: 2, itemsPerPage: 1, startIndex: 1 });

    // PATCH: replace userName (lower-case op); the new name is echoed and found.
    const renamed = await patch(id1, { op: 'replace', path: 'userName', value: 'ryan3' });
    expect(renamed.status).toBe(200);
    expect(renamed.body.userName).toBe('ryan3');
    expect((await get(`/Users/${id1}`)).body.userName).toBe('ryan3');
    expect((await filter('userName eq "ryan3"')).body.Resources[0].userName).toBe('ryan3');

    // PATCH add/replace/remove with Entra's capitalised ops, dotted, value and extension paths.
    const updated = await patch(
      id1,
      { op: 'Replace', path: 'name.givenName', value: 'Bryan' },
      { op: 'Replace', path: 'emails[type eq "work"].value', value: 'bryan@bob.example' },
      { op: 'Add', path: `${ENTERPRISE}:manager`, value: 'boss-id' },
      { op: 'Add', path: 'title', value: 'Surgeon' },
    );
    expect(updated.status).toBe(200);
    expect(updated.body.name.givenName).toBe('Bryan');
    expect(updated.body.emails).toContainEqual({ primary: true, type: 'work', value: 'bryan@bob.example' });
    expect(updated.body[ENTERPRISE]).toEqual({ manager: { value: 'boss-id' } });
    expect(updated.body.title).toBe('Surgeon');
    const profile1After = await storage.readResource('proj-a', 'Practitioner', stored1.profileId);
    expect(profile1After.name).toMatchObject([{ given: ['Bryan'] }]);
    const removed = await patch(
      id1,
      { op: 'Remove', path: `${ENTERPRISE}:manager` },
      { op: 'Remove', path: 'title' },
    );
    expect(removed.status).toBe(200);
    expect(removed.body).not.toHaveProperty('title');
    expect(removed.body).not.toHaveProperty(ENTERPRISE);

    // Disable with a string boolean, then a plain boolean both ways.
    const disabled = await patch(id1, { op: 'Replace', path: 'active', value: 'False' });
    expect(disabled.status).toBe(200);
    expect(disabled.body.active).toBe(false);
    expect((await storage.readUser('proj-a', id1)).active).toBe(false);
    expect((await patch(id1, { op: 'replace', path: 'active', value: true })).body.active).toBe(true);
    expect((await patch(id1, { op: 'Replace', path: 'active', value: false })).body.active).toBe(false);
    expect((await get(`/Users/${id1}`)).body.active).toBe(false);

    // PUT replace without userType: the user keeps its type; what the body omits is gone.
    const replaced = await write('put', `/Users/${id2}`, {
      userName: 'UserNameReplace2',
      active: true,
      displayName: 'BobIsAmazing',
      schemas: [ENTERPRISE, CORE],
      id: id2,
      externalId: enterpriseUser.externalId,
      name: { formatted: 'NewName', familyName: 'Leenay', givenName: 'Ryan' },
      emails: [{ Primary: true, type: 'work', value: 'testing@bobreplace.example' }],
    });
    expect(replaced.status).toBe(200);
    expect(replaced.body).toMatchObject({ id: id2, userName: 'UserNameReplace2', userType: 'Practitioner' });
    expect(replaced.body).not.toHaveProperty(ENTERPRISE);
    expect(replaced.body).not.toHaveProperty('addresses');
    expect((await get(`/Users/${id2}`)).body.userName).toBe('UserNameReplace2');
    expect((await storage.readUser('proj-a', id2)).userName).toBe('UserNameReplace2');

    // A PUT with a misspelled attribute succeeds and ignores it.
    const typo = await write('put', `/Users/${id2}`, {
      userName: 'UserNameReplace2',
      adreses: [{ country: 'Germany', type: 'work' }],
    });
    expect(typo.status).toBe(200);
    expect(typo.body).not.toHaveProperty('adreses');
    expect(typo.body).not.toHaveProperty('addresses');

    // Duplicates: the same userName (any case) is 409 uniqueness, and nothing is created.
    expectError(
      await write('post', '/Users', { ...user1, userName: 'RYAN3', externalId: 'x-1' }),
      409,
      'uniqueness',
    );
    expectError(
      await write('post', '/Users', { ...enterpriseUser, externalId: 'x-2', userName: 'usernamereplace2' }),
      409,
      'uniqueness',
    );
    // Garbage: no userName, unparsable JSON, a non-object, a PUT without userName, a wrong type.
    expectError(
      await write('post', '/Users', { ...user1, userName: undefined, externalId: 'x-3' }),
      400,
      'invalidValue',
    );
    expectError(await write('post', '/Users', '{ "acve": tre, "adadfdresses": [ {'), 400, 'invalidSyntax');
    expectError(await write('post', '/Users', '[1, 2]'), 400, 'invalidSyntax');
    expectError(await write('put', `/Users/${id1}`, { ...user1, userName: undefined }), 400, 'invalidValue');
    expectError(
      await write('post', '/Users', { ...user1, userName: 'z', active: 'maybe' }),
      400,
      'invalidValue',
    );
    expectError(
      await write('post', '/Users', { ...user1, userName: 'z', userType: 'Robot' }),
      400,
      'invalidValue',
    );
    expect((await get('/Users')).body.totalResults).toBe(2);

    // Delete both; they are gone, their names free again.
    for (const id of [id1, id2]) {
      expect((await agent.delete(`${MOUNT}/Users/${id}`).set('Authorization', admin)).status).toBe(204);
      expectError(await get(`/Users/${id}`), 404);
    }
    expect((await filter('userName eq "ryan3"')).body.totalResults).toBe(0);
    expect((await write('post', '/Users', user1)).status).toBe(201);
  });
});

describe('scimRouter: identity provider settings', () => {
  async function setup(options: Partial<ScimRouterOptions>) {
    const ctx = await createScimApp(options);
    const agent = request(ctx.app);
    const write = (method: 'post' | 'put', path: string, body: object) =>
      agent[method](`${MOUNT}${path}`)
        .set('Authorization', ctx.admin)
        .set('Content-Type', 'application/scim+json')
        .send(JSON.stringify(body));
    return { ...ctx, agent, write };
  }

  it('validates defaultUserType and echoUserName when the router is created', async () => {
    const { scimRouter } = await import('../../src/scim/router.js');
    const { memoryStorage } = await import('../../src/stores.js');
    const make = (extra: Record<string, unknown>) => () =>
      scimRouter({ storage: memoryStorage(), authenticate: () => undefined, ...extra });
    expect(make({ defaultUserType: 'Doctor' })).toThrow(/defaultUserType/);
    expect(make({ defaultUserType: 'patient' })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(make({ echoUserName: 'true' })).toThrow(/echoUserName/);
    expect(make({ defaultUserType: 'RelatedPerson', echoUserName: false })).not.toThrow();
  });

  it('keeps the contract without settings: userType required, userName answered as the profile id', async () => {
    const { write, storage } = await setup({});
    const missing = await write('post', '/Users', { userName: 'ann@idp.example' });
    expect(missing.status).toBe(400);
    expect(missing.body.scimType).toBe('invalidValue');
    const created = await write('post', '/Users', { userType: 'Patient' });
    expect(created.status).toBe(201);
    const stored = await storage.readUser('proj-a', created.body.id);
    expect(created.body.userName).toBe(stored.profileId);
    expect(stored.userName).toBe(stored.profileId);
  });

  it('uses defaultUserType for a create without userType, never over a given one', async () => {
    const { write, storage } = await setup({ defaultUserType: 'Patient' });
    const created = await write('post', '/Users', { userName: 'ann@idp.example' });
    expect(created.status).toBe(201);
    expect(created.body.userType).toBe('Patient');
    const stored = await storage.readUser('proj-a', created.body.id);
    expect(stored.userType).toBe('Patient');
    expect((await storage.readResource('proj-a', 'Patient', stored.profileId)).id).toBe(stored.profileId);
    expect((await storage.listMemberships('proj-a', { userId: stored.id }))[0]!.profile).toBe(
      `Patient/${stored.profileId}`,
    );
    // A blank userType counts as absent; an explicit one wins; a wrong one is still refused.
    expect((await write('post', '/Users', { userName: 'b', userType: ' ' })).body.userType).toBe('Patient');
    const explicit = await write('post', '/Users', { userName: 'doc', userType: 'Practitioner' });
    expect(explicit.body.userType).toBe('Practitioner');
    expect((await write('post', '/Users', { userName: 'c', userType: 'Robot' })).body.scimType).toBe(
      'invalidValue',
    );
    // A PUT without userType keeps the user's own type, even when it is not the default.
    const put = await write('put', `/Users/${explicit.body.id}`, { userName: 'doc', displayName: 'Doc' });
    expect(put.status).toBe(200);
    expect(put.body.userType).toBe('Practitioner');
    expect((await storage.readUser('proj-a', explicit.body.id)).userType).toBe('Practitioner');
  });

  it('without defaultUserType, a PUT without userType is still refused', async () => {
    const { write } = await setup({});
    const created = await write('post', '/Users', { userName: 'doc', userType: 'Practitioner' });
    const put = await write('put', `/Users/${created.body.id}`, { userName: 'doc' });
    expect(put.status).toBe(400);
    expect(put.body.scimType).toBe('invalidValue');
  });

  it('with echoUserName, requires userName on create and replace', async () => {
    const { write } = await setup({ echoUserName: true, defaultUserType: 'Patient' });
    const noName = await write('post', '/Users', { displayName: 'Nobody' });
    expect(noName.status).toBe(400);
    expect(noName.body.scimType).toBe('invalidValue');
    const created = await write('post', '/Users', { userName: 'Ann@IdP.example' });
    expect(created.body.userName).toBe('Ann@IdP.example');
    const put = await write('put', `/Users/${created.body.id}`, { displayName: 'Ann' });
    expect(put.status).toBe(400);
    expect(put.body.scimType).toBe('invalidValue');
  });

  it('project settings override the router options and apply from the next request on', async () => {
    const { write, storage, agent, admin, adminB } = await setup({
      defaultUserType: 'Patient',
      echoUserName: true,
    });
    await storage.updateProject('proj-a', {
      scim: { defaultUserType: 'RelatedPerson', echoUserName: false },
    });
    const a = await write('post', '/Users', { userName: 'ann@idp.example' });
    expect(a.status).toBe(201);
    expect(a.body.userType).toBe('RelatedPerson');
    const storedA = await storage.readUser('proj-a', a.body.id);
    expect(a.body.userName).toBe(storedA.profileId);
    // proj-b has no settings of its own: the router's apply.
    const b = await agent
      .post(`${MOUNT}/Users`)
      .set('Authorization', adminB)
      .set('Content-Type', 'application/scim+json')
      .send(JSON.stringify({ userName: 'bob@idp.example' }));
    expect(b.body).toMatchObject({ userType: 'Patient', userName: 'bob@idp.example' });
    // Only the setting the project has wins; the other follows the router.
    await storage.updateProject('proj-a', { scim: { echoUserName: false } });
    expect((await write('post', '/Users', { userName: 'cy@idp.example' })).body.userType).toBe('Patient');
    // Turning echo on answers the stored name everywhere, filters included.
    await storage.updateProject('proj-a', { scim: { echoUserName: true } });
    expect((await agent.get(`${MOUNT}/Users/${a.body.id}`).set('Authorization', admin)).body.userName).toBe(
      'ann@idp.example',
    );
    const found = await agent
      .get(`${MOUNT}/Users?filter=${encodeURIComponent('userName eq "ANN@idp.example"')}`)
      .set('Authorization', admin);
    expect(found.body.Resources.map((r: { userName: string }) => r.userName)).toEqual(['ann@idp.example']);
  });
});
