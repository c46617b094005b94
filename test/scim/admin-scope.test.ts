import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPlatformApp, SCIM_JSON, type PlatformTestApp } from '../helpers/platform-app.js';

const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

function expectScimForbidden(res: request.Response) {
  expect(res.status).toBe(403);
  expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
  expect(res.body.schemas).toEqual([ERROR]);
  expect(res.body.status).toBe('403');
}

const newUser = (userName: string) => ({
  schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
  userType: 'Practitioner',
  userName,
  name: { givenName: 'Ada', familyName: 'Lovelace' },
});

describe('SCIM with real tokens: project:admin is required', () => {
  let ctx: PlatformTestApp;
  let projectId: string;
  let admin: { id: string; secret: string };

  beforeEach(async () => {
    ctx = await createPlatformApp();
    projectId = await ctx.initProject('Acme');
    admin = await ctx.newClient(projectId, { name: 'idp', scope: 'system/*.*', admin: true });
  });
  afterEach(() => ctx.close());

  const post = async (auth: string, userName: string) =>
    request(ctx.app)
      .post('/scim/v2/Users')
      .set('Authorization', auth)
      .type(SCIM_JSON)
      .send(newUser(userName));

  it('refuses user management to an admin token narrowed to data scopes', async () => {
    const full = await ctx.bearer(admin.id, admin.secret);
    const created = await post(full, 'kept@acme.example');
    expect(created.status).toBe(201);
    const userId = created.body.id as string;
    const before = (await ctx.storage.listUsers(projectId)).map((u) => u.id).sort();
    expect(before).toContain(userId);

    for (const scope of ['system/Patient.read', 'system/*.*']) {
      const narrow = await ctx.bearer(admin.id, admin.secret, scope);
      const refused = await post(narrow, 'new@acme.example');
      expectScimForbidden(refused);
      // The answer names what the token lacks (RFC 6750 §3.1).
      expect(refused.body.detail).toMatch(/project:admin/);
      expect(refused.headers['www-authenticate']).toBe(
        'Bearer error="insufficient_scope", scope="project:admin"',
      );
      expectScimForbidden(await request(ctx.app).get('/scim/v2/Groups').set('Authorization', narrow));
      expectScimForbidden(
        await request(ctx.app).delete(`/scim/v2/Users/${userId}`).set('Authorization', narrow),
      );
      expectScimForbidden(await request(ctx.app).get('/scim/v2/Users').set('Authorization', narrow));
    }
    // Nothing was created or deleted.
    expect((await ctx.storage.listUsers(projectId)).map((u) => u.id).sort()).toEqual(before);
  });

  it('allows it with the default token, with project:admin, and over HTTP Basic', async () => {
    const asked = await ctx.bearer(admin.id, admin.secret, 'project:admin system/*.*');
    const created = await post(asked, 'one@acme.example');
    expect(created.status).toBe(201);
    expect(
      (await request(ctx.app).delete(`/scim/v2/Users/${created.body.id}`).set('Authorization', asked)).status,
    ).toBe(204);

    const adminOnly = await ctx.bearer(admin.id, admin.secret, 'project:admin');
    expect((await post(adminOnly, 'two@acme.example')).status).toBe(201);

    const basic = await request(ctx.app)
      .post('/scim/v2/Users')
      .auth(admin.id, admin.secret)
      .type(SCIM_JSON)
      .send(newUser('three@acme.example'));
    expect(basic.status).toBe(201);
  });

  it("lists the admin $init created first, with a name, as Okta's SCIM test expects", async () => {
    const full = await ctx.bearer(admin.id, admin.secret);
    const first = await request(ctx.app)
      .get('/scim/v2/Users?count=1&startIndex=1')
      .set('Authorization', full);
    expect(first.status).toBe(200);
    expect(first.body.Resources[0]).toMatchObject({
      id: expect.any(String),
      userName: expect.any(String),
      active: true,
      name: { givenName: 'Project', familyName: 'Administrator', formatted: 'Project Administrator' },
      displayName: 'Project Administrator',
    });
    // "Look up, then create" must not take a misspelt attribute for "no such user".
    const misspelt = await request(ctx.app)
      .get(`/scim/v2/Users?filter=${encodeURIComponent('userNmae eq "x"')}`)
      .set('Authorization', full);
    expect(misspelt.status).toBe(400);
    expect(misspelt.body.scimType).toBe('invalidFilter');
  });

  it('never lets a non-admin client in, whatever it asks for', async () => {
    const plain = await ctx.newClient(projectId, { name: 'plain', scope: 'system/*.*' });
    const refused = await ctx.tokenResponse(plain.id, plain.secret, 'project:admin');
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_scope');
    const all = await ctx.bearer(plain.id, plain.secret, 'project:admin system/*.*');
    expectScimForbidden(await post(all, 'x@acme.example'));
  });
});
