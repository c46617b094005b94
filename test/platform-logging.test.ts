import fs from 'node:fs';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureSuperAdminClient } from '../src/auth/client/super-admin.js';
import type { Logger } from '../src/common/logger.js';
import { fhirPlatform } from '../src/platform.js';
import { memoryStorage } from '../src/stores.js';
import type { Storage } from '../src/storage/types.js';
import { clientKey, signAssertion } from './auth/client-keys.js';
import { FHIR_JSON, parameters, ROOT_ID, ROOT_SECRET, SCIM_JSON } from './helpers/platform-app.js';
import { tempDir } from './helpers/temp-dir.js';

const ORIGIN = 'https://fhir.example.org';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Line {
  level: string;
  fields: Record<string, unknown>;
  message: string | undefined;
}

/** A pino-shaped logger keeping every line, with `child` bindings merged in as pino does. */
function captureLogger(lines: Line[], bindings: Record<string, unknown> = {}): Logger {
  const at =
    (level: string) =>
    (fields: object, message?: string): void => {
      lines.push({ level, fields: { ...bindings, ...fields }, message });
    };
  return {
    error: at('error'),
    warn: at('warn'),
    info: at('info'),
    debug: at('debug'),
    child: (more) => captureLogger(lines, { ...bindings, ...more }),
  };
}

/** `storage` whose Observation searches fail with a message quoting the caller's credentials. */
function failingSearches(storage: Storage, leak: () => string): Storage {
  return new Proxy(storage, {
    get(target, prop) {
      if (prop === 'searchResources') {
        return (projectId: string, type: string, query?: unknown) => {
          if (type === 'Observation') throw new Error(`search failed for ${leak()}`);
          return target.searchResources(projectId, type, query as never);
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

describe('fhirPlatform logger', () => {
  it('logs requests and 5xx errors with ids only: no token, secret, assertion, header, query or body', async () => {
    const dir = tempDir('fpk-logging-');
    const inner = memoryStorage();
    await ensureSuperAdminClient(inner, { clientId: ROOT_ID, clientSecret: ROOT_SECRET });
    let lastAuthorization = '';
    const storage = failingSearches(inner, () => lastAuthorization);
    const lines: Line[] = [];
    const onErrorCalls: unknown[] = [];
    const platform = fhirPlatform({
      storage,
      exportDir: path.join(dir, 'exports'),
      baseUrl: ORIGIN,
      scimBasicAuth: true,
      token: { rateLimit: false },
      logger: captureLogger(lines),
      logRequests: true,
      onError: (error) => onErrorCalls.push(error),
    });
    cleanups.push(async () => {
      await platform.close();
      await inner.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const app = express().use('/api', platform.router);
    const secrets: string[] = [ROOT_SECRET];

    // Super admin token through client_secret_post (the secret in the form body).
    const rootToken = await request(app)
      .post('/api/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: ROOT_ID, client_secret: ROOT_SECRET });
    expect(rootToken.status).toBe(200);
    const root = `Bearer ${rootToken.body.access_token as string}`;
    secrets.push(rootToken.body.access_token as string);

    const init = await request(app)
      .post('/api/fhir/R4/Project/$init')
      .set('Authorization', root)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'Logged', ownerEmail: 'owner-body-marker@example.org' })));
    expect(init.status).toBe(201);
    secrets.push('owner-body-marker');
    const projectId = init.body.id as string;

    // A client with a secret (Basic on SCIM), and one with a key (private_key_jwt).
    const secretClient = await request(app)
      .post(`/api/fhir/R4/Project/${projectId}/$new-client`)
      .set('Authorization', root)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'with-secret', admin: true })));
    expect(secretClient.status).toBe(201);
    secrets.push(secretClient.body.secret as string);
    const key = await clientKey('ES384');
    const keyClient = await request(app)
      .post(`/api/fhir/R4/Project/${projectId}/$new-client`)
      .set('Authorization', root)
      .type(FHIR_JSON)
      .send(
        JSON.stringify(
          parameters({ name: 'with-key', admin: true, jwks: JSON.stringify({ keys: [key.publicJwk] }) }),
        ),
      );
    expect(keyClient.status).toBe(201);
    const assertion = await signAssertion(key, {
      clientId: keyClient.body.id as string,
      aud: `${ORIGIN}/api/oauth2/token`,
    });
    secrets.push(assertion);
    const keyToken = await request(app).post('/api/oauth2/token').type('form').send({
      grant_type: 'client_credentials',
      client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
      client_assertion: assertion,
    });
    expect(keyToken.status).toBe(200);
    const admin = `Bearer ${keyToken.body.access_token as string}`;
    secrets.push(keyToken.body.access_token as string);

    // SCIM over Basic (the Authorization header carries id:secret), with a body marker.
    const basic = `Basic ${Buffer.from(`${secretClient.body.id as string}:${secretClient.body.secret as string}`).toString('base64')}`;
    secrets.push(basic.slice('Basic '.length));
    const user = await request(app)
      .post('/api/scim/v2/Users')
      .set('Authorization', basic)
      .type(SCIM_JSON)
      .send(JSON.stringify({ userName: 'scim-body-marker@example.org', userType: 'Patient' }));
    expect(user.status).toBe(201);
    secrets.push('scim-body-marker');

    // FHIR write with a body marker, a search whose query carries a marker, a failing search.
    const patient = await request(app)
      .post('/api/fhir/R4/Patient')
      .set('Authorization', admin)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Patient', name: [{ family: 'FhirBodyMarker' }] }));
    expect(patient.status).toBe(201);
    secrets.push('FhirBodyMarker');
    const search = await request(app)
      .get('/api/fhir/R4/Patient?family=QueryMarker')
      .set('Authorization', admin);
    expect(search.status).toBe(200);
    secrets.push('QueryMarker');
    lastAuthorization = admin;
    const failed = await request(app).get('/api/fhir/R4/Observation').set('Authorization', admin);
    expect(failed.status).toBe(500);
    // A refused assertion and a bad bearer token are logged as requests, without the credential.
    const badAssertion = 'eyJhbGciOiJFUzM4NCJ9.eyJmYWtlIjoiYXNzZXJ0aW9uIn0.c2lnbmF0dXJlLW1hcmtlcg';
    secrets.push(badAssertion);
    expect(
      (
        await request(app).post('/api/oauth2/token').type('form').send({
          grant_type: 'client_credentials',
          client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
          client_assertion: badAssertion,
        })
      ).status,
    ).toBe(401);
    expect(
      (await request(app).get('/api/fhir/R4/Patient').set('Authorization', 'Bearer not-a-real-token-marker'))
        .status,
    ).toBe(401);
    secrets.push('not-a-real-token-marker');

    // Nothing secret anywhere in what was logged.
    const logged = lines.map((line) => JSON.stringify(line)).join('\n');
    for (const secret of secrets) expect(logged).not.toContain(secret);
    expect(logged).not.toMatch(/authorization|client_secret|client_assertion\b(?!_)/i);

    // One request line per request, with ids, through the logger's child.
    const requests = lines.filter((line) => line.message === 'request');
    expect(requests).toHaveLength(11);
    for (const line of requests) {
      expect(line.level).toBe('info');
      expect(line.fields.component).toBe('fhir-platform-kit');
      expect(typeof line.fields.ms).toBe('number');
    }
    expect(
      requests.find((line) => line.fields.path === '/api/fhir/R4/Patient' && line.fields.method === 'POST')
        ?.fields,
    ).toMatchObject({
      status: 201,
      projectId,
      clientId: keyClient.body.id,
    });
    expect(requests.map((line) => line.fields.path)).toContain('/api/fhir/R4/Patient');
    expect(requests.some((line) => String(line.fields.path).includes('?'))).toBe(false);

    // The 5xx: one error line (secrets redacted from the message) and onError, both.
    const errors = lines.filter((line) => line.level === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0]!.fields).toMatchObject({
      method: 'GET',
      path: '/api/fhir/R4/Observation',
      err: { type: 'Error', message: 'search failed for Bearer [redacted]' },
    });
    expect(onErrorCalls).toHaveLength(1);
  });

  it('does not log health probes, and refuses logRequests without a logger', async () => {
    const storage = memoryStorage();
    const dir = tempDir('fpk-logging-');
    const lines: Line[] = [];
    const platform = fhirPlatform({
      storage,
      exportDir: path.join(dir, 'exports'),
      logger: captureLogger(lines),
      logRequests: true,
    });
    cleanups.push(async () => {
      await platform.close();
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const app = express().use(platform.router);
    await platform.ready;
    expect((await request(app).get('/healthz')).status).toBe(200);
    expect((await request(app).get('/readyz')).status).toBe(200);
    expect((await request(app).get('/fhir/R4/metadata')).status).toBe(200);
    expect(lines.map((line) => line.fields.path)).toEqual(['/fhir/R4/metadata']);
    expect(() => fhirPlatform({ storage, exportDir: dir, logRequests: true })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'logRequests' }),
    );
  });

  it('errors go to stderr by default, to the logger alone when only it is given', async () => {
    const storage = memoryStorage();
    const lines: Line[] = [];
    const platform = fhirPlatform({ storage, bulk: false, logger: captureLogger(lines) });
    cleanups.push(async () => {
      await platform.close();
      await storage.close();
    });
    await storage.close(); // every storage call now fails: a 5xx
    const app = express().use(platform.router);
    const written: unknown[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => written.push(args);
    try {
      const res = await request(app).get('/oauth2/jwks');
      expect(res.status).toBe(503);
    } finally {
      console.error = original;
    }
    expect(written).toHaveLength(0);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.fields).toMatchObject({ err: { code: 'ERR_STORAGE_CLOSED' }, path: '/oauth2/jwks' });
  });
});
