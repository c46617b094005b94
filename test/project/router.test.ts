import { generateKeyPairSync } from 'node:crypto';
import express from 'express';
import request from 'supertest';
import { describe, expect, it, vi } from 'vitest';
import type { Principal } from '../../src/http/principal.js';
import { verifyClientSecret } from '../../src/auth/client/client-secret.js';
import { projectRouter, type ProjectRouterOptions } from '../../src/project/router.js';
import { NotFoundError } from '../../src/storage/errors.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { failUserCreation } from './fail-user-creation.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const SUPER = testToken({ projectId: null, kind: 'super-admin', id: 'root', superAdmin: true });
const adminOf = (projectId: string, more: Partial<Principal> = {}) =>
  testToken({ projectId, admin: true, ...more });
const memberOf = (projectId: string) => testToken({ projectId });

function setup(options: Partial<ProjectRouterOptions> = {}, storage: Storage = memoryStorage()) {
  const app = express();
  app.use(
    BASE,
    projectRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  // Stands for the FHIR data-plane router mounted at the same path.
  app.use(BASE, (req, res) => {
    res.status(299).json({ fallthrough: req.path });
  });
  return { app, storage };
}

const params = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });
const NAME = { name: 'name', valueString: 'Acme Research' };

function postJson(
  app: express.Express,
  path: string,
  auth: string | undefined,
  body: unknown,
  type = FHIR_JSON,
) {
  const req = request(app).post(`${BASE}${path}`).set('Content-Type', type);
  if (auth) void req.set('Authorization', auth);
  return req.send(typeof body === 'string' ? body : JSON.stringify(body));
}

async function init(app: express.Express, ...parameter: unknown[]) {
  const res = await postJson(app, '/Project/$init', SUPER, params(NAME, ...parameter));
  expect(res.status).toBe(201);
  return res.body as { id: string; owner: { reference: string } };
}

/** An OperationOutcome of one issue, with `code` and, when given, its `expression`. */
function expectOutcome(res: request.Response, status: number, code: string, expression?: string[]) {
  expectOperationOutcome(res, status, code);
  expect(res.body.issue).toHaveLength(1);
  if (expression) expect(res.body.issue[0].expression).toEqual(expression);
}

describe('POST /Project/$init', () => {
  it('creates the project, its admin user, profile and membership', async () => {
    const { app, storage } = setup();
    const res = await postJson(
      app,
      '/Project/$init',
      SUPER,
      params(
        NAME,
        { name: 'ownerEmail', valueString: 'ada@acme.example' },
        { name: 'ownerGivenName', valueString: 'Ada' },
        { name: 'ownerFamilyName', valueString: 'Lovelace' },
      ),
    );
    expect(res.status).toBe(201);
    expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
    const id = res.body.id as string;
    expect(id).toMatch(UUID);
    expect(res.body).toEqual({
      resourceType: 'Project',
      id,
      name: 'Acme Research',
      strictMode: true,
      owner: { reference: expect.stringMatching(/^User\/.+/) },
      meta: { versionId: expect.any(String), lastUpdated: expect.any(String) },
    });
    expect(res.headers.location).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:\\d+${BASE}/Project/${id}$`));
    expect(res.headers.etag).toBe(`W/"${res.body.meta.versionId}"`);

    const project = await storage.readProject(id);
    expect(project).toMatchObject({ name: 'Acme Research', strictMode: true });
    const userId = (res.body.owner.reference as string).slice('User/'.length);
    expect(project.ownerUserId).toBe(userId);

    const users = await storage.listUsers(id);
    expect(users).toHaveLength(1);
    const user = users[0]!;
    expect(user).toMatchObject({ id: userId, projectId: id, userType: 'Practitioner', active: true });
    expect(user.userName).toBe('ada@acme.example');
    expect(user.data).toMatchObject({
      name: { givenName: 'Ada', familyName: 'Lovelace' },
      emails: [{ value: 'ada@acme.example', primary: true }],
    });

    const profile = await storage.readResource(id, 'Practitioner', user.profileId);
    expect(profile.name).toEqual([
      { use: 'official', text: 'Ada Lovelace', family: 'Lovelace', given: ['Ada'] },
    ]);
    expect(profile.telecom).toEqual([{ system: 'email', value: 'ada@acme.example', use: 'work', rank: 1 }]);
    expect((await storage.searchResources(id, 'Practitioner')).total).toBe(1);
    expect((await storage.searchResources(id, 'Patient')).total).toBe(0);

    const memberships = await storage.listMemberships(id);
    expect(memberships).toEqual([
      expect.objectContaining({ userId, admin: true, profile: `Practitioner/${user.profileId}` }),
    ]);
  });

  it('matches %24init, accepts application/json and needs no owner parameters', async () => {
    const { app, storage } = setup({ baseUrl: 'https://fhir.example.org/' });
    const res = await postJson(
      app,
      '/Project/%24init',
      SUPER,
      params(NAME),
      'application/json; charset=utf-8',
    );
    expect(res.status).toBe(201);
    expect(res.headers.location).toBe(`https://fhir.example.org${BASE}/Project/${res.body.id as string}`);
    const users = await storage.listUsers(res.body.id);
    expect(users).toHaveLength(1);
    // Without an e-mail, the user name is the profile id.
    expect(users[0]!.userName).toBe(users[0]!.profileId);
  });

  it.each([
    ['absent', { resourceType: 'Parameters' }],
    ['empty', params()],
    ['other names only', params({ name: 'ownerEmail', valueString: 'ada@acme.example' })],
    ['unknown names only', params({ name: 'title', valueString: 'x' })],
  ])('answers the fixed OperationOutcome when name is missing (parameter %s)', async (_label, body) => {
    const { app, storage } = setup();
    const res = await postJson(app, '/Project/$init', SUPER, body);
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
    expect(res.body).toEqual({
      resourceType: 'OperationOutcome',
      id: expect.any(String),
      issue: [
        {
          severity: 'error',
          code: 'invalid',
          details: { text: "Expected required input parameter 'name'" },
          expression: ['Parameters.parameter'],
        },
      ],
    });
    expect(await storage.listProjects()).toEqual([]);
  });

  it.each([
    ['a body that is not JSON', '{"resourceType": "Parameters",', 'Parameters'],
    ['a JSON body that is not an object', '"Parameters"', 'Parameters'],
    ['no body at all', undefined, 'Parameters'],
    ['another resource type', { resourceType: 'Patient' }, 'Parameters.resourceType'],
    ['an empty name', params({ name: 'name', valueString: '' }), 'Parameters.parameter[0].valueString'],
    ['a blank name', params({ name: 'name', valueString: '   ' }), 'Parameters.parameter[0].valueString'],
    [
      'a name that is not a valueString',
      params({ name: 'name', valueCode: 'acme' }),
      'Parameters.parameter[0].valueCode',
    ],
    ['a name without value', params({ name: 'name' }), 'Parameters.parameter[0]'],
    ['the name twice', params(NAME, { name: 'name', valueString: 'Other' }), 'Parameters.parameter[1]'],
    [
      'an unknown parameter',
      params(NAME, { name: 'colour', valueString: 'red' }),
      'Parameters.parameter[1].name',
    ],
    [
      'a malformed ownerEmail',
      params(NAME, { name: 'ownerEmail', valueString: 'ada at acme' }),
      'Parameters.parameter[1].valueString',
    ],
  ])('answers 400 with an expression for %s', async (_label, body, expression) => {
    const { app, storage } = setup();
    const res =
      body === undefined
        ? await request(app).post(`${BASE}/Project/$init`).set('Authorization', SUPER)
        : await postJson(app, '/Project/$init', SUPER, body);
    expectOutcome(res, 400, 'invalid', [expression]);
    expect(await storage.listProjects()).toEqual([]);
  });

  it('answers 415 for another media type and 413 for a huge body', async () => {
    const { app } = setup({ bodyLimit: 1000 });
    expectOutcome(
      await postJson(app, '/Project/$init', SUPER, params(NAME), 'text/plain'),
      415,
      'not-supported',
    );
    const big = params(NAME, { name: 'ownerGivenName', valueString: 'x'.repeat(2000) });
    expectOutcome(await postJson(app, '/Project/$init', SUPER, big), 413, 'too-costly');
  });

  it('answers 401 without a token and 403 to anyone but the super admin by default', async () => {
    const { app, storage } = setup();
    const anonymous = await postJson(app, '/Project/$init', undefined, params(NAME));
    expectOutcome(anonymous, 401, 'login');
    expect(anonymous.headers['www-authenticate']).toMatch(/^Bearer/);
    expectOutcome(await postJson(app, '/Project/$init', adminOf('p1'), params(NAME)), 403, 'forbidden');
    // A user principal must exist and be active in its project (requirePrincipal checks it).
    await storage.createProject({ id: 'p1', name: 'Home', strictMode: false });
    const user = await storage.createUser('p1', {
      projectId: 'p1',
      userName: 'u1',
      userType: 'Practitioner',
      profileId: 'prac-1',
      active: true,
      data: {},
    });
    expectOutcome(
      await postJson(
        app,
        '/Project/$init',
        testToken({ projectId: 'p1', kind: 'user', id: user.id }),
        params(NAME),
      ),
      403,
      'forbidden',
    );
    expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p1']);
  });

  it('lets allowInit widen who may create projects; a user caller becomes the owner', async () => {
    const { app, storage } = setup({ allowInit: () => true });
    const home = await init(setup({}, storage).app);
    const caller = await storage.createUser(home.id, {
      projectId: home.id,
      userName: 'grace',
      userType: 'Practitioner',
      profileId: 'x',
      active: true,
      data: { name: { givenName: 'Grace', familyName: 'Hopper' }, emails: [{ value: 'grace@navy.example' }] },
    });
    const userToken = testToken({ projectId: home.id, kind: 'user', id: caller.id });
    const res = await postJson(
      app,
      '/Project/$init',
      userToken,
      params(NAME, { name: 'ownerFamilyName', valueString: 'Murray Hopper' }),
    );
    expect(res.status).toBe(201);
    const [owner] = await storage.listUsers(res.body.id);
    expect(owner).toMatchObject({ userName: 'grace' });
    expect(owner!.data).toMatchObject({
      name: { givenName: 'Grace', familyName: 'Murray Hopper' },
      emails: [{ value: 'grace@navy.example' }],
    });

    // A client caller: the admin user comes from the owner* parameters.
    const byClient = await postJson(
      app,
      '/Project/$init',
      memberOf(home.id),
      params(NAME, { name: 'ownerEmail', valueString: 'lin@acme.example' }),
    );
    expect(byClient.status).toBe(201);
    expect((await storage.listUsers(byClient.body.id))[0]!.userName).toBe('lin@acme.example');
  });

  it('leaves no project, user, profile or membership behind when a later step fails', async () => {
    const base = memoryStorage();
    const { createdProjects: created } = failUserCreation(base);
    const errors: unknown[] = [];
    const { app } = setup({ onError: (e) => errors.push(e) }, base);
    const res = await postJson(app, '/Project/$init', SUPER, params(NAME));
    expectOutcome(res, 500, 'exception');
    expect(JSON.stringify(res.body)).not.toContain('injected');
    expect(errors).toHaveLength(1);

    expect(created).toHaveLength(1);
    const id = created[0]!;
    expect(await base.listProjects()).toEqual([]);
    await expect(base.readProject(id)).rejects.toBeInstanceOf(NotFoundError);
    expect(await base.listUsers(id)).toEqual([]);
    expect(await base.listMemberships(id)).toEqual([]);
    expect((await base.searchResources(id, 'Practitioner')).total).toBe(0);
  });

  it('answers 405 with Allow for another method', async () => {
    const { app } = setup();
    const res = await request(app).get(`${BASE}/Project/$init`).set('Authorization', SUPER);
    expectOutcome(res, 405, 'not-supported');
    expect(res.headers.allow).toBe('POST');
  });
});

describe('GET /Project/{id}', () => {
  it('answers the project to its admins and the super admin, 404 to anyone else', async () => {
    const { app } = setup();
    const project = await init(app);
    const other = await init(app);
    for (const auth of [SUPER, adminOf(project.id)]) {
      const res = await request(app).get(`${BASE}/Project/${project.id}`).set('Authorization', auth);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        resourceType: 'Project',
        id: project.id,
        strictMode: true,
        owner: project.owner,
      });
    }
    for (const auth of [memberOf(project.id), adminOf(other.id)]) {
      expectOutcome(
        await request(app).get(`${BASE}/Project/${project.id}`).set('Authorization', auth),
        404,
        'not-found',
      );
    }
    expectOutcome(
      await request(app).get(`${BASE}/Project/no-such-project`).set('Authorization', SUPER),
      404,
      'not-found',
    );
    expectOutcome(await request(app).get(`${BASE}/Project/${project.id}`), 401, 'login');
  });
});

describe('client applications', () => {
  const publicJwks = () => {
    const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-384' });
    return {
      publicJwk: { ...publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'ES384' },
      privateJwk: privateKey.export({ format: 'jwk' }),
    };
  };

  it('registers SMART apps: a public one without secret, a confidential one, each with redirect URIs', async () => {
    const { app, storage } = setup();
    const project = await init(app);
    const pub = await postJson(
      app,
      `/Project/${project.id}/$new-client`,
      adminOf(project.id),
      params(
        { name: 'name', valueString: 'Patient app' },
        { name: 'public', valueBoolean: true },
        { name: 'redirectUri', valueUri: 'https://app.example/callback' },
        { name: 'redirectUri', valueUri: 'http://127.0.0.1:9000/cb' },
        { name: 'scope', valueString: 'patient/*.rs openid fhirUser launch/patient offline_access' },
      ),
    );
    expect(pub.status).toBe(201);
    expect(pub.body).toMatchObject({
      public: true,
      redirectUri: ['https://app.example/callback', 'http://127.0.0.1:9000/cb'],
      scope: 'patient/*.rs openid fhirUser launch/patient offline_access',
    });
    expect(pub.body.secret).toBeUndefined();
    const stored = await storage.readClient(pub.body.id as string);
    expect(stored).toMatchObject({
      public: true,
      redirectUris: ['https://app.example/callback', 'http://127.0.0.1:9000/cb'],
    });
    expect(stored.secretHash).toBeUndefined();

    const conf = await postJson(
      app,
      `/Project/${project.id}/$new-client`,
      adminOf(project.id),
      params(
        { name: 'name', valueString: 'Clinic app' },
        { name: 'redirectUri', valueUri: 'https://clinic.example/cb' },
        { name: 'scope', valueString: 'user/*.rs openid fhirUser' },
      ),
    );
    expect(conf.status).toBe(201);
    expect(typeof conf.body.secret).toBe('string');
    expect(conf.body.public).toBeUndefined();
    expect((await storage.readClient(conf.body.id as string)).redirectUris).toEqual([
      'https://clinic.example/cb',
    ]);
  });

  it('registers a client whose secret is shown once and stored hashed', async () => {
    const { app, storage } = setup();
    const project = await init(app);
    const { publicJwk } = publicJwks();
    const res = await postJson(
      app,
      `/Project/${project.id}/$new-client`,
      adminOf(project.id),
      params(
        { name: 'name', valueString: 'Nightly export' },
        { name: 'jwks', valueString: JSON.stringify({ keys: [publicJwk] }) },
        { name: 'scope', valueString: 'system/*.rs' },
        { name: 'accessTokenLifetime', valueInteger: 600 },
      ),
    );
    expect(res.status).toBe(201);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toMatchObject({
      resourceType: 'ClientApplication',
      name: 'Nightly export',
      project: { reference: `Project/${project.id}` },
      scope: 'system/*.rs',
      admin: false,
      jwks: { keys: [publicJwk] },
      accessTokenLifetime: 600,
      revoked: false,
    });
    const { id, secret } = res.body as { id: string; secret: string };
    expect(typeof secret).toBe('string');
    expect(res.headers.location).toMatch(
      new RegExp(`${BASE}/Project/${project.id}/ClientApplication/${id}$`),
    );

    const stored = await storage.readClient(id);
    expect(stored).toMatchObject({ projectId: project.id, superAdmin: false, revoked: false });
    expect(JSON.stringify(stored)).not.toContain(secret);
    expect(await verifyClientSecret(secret, stored.secretHash!)).toBe(true);
    expect(await storage.listMemberships(project.id, { clientId: id })).toEqual([
      expect.objectContaining({ clientId: id, admin: false }),
    ]);

    // Listing and reading never show the secret.
    const list = await request(app)
      .get(`${BASE}/Project/${project.id}/ClientApplication`)
      .set('Authorization', adminOf(project.id));
    expect(list.status).toBe(200);
    expect(list.body).toMatchObject({ resourceType: 'Bundle', type: 'searchset', total: 1 });
    expect(list.body.entry[0].resource).toMatchObject({ id, name: 'Nightly export' });
    expect(list.body.entry[0].fullUrl).toMatch(new RegExp(`/Project/${project.id}/ClientApplication/${id}$`));
    const read = await request(app)
      .get(`${BASE}/Project/${project.id}/ClientApplication/${id}`)
      .set('Authorization', SUPER);
    expect(read.status).toBe(200);
    for (const body of [list.body, read.body]) expect(JSON.stringify(body)).not.toContain(secret);
    expect(read.body.secret).toBeUndefined();
  });

  it('lets the super admin register admin clients with defaults; others get 403 or 404', async () => {
    const { app, storage } = setup();
    const project = await init(app);
    const other = await init(app);
    const res = await postJson(
      app,
      `/Project/%24new-client`.replace('/Project/', `/Project/${project.id}/`),
      SUPER,
      params({ name: 'name', valueString: 'Ops' }, { name: 'admin', valueBoolean: true }),
    );
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ scope: 'system/*.*', admin: true });
    expect(await storage.listMemberships(project.id, { clientId: res.body.id })).toEqual([
      expect.objectContaining({ admin: true }),
    ]);
    const body = params({ name: 'name', valueString: 'x' });
    expectOutcome(
      await postJson(app, `/Project/${project.id}/$new-client`, memberOf(project.id), body),
      403,
      'forbidden',
    );
    expectOutcome(
      await postJson(app, `/Project/${project.id}/$new-client`, adminOf(other.id), body),
      404,
      'not-found',
    );
    expectOutcome(await postJson(app, `/Project/unknown/$new-client`, SUPER, body), 404, 'not-found');
    expectOutcome(await postJson(app, `/Project/${project.id}/$new-client`, undefined, body), 401, 'login');
    expect(await storage.listClients(project.id)).toHaveLength(1);
  });

  it.each([
    ['no name', params({ name: 'admin', valueBoolean: true }), 'Parameters.parameter'],
    ['private key material', 'private', 'Parameters.parameter[1].valueString'],
    [
      'an http jwksUri',
      params({ name: 'name', valueString: 'x' }, { name: 'jwksUri', valueUri: 'http://keys.example/j' }),
      'Parameters.parameter[1].valueUri',
    ],
    [
      'a bad scope',
      params({ name: 'name', valueString: 'x' }, { name: 'scope', valueString: 'patient/*.x' }),
      'Parameters.parameter[1].valueString',
    ],
    [
      'an http redirectUri',
      params({ name: 'name', valueString: 'x' }, { name: 'redirectUri', valueUri: 'http://app.example/cb' }),
      'Parameters.parameter[1].valueUri',
    ],
    [
      'a redirectUri with a fragment',
      params(
        { name: 'name', valueString: 'x' },
        { name: 'redirectUri', valueUri: 'https://app.example/cb#x' },
      ),
      'Parameters.parameter[1].valueUri',
    ],
    [
      'a public client with keys',
      params(
        { name: 'name', valueString: 'x' },
        { name: 'redirectUri', valueUri: 'https://app.example/cb' },
        { name: 'public', valueBoolean: true },
        { name: 'jwksUri', valueUri: 'https://keys.example/j' },
      ),
      'Parameters.parameter[3].valueUri',
    ],
    [
      'a lifetime out of bounds',
      params({ name: 'name', valueString: 'x' }, { name: 'accessTokenLifetime', valueInteger: 10 }),
      'Parameters.parameter[1].valueInteger',
    ],
  ])('rejects $new-client with %s', async (_label, body, expression) => {
    const { app, storage } = setup();
    const project = await init(app);
    const payload =
      body === 'private'
        ? params(
            { name: 'name', valueString: 'x' },
            { name: 'jwks', valueString: JSON.stringify({ keys: [publicJwks().privateJwk] }) },
          )
        : body;
    expectOutcome(
      await postJson(app, `/Project/${project.id}/$new-client`, adminOf(project.id), payload),
      400,
      'invalid',
      [expression],
    );
    expect(await storage.listClients(project.id)).toEqual([]);
  });

  it('refuses a jwksUri on a loopback, private or link-local address with 400 when private addresses are not allowed (by default under NODE_ENV=production)', async () => {
    const register = async (app: express.Express, projectId: string, uri: string) =>
      postJson(
        app,
        `/Project/${projectId}/$new-client`,
        adminOf(projectId),
        params({ name: 'name', valueString: 'x' }, { name: 'jwksUri', valueUri: uri }),
      );
    const strict = setup({ allowPrivateJwksAddresses: false });
    const project = await init(strict.app);
    for (const uri of ['http://127.0.0.1:5432/', 'http://[::1]:6379/', 'https://169.254.169.254/latest']) {
      expectOutcome(await register(strict.app, project.id, uri), 400, 'invalid', [
        'Parameters.parameter[1].valueUri',
      ]);
    }
    expect(await strict.storage.listClients(project.id)).toEqual([]);
    expect((await register(strict.app, project.id, 'https://keys.example.org/jwks')).status).toBe(201);

    vi.stubEnv('NODE_ENV', 'production');
    try {
      const production = setup();
      const other = await init(production.app);
      expectOutcome(await register(production.app, other.id, 'http://2130706433:5432/'), 400, 'invalid');
    } finally {
      vi.unstubAllEnvs();
    }
    // Outside production (these tests), loopback JWKS servers are allowed by default.
    const development = setup();
    const third = await init(development.app);
    expect((await register(development.app, third.id, 'http://127.0.0.1:5432/')).status).toBe(201);
  });

  it('revokes clients with $revoke-client or DELETE, only within the project', async () => {
    const { app, storage } = setup();
    const project = await init(app);
    const other = await init(app);
    const register = async (projectId: string) =>
      (
        await postJson(
          app,
          `/Project/${projectId}/$new-client`,
          SUPER,
          params({ name: 'name', valueString: 'c' }),
        )
      ).body.id as string;
    const a = await register(project.id);
    const b = await register(project.id);
    const foreign = await register(other.id);

    const revoked = await postJson(
      app,
      `/Project/${project.id}/$revoke-client`,
      adminOf(project.id),
      params({ name: 'clientId', valueString: a }),
    );
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ resourceType: 'ClientApplication', id: a, revoked: true });
    expect((await storage.readClient(a)).revoked).toBe(true);
    // Revoking again is harmless.
    expect(
      (
        await postJson(
          app,
          `/Project/${project.id}/%24revoke-client`,
          SUPER,
          params({ name: 'clientId', valueString: a }),
        )
      ).status,
    ).toBe(200);

    const deleted = await request(app)
      .delete(`${BASE}/Project/${project.id}/ClientApplication/${b}`)
      .set('Authorization', adminOf(project.id));
    expect(deleted.status).toBe(204);
    expect((await storage.readClient(b)).revoked).toBe(true);

    // A client of another project, or an unknown one, is not found; nothing changes.
    expectOutcome(
      await postJson(
        app,
        `/Project/${project.id}/$revoke-client`,
        adminOf(project.id),
        params({ name: 'clientId', valueString: foreign }),
      ),
      404,
      'not-found',
    );
    expectOutcome(
      await request(app)
        .delete(`${BASE}/Project/${project.id}/ClientApplication/nope`)
        .set('Authorization', SUPER),
      404,
      'not-found',
    );
    expect((await storage.readClient(foreign)).revoked).toBe(false);
    expectOutcome(
      await postJson(app, `/Project/${project.id}/$revoke-client`, adminOf(project.id), params()),
      400,
      'invalid',
      ['Parameters.parameter'],
    );
    expectOutcome(
      await postJson(
        app,
        `/Project/${project.id}/$revoke-client`,
        memberOf(project.id),
        params({ name: 'clientId', valueString: a }),
      ),
      403,
      'forbidden',
    );
    const list = await request(app)
      .get(`${BASE}/Project/${project.id}/ClientApplication`)
      .set('Authorization', SUPER);
    expect(list.body.entry.map((e: { resource: { revoked: boolean } }) => e.resource.revoked)).toEqual([
      true,
      true,
    ]);
  });
});

describe('routing next to the FHIR data plane', () => {
  it('passes every non-Project request on, unauthenticated ones included', async () => {
    const { app } = setup();
    for (const path of ['/metadata', '/Patient/1', '/Projects', '/ProjectX/$init', '/$export']) {
      const res = await request(app).get(`${BASE}${path}`);
      expect(res.status).toBe(299);
      expect(res.body).toEqual({ fallthrough: path });
    }
    expect((await request(app).post(`${BASE}/Patient`).send({ resourceType: 'Patient' })).status).toBe(299);
  });

  it('owns the rest of the Project namespace', async () => {
    const { app } = setup();
    expectOutcome(await request(app).get(`${BASE}/Project`).set('Authorization', SUPER), 404, 'not-found');
    expectOutcome(
      await request(app).get(`${BASE}/Project/x/$everything`).set('Authorization', SUPER),
      404,
      'not-found',
    );
    expectOutcome(await request(app).get(`${BASE}/Project/x/$everything`), 401, 'login');
    for (const path of ['/Project/%E0%A4%A', '/Project/a/ClientApplication/%ZZ']) {
      expectOutcome(await request(app).get(`${BASE}${path}`).set('Authorization', SUPER), 400, 'invalid');
    }
    const put = await request(app).put(`${BASE}/Project/x`).set('Authorization', SUPER);
    expectOutcome(put, 405, 'not-supported');
    expect(put.headers.allow).toBe('GET, HEAD');
  });

  it('refuses bad options early', () => {
    const storage = memoryStorage();
    expect(() =>
      projectRouter({ authenticate: testAuthenticate } as unknown as ProjectRouterOptions),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(() => projectRouter({ storage } as unknown as ProjectRouterOptions)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() =>
      projectRouter({ storage, authenticate: testAuthenticate, minClientTokenLifetime: 0 }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(() =>
      projectRouter({
        storage,
        authenticate: testAuthenticate,
        minClientTokenLifetime: 100,
        maxClientTokenLifetime: 50,
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(() =>
      projectRouter({ storage, authenticate: testAuthenticate, defaultClientScope: 'system/*.zz' }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
  });
});
