// Replays the SCIM 2.0 request sequence Okta's provisioning sends (Okta "SCIM 2.0 protocol"
// reference): lookup by userName, create (with password and empty groups), read, full PUT,
// path-less PATCH deactivate/reactivate, imports with paging, and a re-create after delete.
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { createScimApp, MOUNT } from './scim-app.js';

const OKTA_TYPE = 'application/scim+json; charset=utf-8';

async function okta() {
  const { app, admin, storage } = await createScimApp();
  const agent = request(app);
  const send = (method: 'post' | 'put' | 'patch', path: string, body: unknown) =>
    agent[method](`${MOUNT}${path}`)
      .set('Authorization', admin)
      .set('Accept', 'application/scim+json')
      .set('Content-Type', OKTA_TYPE)
      .send(JSON.stringify(body));
  const get = (path: string) => agent.get(`${MOUNT}${path}`).set('Authorization', admin);
  const del = (path: string) => agent.delete(`${MOUNT}${path}`).set('Authorization', admin);
  return { storage, send, get, del };
}

const createBody = {
  schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
  userName: 'test.user@okta.local',
  name: { givenName: 'Test', familyName: 'User' },
  emails: [{ primary: true, value: 'test.user@okta.local', type: 'work' }],
  displayName: 'Test User',
  locale: 'en-US',
  externalId: '00ujl29u0le5T6Aj10h7',
  groups: [],
  password: '1mz050nq',
  active: true,
  userType: 'Practitioner',
};

describe('Okta provisioning sequence', () => {
  it('provisions, updates, deactivates, reactivates and re-creates a user', async () => {
    const { send, get, del, storage } = await okta();
    const lookup = `/Users?filter=${encodeURIComponent('userName eq "test.user@okta.local"')}&startIndex=1&count=100`;

    // 1. Does the user exist?
    const empty = await get(lookup);
    expect(empty.status).toBe(200);
    expect(empty.headers['content-type']).toMatch(/application\/scim\+json/);
    expect(empty.body).toEqual({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:ListResponse'],
      totalResults: 0,
      startIndex: 1,
      itemsPerPage: 0,
      Resources: [],
    });

    // 2. Create.
    const created = await send('post', '/Users', createBody);
    expect(created.status).toBe(201);
    expect(created.body).not.toHaveProperty('password');
    expect(created.body).toMatchObject({
      active: true,
      displayName: 'Test User',
      externalId: '00ujl29u0le5T6Aj10h7',
    });
    const id = created.body.id as string;

    // 3. Read back, and find by userName and externalId.
    expect((await get(`/Users/${id}`)).body.id).toBe(id);
    const found = await get(lookup);
    expect(found.body.totalResults).toBe(1);
    expect(found.body.Resources[0].id).toBe(id);
    const byExternal = await get(
      `/Users?filter=${encodeURIComponent('externalId eq "00ujl29u0le5T6Aj10h7"')}`,
    );
    expect(byExternal.body.Resources[0].id).toBe(id);

    // 4. Profile update: Okta sends the whole user with PUT.
    const put = await send('put', `/Users/${id}`, {
      ...createBody,
      id,
      name: { givenName: 'Another', familyName: 'User' },
      meta: created.body.meta,
    });
    expect(put.status).toBe(200);
    expect(put.body.name).toEqual({ givenName: 'Another', familyName: 'User' });
    const user = await storage.readUser('proj-a', id);
    expect(user.userName).toBe('test.user@okta.local');
    const profile = await storage.readResource('proj-a', 'Practitioner', user.profileId);
    expect(profile.name).toMatchObject([{ given: ['Another'], family: 'User' }]);

    // 5. Deactivate: path-less replace.
    const deactivate = {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [{ op: 'replace', value: { active: false } }],
    };
    const off = await send('patch', `/Users/${id}`, deactivate);
    expect(off.status).toBe(200);
    expect(off.body.active).toBe(false);
    expect((await get(`/Users/${id}`)).body.active).toBe(false);
    expect((await get(lookup)).body.Resources[0].active).toBe(false);
    expect((await storage.readUser('proj-a', id)).active).toBe(false);

    // 6. Reactivate.
    const on = await send('patch', `/Users/${id}`, {
      ...deactivate,
      Operations: [{ op: 'replace', value: { active: true } }],
    });
    expect(on.body.active).toBe(true);

    // 7. Password push: accepted, never stored nor returned.
    const pw = await send('patch', `/Users/${id}`, {
      ...deactivate,
      Operations: [{ op: 'replace', value: { password: 't1meMa$heen' } }],
    });
    expect(pw.status).toBe(200);
    expect(JSON.stringify(await storage.readUser('proj-a', id))).not.toContain('t1meMa$heen');

    // 8. Import: list all with paging.
    const imported = await get('/Users?startIndex=1&count=100');
    expect(imported.body).toMatchObject({ totalResults: 1, itemsPerPage: 1, startIndex: 1 });

    // 9. Delete and re-create with the same name and externalId.
    expect((await del(`/Users/${id}`)).status).toBe(204);
    expect((await get(lookup)).body.totalResults).toBe(0);
    const again = await send('post', '/Users', createBody);
    expect(again.status).toBe(201);
    expect(again.body.id).not.toBe(id);
  });
});
