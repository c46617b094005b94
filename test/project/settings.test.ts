import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { projectRouter } from '../../src/project/router.js';
import { scimRouter } from '../../src/scim/router.js';
import { memoryStorage } from '../../src/stores.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { expectInvalidParameter } from '../helpers/protocol-errors.js';

const FHIR = '/api/fhir/R4';
const SCIM = '/api/scim/v2';
const FHIR_JSON = 'application/fhir+json';
const SUPER = testToken({ projectId: null, kind: 'super-admin', id: 'root', superAdmin: true });

/** The project router and the SCIM router (no SCIM options) on one memory store. */
function setup() {
  const storage = memoryStorage();
  const common = { storage, authenticate: testAuthenticate, onError: () => undefined };
  const app = express();
  app.use(FHIR, projectRouter(common));
  app.use(SCIM, scimRouter(common));
  const agent = request(app);
  const post = (path: string, auth: string, body: unknown) =>
    agent
      .post(`${FHIR}${path}`)
      .set('Authorization', auth)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(body));
  const scimPost = (auth: string, body: unknown) =>
    agent
      .post(`${SCIM}/Users`)
      .set('Authorization', auth)
      .set('Content-Type', 'application/scim+json')
      .send(JSON.stringify(body));
  return { storage, agent, post, scimPost };
}

const params = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });
const NAME = { name: 'name', valueString: 'Acme' };
const adminOf = (projectId: string) => testToken({ projectId, admin: true });

describe('project SCIM settings', () => {
  it('$init stores the SCIM settings with the project and answers them', async () => {
    const { post, storage, agent } = setup();
    const res = await post(
      '/Project/$init',
      SUPER,
      params(
        NAME,
        { name: 'scimDefaultUserType', valueCode: 'RelatedPerson' },
        { name: 'scimEchoUserName', valueBoolean: true },
      ),
    );
    expect(res.status).toBe(201);
    expect(res.body.scim).toEqual({ defaultUserType: 'RelatedPerson', echoUserName: true });
    expect((await storage.readProject(res.body.id)).scim).toEqual({
      defaultUserType: 'RelatedPerson',
      echoUserName: true,
    });
    const read = await agent.get(`${FHIR}/Project/${res.body.id}`).set('Authorization', SUPER);
    expect(read.body.scim).toEqual({ defaultUserType: 'RelatedPerson', echoUserName: true });
    // Without them the project has none, and its answer no `scim`.
    const plain = await post('/Project/$init', SUPER, params(NAME));
    expect(plain.body).not.toHaveProperty('scim');
    expect((await storage.readProject(plain.body.id)).scim).toBeUndefined();
  });

  it('$init refuses bad settings at their value', async () => {
    const { post, storage } = setup();
    expectInvalidParameter(
      await post('/Project/$init', SUPER, params(NAME, { name: 'scimDefaultUserType', valueCode: 'Doctor' })),
      'Parameters.parameter[1].valueCode',
    );
    expectInvalidParameter(
      await post(
        '/Project/$init',
        SUPER,
        params(NAME, { name: 'scimDefaultUserType', valueCode: 'patient' }),
      ),
      'Parameters.parameter[1].valueCode',
    );
    expectInvalidParameter(
      await post('/Project/$init', SUPER, params(NAME, { name: 'scimEchoUserName', valueString: 'true' })),
      'Parameters.parameter[1].valueString',
    );
    expect(await storage.listProjects()).toEqual([]);
  });

  it('$settings sets, keeps and resets settings, for the project admins and the super admin', async () => {
    const { post, storage, agent } = setup();
    const id = (await post('/Project/$init', SUPER, params(NAME))).body.id as string;
    const admin = adminOf(id);

    const set = await post(
      `/Project/${id}/$settings`,
      admin,
      params({ name: 'scimDefaultUserType', valueString: 'Practitioner' }),
    );
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({
      resourceType: 'Project',
      id,
      scim: { defaultUserType: 'Practitioner' },
    });
    expect(set.headers.etag).toBe(`W/"${set.body.meta.versionId}"`);
    // A setting not named is kept.
    const echo = await post(
      `/Project/${id}/%24settings`,
      SUPER,
      params({ name: 'scimEchoUserName', valueBoolean: true }),
    );
    expect(echo.status).toBe(200);
    expect((await storage.readProject(id)).scim).toEqual({
      defaultUserType: 'Practitioner',
      echoUserName: true,
    });
    // reset clears one; the other stays.
    const reset = await post(
      `/Project/${id}/$settings`,
      admin,
      params({ name: 'reset', valueCode: 'scimEchoUserName' }),
    );
    expect(reset.body.scim).toEqual({ defaultUserType: 'Practitioner' });
    expect((await storage.readProject(id)).scim).toEqual({ defaultUserType: 'Practitioner' });
    // No parameters: nothing changes.
    expect((await post(`/Project/${id}/$settings`, admin, params())).body.scim).toEqual({
      defaultUserType: 'Practitioner',
    });
    const cleared = await post(
      `/Project/${id}/$settings`,
      admin,
      params({ name: 'reset', valueCode: 'scimDefaultUserType' }),
    );
    expect(cleared.body).not.toHaveProperty('scim');

    // Bad parameters, other callers, other methods.
    expectInvalidParameter(
      await post(`/Project/${id}/$settings`, admin, params({ name: 'reset', valueCode: 'strictMode' })),
      'Parameters.parameter[0].valueCode',
    );
    expectInvalidParameter(
      await post(
        `/Project/${id}/$settings`,
        admin,
        params(
          { name: 'scimEchoUserName', valueBoolean: true },
          { name: 'reset', valueCode: 'scimEchoUserName' },
        ),
      ),
      'Parameters.parameter[1].valueCode',
    );
    expectInvalidParameter(
      await post(`/Project/${id}/$settings`, admin, params({ name: 'strictMode', valueBoolean: true })),
      'Parameters.parameter[0].name',
    );
    const on = params({ name: 'scimEchoUserName', valueBoolean: true });
    expect((await post(`/Project/${id}/$settings`, testToken({ projectId: id }), on)).status).toBe(403);
    expect((await post(`/Project/${id}/$settings`, adminOf('elsewhere'), on)).status).toBe(404);
    expect((await post('/Project/nope/$settings', SUPER, on)).status).toBe(404);
    const get = await agent.get(`${FHIR}/Project/${id}/$settings`).set('Authorization', admin);
    expect(get.status).toBe(405);
    expect(get.headers.allow).toBe('POST');
    expect((await storage.readProject(id)).scim).toEqual({});
  });

  it('SCIM follows the settings an admin changes with $settings', async () => {
    const { post, scimPost, storage } = setup();
    const id = (await post('/Project/$init', SUPER, params(NAME))).body.id as string;
    const admin = adminOf(id);
    const missing = await scimPost(admin, { userName: 'ann@idp.example' });
    expect(missing.status).toBe(400);
    expect(missing.body.scimType).toBe('invalidValue');

    await post(
      `/Project/${id}/$settings`,
      admin,
      params(
        { name: 'scimDefaultUserType', valueCode: 'Patient' },
        { name: 'scimEchoUserName', valueBoolean: true },
      ),
    );
    const created = await scimPost(admin, { userName: 'ann@idp.example' });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ userName: 'ann@idp.example', userType: 'Patient' });

    await post(`/Project/${id}/$settings`, admin, params({ name: 'reset', valueCode: 'scimEchoUserName' }));
    const next = await scimPost(admin, { userName: 'bob@idp.example' });
    const stored = await storage.readUser(id, next.body.id);
    expect(next.body.userName).toBe(stored.profileId);
    expect(stored.userName).toBe('bob@idp.example');
  });
});
