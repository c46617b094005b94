import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  fhirPlatform,
  memoryStorage,
  provisionSuperAdminClient,
  type FhirPlatform,
  type Storage,
} from '../src/index.js';
import { eventually } from './helpers/eventually.js';
import { tempDir } from './helpers/temp-dir.js';

const FHIR_JSON = 'application/fhir+json';

function parameters(values: Record<string, string | boolean>) {
  return {
    resourceType: 'Parameters',
    parameter: Object.entries(values).map(([name, value]) =>
      typeof value === 'boolean' ? { name, valueBoolean: value } : { name, valueString: value },
    ),
  };
}

describe('fhirPlatform: the whole flow with real tokens', () => {
  let dir: string;
  let storage: Storage;
  let platform: FhirPlatform;
  let app: express.Express;

  beforeEach(() => {
    dir = tempDir('fpk-platform-');
    storage = memoryStorage();
    platform = fhirPlatform({
      storage,
      exportDir: path.join(dir, 'exports'),
      scimBasicAuth: true,
      baseUrl: 'http://fhir.test',
    });
    app = express();
    app.use(platform.router);
  });

  afterEach(async () => {
    await platform.close();
    await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function token(clientId: string, secret: string, scope?: string): Promise<string> {
    const res = await request(app)
      .post('/oauth2/token')
      .auth(clientId, secret)
      .type('form')
      .send({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) });
    expect(res.status).toBe(200);
    expect(res.body.token_type).toBe('bearer');
    return res.body.access_token as string;
  }

  it('super admin -> $init -> $new-client -> SCIM user -> FHIR data -> export -> download', async () => {
    const admin = await provisionSuperAdminClient(storage, { clientId: 'root', clientSecret: 'root-secret' });
    expect(admin.created).toBe(true);
    const rootToken = await token('root', 'root-secret');

    const init = await request(app)
      .post('/fhir/R4/Project/$init')
      .set('Authorization', `Bearer ${rootToken}`)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'Acme', ownerEmail: 'ada@acme.example' })));
    expect(init.status).toBe(201);
    const projectId = init.body.id as string;

    const client = await request(app)
      .post(`/fhir/R4/Project/${projectId}/$new-client`)
      .set('Authorization', `Bearer ${rootToken}`)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'backend', scope: 'system/*.*', admin: true })));
    expect(client.status).toBe(201);
    // SCIM needs the administration scope: a token asked for `system/*.*` alone is no admin token.
    const projectToken = await token(client.body.id, client.body.secret, 'project:admin system/*.*');

    const user = await request(app)
      .post('/scim/v2/Users')
      .set('Authorization', `Bearer ${projectToken}`)
      .set('Content-Type', 'application/scim+json')
      .send({
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        userType: 'Patient',
        userName: 'jane@acme.example',
        name: { givenName: 'Jane', familyName: 'Doe' },
        emails: [{ value: 'jane@acme.example', type: 'work' }],
      });
    expect(user.status).toBe(201);
    const patientId = user.body.userName as string;
    const patient = await request(app)
      .get(`/fhir/R4/Patient/${patientId}`)
      .set('Authorization', `Bearer ${projectToken}`);
    expect(patient.status).toBe(200);

    const obs = await request(app)
      .post('/fhir/R4/Observation')
      .set('Authorization', `Bearer ${projectToken}`)
      .set('Content-Type', FHIR_JSON)
      .send(
        JSON.stringify({
          resourceType: 'Observation',
          status: 'final',
          code: { text: 'Body height' },
          subject: { reference: `Patient/${patientId}` },
        }),
      );
    expect(obs.status).toBe(201);

    const metadata = await request(app).get('/fhir/R4/metadata');
    expect(metadata.status).toBe(200);
    const rest = metadata.body.rest[0];
    expect(JSON.stringify(rest.security)).toContain('/oauth2/token');
    expect(rest.operation.map((o: { name: string }) => o.name)).toContain('export');

    const discovery = await request(app).get('/fhir/R4/.well-known/smart-configuration');
    expect(discovery.status).toBe(200);
    expect(discovery.body.token_endpoint).toMatch(/\/oauth2\/token$/);

    const kickoff = await request(app)
      .get('/fhir/R4/Patient/$export')
      .set('Authorization', `Bearer ${projectToken}`)
      .set('Accept', FHIR_JSON)
      .set('Prefer', 'respond-async');
    expect(kickoff.status).toBe(202);
    const statusPath = new URL(kickoff.headers['content-location']!).pathname;
    const manifest = await eventually('the export to complete', async () => {
      const status = await request(app).get(statusPath).set('Authorization', `Bearer ${projectToken}`);
      if (status.status === 200)
        return status.body as { output: { type: string; url: string; count: number }[] };
      expect(status.status).toBe(202);
      return undefined;
    });
    const types = manifest.output.map((o) => o.type).sort();
    expect(types).toEqual(['Observation', 'Patient']);
    for (const file of manifest.output) {
      const download = await request(app)
        .get(new URL(file.url).pathname)
        .set('Authorization', `Bearer ${projectToken}`)
        .buffer(true)
        .parse((res, cb) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => cb(null, text));
        });
      expect(download.status).toBe(200);
      const lines = (download.body as string).trim().split('\n');
      expect(lines).toHaveLength(file.count);
      for (const line of lines) expect(JSON.parse(line).resourceType).toBe(file.type);
    }

    // Another project's token sees none of it.
    const other = await request(app)
      .post('/fhir/R4/Project/$init')
      .set('Authorization', `Bearer ${rootToken}`)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'Other' })));
    const otherClient = await request(app)
      .post(`/fhir/R4/Project/${other.body.id}/$new-client`)
      .set('Authorization', `Bearer ${rootToken}`)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'b', scope: 'system/*.*', admin: true })));
    const otherToken = await token(otherClient.body.id, otherClient.body.secret);
    expect(
      (await request(app).get(`/fhir/R4/Patient/${patientId}`).set('Authorization', `Bearer ${otherToken}`))
        .status,
    ).toBe(404);
    expect(
      (await request(app).get(`/scim/v2/Users/${user.body.id}`).set('Authorization', `Bearer ${otherToken}`))
        .status,
    ).toBe(404);
    expect((await request(app).get(statusPath).set('Authorization', `Bearer ${otherToken}`)).status).toBe(
      404,
    );
    expect(
      (await request(app).get(`/fhir/R4/Project/${projectId}`).set('Authorization', `Bearer ${otherToken}`))
        .status,
    ).toBe(404);

    // No token: 401 in each protocol.
    const scim401 = await request(app).get('/scim/v2/Users');
    expect(scim401.status).toBe(401);
    expect(scim401.body.schemas).toEqual(['urn:ietf:params:scim:api:messages:2.0:Error']);
    const fhir401 = await request(app).get('/fhir/R4/Patient');
    expect(fhir401.status).toBe(401);
    expect(fhir401.body.resourceType).toBe('OperationOutcome');
    expect(fhir401.headers['www-authenticate']).toMatch(/^Bearer/);
  });

  it('holds a narrowed admin token to its scope: no data writes, no SCIM, no $new-client, no $init', async () => {
    await provisionSuperAdminClient(storage, { clientId: 'root', clientSecret: 'root-secret' });
    const rootToken = await token('root', 'root-secret');
    const init = (auth: string, name: string) =>
      request(app)
        .post('/fhir/R4/Project/$init')
        .set('Authorization', `Bearer ${auth}`)
        .set('Content-Type', FHIR_JSON)
        .send(JSON.stringify(parameters({ name })));
    const projectId = (await init(rootToken, 'Acme')).body.id as string;
    const registered = await request(app)
      .post(`/fhir/R4/Project/${projectId}/$new-client`)
      .set('Authorization', `Bearer ${rootToken}`)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'admin', admin: true })));
    expect(registered.status).toBe(201);
    const { id, secret } = registered.body as { id: string; secret: string };

    const as = (auth: string) => ({
      postFhir: (type: string, body: object) =>
        request(app)
          .post(`/fhir/R4/${type}`)
          .set('Authorization', `Bearer ${auth}`)
          .set('Content-Type', FHIR_JSON)
          .send(JSON.stringify(body)),
      getPatients: () => request(app).get('/fhir/R4/Patient').set('Authorization', `Bearer ${auth}`),
      postUser: (userName: string) =>
        request(app)
          .post('/scim/v2/Users')
          .set('Authorization', `Bearer ${auth}`)
          .set('Content-Type', 'application/scim+json')
          .send({
            schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
            userType: 'Practitioner',
            userName,
          }),
      deleteUser: (userId: string) =>
        request(app).delete(`/scim/v2/Users/${userId}`).set('Authorization', `Bearer ${auth}`),
      newClient: () =>
        request(app)
          .post(`/fhir/R4/Project/${projectId}/$new-client`)
          .set('Authorization', `Bearer ${auth}`)
          .set('Content-Type', FHIR_JSON)
          .send(JSON.stringify(parameters({ name: 'minted', admin: true }))),
    });
    const observation = { resourceType: 'Observation', status: 'final', code: { text: 'x' } };

    const full = as(await token(id, secret));
    const victim = await full.postUser('victim@acme.example');
    expect(victim.status).toBe(201);

    const narrowToken = await request(app)
      .post('/oauth2/token')
      .auth(id, secret)
      .type('form')
      .send({ grant_type: 'client_credentials', scope: 'system/Patient.read' });
    expect(narrowToken.body.scope).toBe('system/Patient.read');
    const narrow = as(narrowToken.body.access_token as string);
    expect((await narrow.postFhir('Observation', observation)).status).toBe(403);
    expect((await narrow.postFhir('Patient', { resourceType: 'Patient' })).status).toBe(403);
    expect((await narrow.getPatients()).status).toBe(200);
    const scimCreate = await narrow.postUser('intruder@acme.example');
    expect(scimCreate.status).toBe(403);
    expect(scimCreate.body.schemas).toEqual(['urn:ietf:params:scim:api:messages:2.0:Error']);
    expect((await narrow.deleteUser(victim.body.id as string)).status).toBe(403);
    expect((await narrow.newClient()).status).toBe(403);
    const narrowRoot = await token('root', 'root-secret', 'system/Patient.read');
    expect((await init(narrowRoot, 'Rogue')).status).toBe(403);

    // The same clients without a scope parameter can do all of it.
    expect((await full.postFhir('Observation', observation)).status).toBe(201);
    expect((await full.postFhir('Patient', { resourceType: 'Patient' })).status).toBe(201);
    expect((await full.getPatients()).status).toBe(200);
    expect((await full.deleteUser(victim.body.id as string)).status).toBe(204);
    expect((await full.newClient()).status).toBe(201);
    expect((await init(rootToken, 'Second')).status).toBe(201);
    expect((await storage.listProjects()).map((p) => p.name).sort()).toEqual(['Acme', 'Second']);
  });

  it('answers its SCIM mount and token endpoints as errorPaths, for the helpers outside the routers', async () => {
    expect(platform.errorPaths).toEqual({
      scim: ['/scim/v2'],
      oauth: ['/oauth2/token', '/oauth2/jwks', '/oauth2/revoke', '/oauth2/introspect'],
    });
    const moved = fhirPlatform({
      storage,
      exportDir: dir,
      paths: { scim: '/identity/scim', token: '/auth/token', jwks: '/auth/keys' },
    });
    expect(moved.errorPaths).toEqual({
      scim: ['/identity/scim'],
      oauth: ['/auth/token', '/auth/keys', '/oauth2/revoke', '/oauth2/introspect'],
    });
    await moved.close();
  });

  it('validates its options early', () => {
    expect(() => fhirPlatform({ storage, paths: { fhir: 'fhir/' }, exportDir: dir })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() => fhirPlatform({ storage })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    // scimBasicAuth would be ignored with a host's own authenticate: refused instead.
    expect(() =>
      fhirPlatform({ storage, exportDir: dir, scimBasicAuth: true, authenticate: () => undefined }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'scimBasicAuth' }));
    // Bulk options reach the bulk router (and are validated there).
    expect(() => fhirPlatform({ storage, exportDir: dir, bulk: { maxKickoffsPerHour: 0 } })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });

  it.each([
    // `new URL('localhost:3006')` parses, as scheme `localhost:`: discovery would then advertise
    // `localhost:3006/oauth2/token`.
    'localhost:3006',
    'fhir.example.org',
    '/api',
    'ftp://fhir.example.org',
    'http:fhir.example.org',
    'https://fhir.example.org/?x=1',
    'https://user:pass@fhir.example.org',
  ])('refuses baseUrl %s (ERR_INVALID_OPTION)', (baseUrl) => {
    expect(() => fhirPlatform({ storage, exportDir: dir, baseUrl })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'baseUrl' }),
    );
  });

  it('accepts an http or https baseUrl, with a path', async () => {
    for (const baseUrl of [
      'http://localhost:3006',
      'https://fhir.example.org/api/',
      'HTTPS://FHIR.example.org',
    ]) {
      await fhirPlatform({ storage, exportDir: dir, baseUrl }).close();
    }
  });
});

describe('fhirPlatform: a storage that is not one', () => {
  const dir = path.join(os.tmpdir(), 'fpk-platform-not-a-store');

  it('refuses the promise of a store (fileStorage() without await), suggesting await', async () => {
    const pending = Promise.resolve(memoryStorage());
    let error: unknown;
    try {
      fhirPlatform({ storage: pending as unknown as Storage, exportDir: dir });
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'storage' });
    expect((error as Error).message).toMatch(/await/);
    await (await pending).close();
  });

  it('refuses an object without the Storage methods, naming what is missing', () => {
    // A store of an older contract: everything but listExportJobs.
    const partial = new Proxy(memoryStorage(), {
      get: (target, name) => (name === 'listExportJobs' ? undefined : Reflect.get(target, name)),
    });
    let error: unknown;
    try {
      fhirPlatform({ storage: partial, exportDir: dir });
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'storage' });
    expect((error as Error).message).toMatch(/listExportJobs/);
    for (const notAStore of ['./data', 42, {}]) {
      expect(() => fhirPlatform({ storage: notAStore as unknown as Storage, exportDir: dir })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'storage' }),
      );
    }
  });

  it('takes a store whose methods are inherited (a class instance, Object.create)', async () => {
    const store = memoryStorage();
    await fhirPlatform({ storage: Object.create(store) as Storage, exportDir: dir }).close();
    await store.close();
  });
});

describe('fhirPlatform: a router refusing its options', () => {
  it('leaves nothing started: the audit journal is free for the next platform', async () => {
    const dir = tempDir('fpk-platform-refused-');
    const storage = memoryStorage();
    const audit = { journalDir: path.join(dir, 'journal') };
    try {
      expect(() => fhirPlatform({ storage, exportDir: dir, audit, scim: { bodyLimit: 'banana' } })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
      );
      // The journal's lock is released as the refused platform's trail closes.
      const platform = await eventually('the journal lock to be free', () => {
        try {
          return fhirPlatform({ storage, exportDir: dir, audit });
        } catch {
          return undefined;
        }
      });
      await platform.close();
    } finally {
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
