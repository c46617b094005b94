import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import pg from 'pg';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { fhirPlatform, type FhirPlatformOptions } from '../src/platform.js';
import { postgresStorage } from '../src/postgres.js';
import { fileStorage, memoryStorage } from '../src/stores.js';
import type { Storage } from '../src/storage/types.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-health-'));
  cleanups.push(() => Promise.resolve(fs.rmSync(dir, { recursive: true, force: true })));
  return dir;
}

/** The platform over `storage`, mounted under /api; closed (not the storage) after the test. */
async function platformApp(storage: Storage, extra: Partial<FhirPlatformOptions> = {}) {
  const platform = fhirPlatform({ storage, exportDir: path.join(tempDir(), 'exports'), ...extra });
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
    expect(ready.body).toEqual({ status: 'ready', checks: { storage: 'ok', exportWorkers: 'ok' } });
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
      checks: { storage: 'unreachable', exportWorkers: 'ok' },
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
      bulk: { pool: { workerFilename: path.join(tempDir(), 'missing-worker.js') } },
    });
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ storage: 'ok', exportWorkers: 'worker-missing' });
  });

  it('gives up on a store that does not answer within readyTimeout', async () => {
    const storage = memoryStorage();
    cleanups.push(() => storage.close());
    const hanging = withPing(storage, () => new Promise<void>(() => undefined));
    const { app } = await platformApp(hanging, { readyTimeout: 50 });
    const ready = await request(app).get('/api/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ storage: 'timeout', exportWorkers: 'ok' });
  });

  it('reports no export workers without bulk export, and follows paths', async () => {
    const storage = await fileStorage({ dir: tempDir() });
    cleanups.push(() => storage.close());
    const { app } = await platformApp(storage, {
      bulk: false,
      paths: { healthz: '/live', readyz: '/ready' },
    });
    expect((await request(app).get('/api/live')).status).toBe(200);
    const ready = await request(app).get('/api/ready');
    expect(ready.status).toBe(200);
    expect(ready.body.checks).toEqual({ storage: 'ok' });
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
    expect(ready.body).toEqual({ status: 'not ready', checks: { storage: 'unreachable' } });
    // The answer names what is down, not why: no address, port or driver message.
    expect(JSON.stringify(ready.body)).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|5432/);
  });

  const url = process.env.FPK_TEST_POSTGRES_URL;
  it.runIf(url || process.env.CI)('answers 200 for a PostgreSQL store that is reachable', async () => {
    if (!url) throw new Error('FPK_TEST_POSTGRES_URL is required in CI');
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
    expect(ready.body.checks).toEqual({ storage: 'ok', exportWorkers: 'ok' });
  });
});
