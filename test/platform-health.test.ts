import path from 'node:path';
import express from 'express';
import pg from 'pg';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureSuperAdminClient } from '../src/auth/client/super-admin.js';
import { fhirPlatform, type FhirPlatformOptions } from '../src/platform.js';
import { postgresStorage } from '../src/postgres.js';
import { fileStorage, memoryStorage } from '../src/stores.js';
import type { Storage } from '../src/storage/types.js';
import { postgresTestUrl } from './helpers/postgres.js';
import { tempDir } from './helpers/temp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The platform over `storage`, mounted under /api; closed (not the storage) after the test. */
async function platformApp(storage: Storage, extra: Partial<FhirPlatformOptions> = {}) {
  const platform = fhirPlatform({
    storage,
    exportDir: path.join(tempDir('fpk-health-'), 'exports'),
    ...extra,
  });
  let closed = false;
  cleanups.push(async () => {
    if (!closed) await platform.close();
  });
  await platform.ready;
  const app = express().use('/api', platform.router);
  return {
    app,
    close: async () => {
      closed = true;
      await platform.close();
    },
  };
}

/** `storage` whose `ping` is replaced (every other call goes to the store itself). */
function withPing(storage: Storage, ping: () => Promise<void>): Storage {
  return new Proxy(storage, {
    get(target, prop) {
      if (prop === 'ping') return ping;
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

describe('health endpoints', () => {
  it('answers liveness and readiness without credentials, revealing no data', async () => {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const { app } = await platformApp(storage);
    const live = await request(app).get('/api/healthz');
    expect(live.status).toBe(200);
    expect(live.body).toEqual({ status: 'ok' });
    expect(live.headers['cache-control']).toBe('no-store');
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({
      status: 'ready',
      checks: { storage: 'ok', exportWorkers: 'ok', signingKeys: 'ok' },
    });
    // Anything else under the platform still needs a token.
    expect((await request(app).get('/api/fhir/R4/Patient')).status).toBe(401);
  });

  it('answers 503 naming the storage once it is closed, and the export workers once stopped', async () => {
    const storage = memoryStorage();
    const { app, close } = await platformApp(storage);
    await storage.close();
    const storageDown = await request(app).get('/api/readyz');
    expect(storageDown.status).toBe(503);
    expect(storageDown.body).toEqual({
      status: 'not ready',
      checks: { storage: 'unreachable', exportWorkers: 'ok', signingKeys: 'unavailable' },
    });
    // Liveness does not depend on the store.
    expect((await request(app).get('/api/healthz')).status).toBe(200);
    await close();
    expect((await request(app).get('/api/readyz')).body.checks.exportWorkers).toBe('closed');
  });

  it('answers 503 when the export worker entry cannot be found', async () => {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const { app } = await platformApp(storage, {
      bulk: { pool: { workerFilename: path.join(tempDir('fpk-health-'), 'missing-worker.js') } },
    });
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ storage: 'ok', exportWorkers: 'worker-missing', signingKeys: 'ok' });
  });

  it('gives up on a store that does not answer within readyTimeout', async () => {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const hanging = withPing(storage, () => new Promise<void>(() => undefined));
    const { app } = await platformApp(hanging, { readyTimeout: 50 });
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ storage: 'timeout', exportWorkers: 'ok', signingKeys: 'ok' });
  });

  it('reports no export workers without bulk export, and follows paths', async () => {
    const storage = await fileStorage({ dir: tempDir('fpk-health-') });
    cleanups.push(() => storage.close());
    const { app } = await platformApp(storage, {
      bulk: false,
      paths: { healthz: '/live', readyz: '/ready' },
    });
    expect((await request(app).get('/api/live')).status).toBe(200);
    const ready = await request(app).get('/api/ready');
    expect(ready.status).toBe(200);
    expect(ready.body.checks).toEqual({ storage: 'ok', signingKeys: 'ok' });
    expect((await request(app).get('/api/healthz')).status).not.toBe(200);
  });

  it('answers 503 for a PostgreSQL store whose pool points at a dead port', async () => {
    // Port 1 on the loopback: nothing listens, connections are refused at once.
    const pool = new pg.Pool({ host: '127.0.0.1', port: 1, user: 'postgres', database: 'none' });
    pool.on('error', () => undefined);
    const storage = postgresStorage({ pool, schema: 'health_dead' });
    cleanups.push(async () => {
      await storage.close();
      await pool.end();
    });
    const { app } = await platformApp(storage, { bulk: false });
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toEqual({
      status: 'not ready',
      checks: { storage: 'unreachable', signingKeys: 'unavailable' },
    });
    // The answer names what is down, not why: no address, port or driver message.
    expect(JSON.stringify(ready.body)).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|5432/);
  });

  const url = postgresTestUrl('readiness of a reachable PostgreSQL store');
  it.runIf(url)('answers 200 for a PostgreSQL store that is reachable', async () => {
    if (!url) return;
    const schema = `health_${Date.now()}_${Math.floor(Math.random() * 1e6)}`;
    const storage = postgresStorage({ connectionString: url, schema });
    cleanups.push(async () => {
      await storage.close();
      const admin = new pg.Pool({ connectionString: url });
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    });
    const { app } = await platformApp(storage);
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.checks).toEqual({ storage: 'ok', exportWorkers: 'ok', signingKeys: 'ok' });
  });
});

/** A promise and the functions that settle it. */
function deferred() {
  let resolve!: () => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('readiness held for start-up work', () => {
  async function heldApp() {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const platform = fhirPlatform({ storage, bulk: false });
    cleanups.push(() => platform.close());
    await platform.ready;
    return { storage, platform, app: express().use('/api', platform.router) };
  }

  it('answers /readyz 503 naming the pending work, and 503 on every route in its protocol, until it is done', async () => {
    const { storage, platform, app } = await heldApp();
    const work = deferred();
    platform.holdReadiness('superAdmin', work.promise);
    const held = await request(app).get('/api/readyz');
    expect(held.status).toBe(503);
    expect(held.body).toEqual({
      status: 'not ready',
      checks: { storage: 'ok', signingKeys: 'ok', superAdmin: 'pending' },
    });
    expect((await request(app).get('/api/healthz')).status).toBe(200);

    const token = await request(app)
      .post('/api/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'root', client_secret: 'secret' });
    expect(token.status).toBe(503);
    expect(token.body.error).toBe('temporarily_unavailable');
    expect(token.headers['retry-after']).toBe('1');
    expect(token.headers['cache-control']).toBe('no-store');
    const fhir = await request(app).get('/api/fhir/R4/Patient');
    expect(fhir.status).toBe(503);
    expect(fhir.headers['content-type']).toMatch(/^application\/fhir\+json/);
    expect(fhir.body).toMatchObject({ resourceType: 'OperationOutcome', issue: [{ code: 'transient' }] });
    expect(fhir.headers['retry-after']).toBe('1');
    const scim = await request(app).get('/api/scim/v2/Users');
    expect(scim.status).toBe(503);
    expect(scim.headers['content-type']).toMatch(/^application\/scim\+json/);
    expect(scim.body).toMatchObject({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'],
      status: '503',
    });

    await ensureSuperAdminClient(storage, { clientId: 'root', clientSecret: 'secret' });
    work.resolve();
    await work.promise;
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.checks).toEqual({ storage: 'ok', signingKeys: 'ok', superAdmin: 'ok' });
    const issued = await request(app)
      .post('/api/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'root', client_secret: 'secret' });
    expect(issued.status).toBe(200);
    expect((await request(app).get('/api/fhir/R4/Patient')).status).toBe(401);
  });

  it('stays not ready after failed work, until new work under the same name is done', async () => {
    const { platform, app } = await heldApp();
    const first = deferred();
    platform.holdReadiness('seed', first.promise);
    first.reject(new Error('seeding failed'));
    await first.promise.catch(() => undefined);
    const failed = await request(app).get('/api/readyz');
    expect(failed.status).toBe(503);
    expect(failed.body.checks.seed).toBe('failed');
    expect((await request(app).get('/api/fhir/R4/metadata')).status).toBe(503);

    const second = deferred();
    platform.holdReadiness('seed', second.promise);
    expect((await request(app).get('/api/readyz')).body.checks.seed).toBe('pending');
    second.resolve();
    await second.promise;
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.checks.seed).toBe('ok');
    expect((await request(app).get('/api/fhir/R4/metadata')).status).toBe(200);
  });

  it('ignores earlier work under a name held again', async () => {
    const { platform, app } = await heldApp();
    const earlier = deferred();
    platform.holdReadiness('seed', earlier.promise);
    platform.holdReadiness('seed', Promise.resolve());
    earlier.reject(new Error('superseded'));
    await earlier.promise.catch(() => undefined);
    expect((await request(app).get('/api/readyz')).status).toBe(200);
  });

  it('refuses a bad name, a check of the platform, or work that is no promise', async () => {
    const { platform } = await heldApp();
    for (const name of ['storage', 'exportWorkers', 'signingKeys', '', 'two words', 'x'.repeat(65)])
      expect(() => platform.holdReadiness(name, Promise.resolve()), name).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'name' }),
      );
    expect(() => platform.holdReadiness('seed', undefined as never)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'work' }),
    );
  });
});

describe('readiness of the signing key', () => {
  it('makes the signing key on the first probe when the store has none', async () => {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const { app } = await platformApp(storage, { bulk: false });
    expect(await storage.listSigningKeys()).toEqual([]);
    const ready = await request(app).get('/api/readyz');
    expect(ready.body.checks.signingKeys).toBe('ok');
    expect(await storage.listSigningKeys()).toHaveLength(1);
  });

  it('answers 503 while no signing key can be loaded or saved', async () => {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const failing = new Proxy(storage, {
      get(target, prop) {
        if (prop === 'listSigningKeys') return () => Promise.reject(new Error('disk gone'));
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const { app } = await platformApp(failing, { bulk: false });
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ storage: 'ok', signingKeys: 'unavailable' });
    expect(JSON.stringify(ready.body)).not.toContain('disk gone');
  });
});
