import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureSuperAdminClient } from '../src/auth/super-admin.js';
import { fhirPlatform, type FhirPlatform } from '../src/platform.js';
import { memoryStorage } from '../src/stores.js';
import { FHIR_JSON, parameters, ROOT_ID, ROOT_SECRET, SCIM_JSON } from './helpers/platform-app.js';

const ORIGIN = 'https://fhir.example.org';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** The platform mounted at `prefix` ('' = the root); `nested` puts it inside a second router. */
async function mounted(
  prefix: string,
  nested: boolean,
): Promise<{ app: express.Express; platform: FhirPlatform }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-mount-'));
  const storage = memoryStorage();
  await ensureSuperAdminClient(storage, { clientId: ROOT_ID, clientSecret: ROOT_SECRET });
  const platform = fhirPlatform({
    storage,
    exportDir: path.join(dir, 'exports'),
    baseUrl: ORIGIN,
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
    await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { app, platform };
}

/** The path of an absolute URL this server advertised, checked to start with ORIGIN + prefix. */
function local(url: unknown, prefix: string): string {
  expect(typeof url).toBe('string');
  expect(url as string).toMatch(new RegExp(`^${ORIGIN}${prefix}/`));
  return (url as string).slice(ORIGIN.length);
}

describe.each([
  ['the root', '', false],
  ['/api', '/api', false],
  ['a nested router (/api/v1)', '/api/v1', true],
])('fhirPlatform mounted under %s', (_name, prefix, nested) => {
  it('advertises and returns URLs that follow the mount path, and they all answer', async () => {
    const { app } = await mounted(prefix, nested);

    // Discovery, at the root of the mount and under the FHIR base.
    for (const where of ['/.well-known/smart-configuration', '/fhir/R4/.well-known/smart-configuration']) {
      const discovery = await request(app).get(`${prefix}${where}`);
      expect(discovery.status).toBe(200);
      expect(discovery.body.token_endpoint).toBe(`${ORIGIN}${prefix}/oauth2/token`);
      expect(discovery.body.jwks_uri).toBe(`${ORIGIN}${prefix}/oauth2/jwks`);
      expect((await request(app).get(local(discovery.body.jwks_uri, prefix))).status).toBe(200);
    }
    // The CapabilityStatement's oauth-uris extension names the same token URL.
    const metadata = await request(app).get(`${prefix}/fhir/R4/metadata`);
    expect(metadata.status).toBe(200);
    const oauth = metadata.body.rest[0].security.extension[0].extension as {
      url: string;
      valueUri: string;
    }[];
    const tokenUrl = oauth.find((e) => e.url === 'token')!.valueUri;
    expect(tokenUrl).toBe(`${ORIGIN}${prefix}/oauth2/token`);

    // Tokens from the advertised endpoint.
    const tokenPath = local(tokenUrl, prefix);
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
      (await request(app).get(local(user.body.meta.location, prefix)).set('Authorization', admin)).status,
    ).toBe(200);
    const created = await request(app)
      .post(`${prefix}/fhir/R4/Observation`)
      .set('Authorization', admin)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Observation', status: 'final', code: { text: 'x' } }));
    expect(created.status).toBe(201);
    expect(
      (await request(app).get(local(created.headers.location, prefix)).set('Authorization', admin)).status,
    ).toBe(200);
    const kickoff = await request(app)
      .get(`${prefix}/fhir/R4/$export`)
      .set('Authorization', admin)
      .set('Prefer', 'respond-async');
    expect(kickoff.status).toBe(202);
    const statusPath = local(kickoff.headers['content-location'], prefix);
    let manifest: { request: string; output: { url: string }[] } | undefined;
    for (let i = 0; i < 400 && !manifest; i++) {
      const status = await request(app).get(statusPath).set('Authorization', admin);
      if (status.status === 200) manifest = status.body;
      else await new Promise((resolve) => setTimeout(resolve, 25));
    }
    expect(manifest).toBeDefined();
    local(manifest!.request, prefix);
    expect(manifest!.output.length).toBeGreaterThan(0);
    for (const file of manifest!.output) {
      expect((await request(app).get(local(file.url, prefix)).set('Authorization', admin)).status).toBe(200);
    }
  });
});
