import fs from 'node:fs';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureSuperAdminClient } from '../src/auth/client/super-admin.js';
import { fhirPlatform, type FhirPlatform } from '../src/platform.js';
import { memoryStorage } from '../src/stores.js';
import type { Storage } from '../src/storage/types.js';
import { FHIR_JSON, parameters, ROOT_ID, ROOT_SECRET, SCIM_JSON } from './helpers/platform-app.js';
import { eventually } from './helpers/eventually.js';
import { tempDir } from './helpers/temp-dir.js';

const ORIGIN = 'https://fhir.example.org';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  // Last in, first out: platforms sharing a store close before the store does.
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * The platform mounted at `prefix` ('' = the root); `nested` puts it inside a second router.
 * `storage` shares one store (and so one signing key set) between two mounts.
 */
async function mounted(
  prefix: string,
  nested: boolean,
  shared?: Storage,
  origin = ORIGIN,
): Promise<{ app: express.Express; platform: FhirPlatform; storage: Storage }> {
  const dir = tempDir('fpk-mount-');
  const storage = shared ?? memoryStorage();
  if (!shared) await ensureSuperAdminClient(storage, { clientId: ROOT_ID, clientSecret: ROOT_SECRET });
  const platform = fhirPlatform({
    storage,
    exportDir: path.join(dir, 'exports'),
    baseUrl: origin,
    token: { rateLimit: false },
  });
  const app = express();
  if (nested) {
    // `/api` on the app, `/v1` on an inner router: the platform sees both in req.baseUrl.
    const outer = express.Router();
    outer.use(prefix.slice('/api'.length), platform.router);
    app.use('/api', outer);
  } else if (prefix === '') app.use(platform.router);
  else app.use(prefix, platform.router);
  cleanups.push(async () => {
    await platform.close();
    if (!shared) await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { app, platform, storage };
}

/** A super-admin access token from the platform's token endpoint under `prefix`. */
async function rootToken(app: express.Express, prefix: string): Promise<string> {
  const res = await request(app)
    .post(`${prefix}/oauth2/token`)
    .auth(ROOT_ID, ROOT_SECRET)
    .type('form')
    .send({ grant_type: 'client_credentials' });
  expect(res.status).toBe(200);
  return res.body.access_token as string;
}

/** The token's claims (no signature check: the servers under test do that). */
function claims(token: string): { iss: string; aud: string } {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as {
    iss: string;
    aud: string;
  };
}

/**
 * The path of an absolute URL this server advertised, checked to start with `origin` + prefix (a
 * gateway in front strips whatever path `origin` has).
 */
function local(url: unknown, prefix: string, origin = ORIGIN): string {
  expect(typeof url).toBe('string');
  expect((url as string).startsWith(`${origin}${prefix}/`)).toBe(true);
  return (url as string).slice(origin.length);
}

describe.each([
  ['the root', '', false],
  ['/api', '/api', false],
  ['a nested router (/api/v1)', '/api/v1', true],
  // baseUrl with a path: a gateway publishes the app under https://gw.example.org/tenant-a.
  ['/api, behind a gateway path in baseUrl', '/api', false, 'https://gw.example.org/tenant-a'],
])('fhirPlatform mounted under %s', (_name, prefix, nested, origin = ORIGIN) => {
  it('advertises and returns URLs that follow the mount path, and they all answer', async () => {
    const { app } = await mounted(prefix, nested, undefined, origin);

    // Discovery, at the root of the mount and under the FHIR base.
    for (const where of ['/.well-known/smart-configuration', '/fhir/R4/.well-known/smart-configuration']) {
      const discovery = await request(app).get(`${prefix}${where}`);
      expect(discovery.status).toBe(200);
      expect(discovery.body.token_endpoint).toBe(`${origin}${prefix}/oauth2/token`);
      expect(discovery.body.jwks_uri).toBe(`${origin}${prefix}/oauth2/jwks`);
      expect((await request(app).get(local(discovery.body.jwks_uri, prefix, origin))).status).toBe(200);
    }
    // The CapabilityStatement's oauth-uris extension names the same token URL.
    const metadata = await request(app).get(`${prefix}/fhir/R4/metadata`);
    expect(metadata.status).toBe(200);
    const oauth = metadata.body.rest[0].security.extension[0].extension as {
      url: string;
      valueUri: string;
    }[];
    const tokenUrl = oauth.find((e) => e.url === 'token')!.valueUri;
    expect(tokenUrl).toBe(`${origin}${prefix}/oauth2/token`);

    // Tokens from the advertised endpoint.
    const tokenPath = local(tokenUrl, prefix, origin);
    const bearer = async (id: string, secret: string) => {
      const res = await request(app)
        .post(tokenPath)
        .auth(id, secret)
        .type('form')
        .send({ grant_type: 'client_credentials' });
      expect(res.status).toBe(200);
      return `Bearer ${res.body.access_token as string}`;
    };
    const root = await bearer(ROOT_ID, ROOT_SECRET);
    const init = await request(app)
      .post(`${prefix}/fhir/R4/Project/$init`)
      .set('Authorization', root)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'Mounted' })));
    expect(init.status).toBe(201);
    const client = await request(app)
      .post(`${prefix}/fhir/R4/Project/${init.body.id as string}/$new-client`)
      .set('Authorization', root)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'admin', admin: true })));
    expect(client.status).toBe(201);
    const admin = await bearer(client.body.id as string, client.body.secret as string);

    // SCIM meta.location, FHIR Location, export Content-Location and manifest URLs.
    const user = await request(app)
      .post(`${prefix}/scim/v2/Users`)
      .set('Authorization', admin)
      .type(SCIM_JSON)
      .send(JSON.stringify({ userName: 'pat@example.org', userType: 'Patient' }));
    expect(user.status).toBe(201);
    expect(
      (
        await request(app)
          .get(local(user.body.meta.location, prefix, origin))
          .set('Authorization', admin)
      ).status,
    ).toBe(200);
    const created = await request(app)
      .post(`${prefix}/fhir/R4/Observation`)
      .set('Authorization', admin)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Observation', status: 'final', code: { text: 'x' } }));
    expect(created.status).toBe(201);
    expect(
      (
        await request(app)
          .get(local(created.headers.location, prefix, origin))
          .set('Authorization', admin)
      ).status,
    ).toBe(200);
    const kickoff = await request(app)
      .get(`${prefix}/fhir/R4/$export`)
      .set('Authorization', admin)
      .set('Prefer', 'respond-async');
    expect(kickoff.status).toBe(202);
    const statusPath = local(kickoff.headers['content-location'], prefix, origin);
    const manifest = await eventually('the export to complete', async () => {
      const status = await request(app).get(statusPath).set('Authorization', admin);
      return status.status === 200 && (status.body as { request: string; output: { url: string }[] });
    });
    local(manifest.request, prefix, origin);
    expect(manifest.output.length).toBeGreaterThan(0);
    for (const file of manifest.output) {
      expect(
        (
          await request(app)
            .get(local(file.url, prefix, origin))
            .set('Authorization', admin)
        ).status,
      ).toBe(200);
    }
  });

  it('issues tokens for its own mount: iss and aud are the origin plus the mount path', async () => {
    const { app } = await mounted(prefix, nested, undefined, origin);
    const token = await rootToken(app, prefix);
    expect(claims(token)).toMatchObject({ iss: `${origin}${prefix}`, aud: `${origin}${prefix}` });
    const projects = await request(app)
      .post(`${prefix}/fhir/R4/Project/$init`)
      .set('Authorization', `Bearer ${token}`)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'Mine' })));
    expect(projects.status).toBe(201);
  });
});

describe('tokens and mounts', () => {
  it('a token issued under /api is refused by a platform over the same store mounted elsewhere', async () => {
    const api = await mounted('/api', false);
    const other = await mounted('/other', false, api.storage);
    const nested = await mounted('/api/v1', true, api.storage);
    const token = await rootToken(api.app, '/api');
    const init = (app: express.Express, prefix: string, bearer = token) =>
      request(app)
        .post(`${prefix}/fhir/R4/Project/$init`)
        .set('Authorization', `Bearer ${bearer}`)
        .type(FHIR_JSON)
        .send(JSON.stringify(parameters({ name: 'Where' })));
    expect((await init(api.app, '/api')).status).toBe(201);
    for (const [app, prefix] of [
      [other.app, '/other'],
      [nested.app, '/api/v1'],
    ] as const) {
      const refused = await init(app, prefix);
      expect(refused.status).toBe(401);
      expect(refused.headers['www-authenticate']).toMatch(/invalid_token/);
    }
    // And the other way round: the other mount's own token works there only.
    const otherToken = await rootToken(other.app, '/other');
    expect((await init(api.app, '/api', otherToken)).status).toBe(401);
    expect((await init(other.app, '/other', otherToken)).status).toBe(201);
  });

  it('a host issuer given in token options is used by the token endpoint and the verifier alike', async () => {
    const dir = tempDir('fpk-mount-');
    const storage = memoryStorage();
    await ensureSuperAdminClient(storage, { clientId: ROOT_ID, clientSecret: ROOT_SECRET });
    const platform = fhirPlatform({
      storage,
      exportDir: path.join(dir, 'exports'),
      token: { rateLimit: false, issuer: 'https://issuer.example.org', audience: 'https://aud.example.org' },
    });
    cleanups.push(async () => {
      await platform.close();
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const app = express().use('/api', platform.router);
    const token = await rootToken(app, '/api');
    expect(claims(token)).toMatchObject({
      iss: 'https://issuer.example.org',
      aud: 'https://aud.example.org',
    });
    const init = await request(app)
      .post('/api/fhir/R4/Project/$init')
      .set('Authorization', `Bearer ${token}`)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'Issuer' })));
    expect(init.status).toBe(201);
  });
});
