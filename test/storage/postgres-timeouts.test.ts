// No call waits forever on PostgreSQL: a lock held elsewhere, a full pool and a close with work
// stuck all end, as 503 answers with Retry-After over HTTP.
import pg from 'pg';
import request from 'supertest';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { postgresStorage, type PostgresStorageOptions } from '../../src/postgres.js';
import { StorageUnavailableError } from '../../src/storage/errors.js';
import type { Storage } from '../../src/storage/types.js';
import { eventually } from '../helpers/eventually.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';

if (postgresTestUrl('PostgreSQL timeouts')) {
  const newSchema = schemaFactory(POSTGRES_URL!);
  const admin = new pg.Pool({ connectionString: POSTGRES_URL, max: 4 });
  const opened: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const item of opened.splice(0).reverse()) await item.close();
  });
  afterAll(() => admin.end());

  async function open(options: PostgresStorageOptions): Promise<{ storage: Storage; schema: string }> {
    const schema = newSchema();
    const storage = postgresStorage({ connectionString: POSTGRES_URL, schema, ...options });
    opened.push(storage);
    await storage.createProject({ id: 'p', name: 'P', strictMode: false });
    // The project's resource clock row exists from its first write on.
    await storage.createResource('p', { resourceType: 'Patient' });
    return { storage, schema };
  }

  /** Holds the project's resource clock lock (what every resource write takes) until `release`. */
  async function holdClockLock(schema: string): Promise<() => Promise<void>> {
    const client = await admin.connect();
    await client.query('BEGIN');
    await client.query(`SELECT 1 FROM "${schema}".resource_clocks WHERE project_id = 'p' FOR UPDATE`);
    return async () => {
      await client.query('ROLLBACK');
      client.release();
    };
  }

  /** Whether a backend of `schema`'s store waits on a lock (its queries name the schema). */
  async function waitingOnLock(schema: string): Promise<boolean> {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`,
      [schema],
    );
    return rows[0]!.n > 0;
  }

  describe('PostgreSQL timeouts', () => {
    it('answers a write that waits past lockTimeoutMs with 503 and Retry-After, and the next one after', async () => {
      const schema = newSchema();
      const storage = postgresStorage({ connectionString: POSTGRES_URL, schema, lockTimeoutMs: 300 });
      const t: PlatformTestApp = await createPlatformApp({}, storage);
      opened.push(t);
      const project = await t.initProject('locks');
      const client = await t.newClient(project, { name: 'c', scope: 'system/*.*' });
      const auth = await t.bearer(client.id, client.secret);
      const create = () =>
        request(t.app)
          .post('/fhir/R4/Patient')
          .set('Authorization', auth)
          .type(FHIR_JSON)
          .timeout(10_000)
          .send(JSON.stringify({ resourceType: 'Patient' }));
      expect((await create()).status).toBe(201);

      const lock = await admin.connect();
      await lock.query('BEGIN');
      await lock.query(`SELECT 1 FROM "${schema}".resource_clocks WHERE project_id = $1 FOR UPDATE`, [
        project,
      ]);
      try {
        const refused = await create();
        expect(refused.status).toBe(503);
        expect(refused.headers['retry-after']).toBeDefined();
        expect(refused.body.resourceType).toBe('OperationOutcome');
      } finally {
        await lock.query('ROLLBACK');
        lock.release();
      }
      expect((await create()).status).toBe(201);
    });

    it('fails a call that waits past acquireTimeoutMs for a connection; the ones holding one go on', async () => {
      const { storage, schema } = await open({ maxConnections: 2, acquireTimeoutMs: 200, lockTimeoutMs: 0 });
      const release = await holdClockLock(schema);
      // Two writes take both connections and wait for the lock; the others find no connection.
      let settled = 0;
      const writes = Array.from({ length: 4 }, () =>
        storage
          .createResource('p', { resourceType: 'Patient' })
          .then(
            () => 'created',
            (error: unknown) => error,
          )
          .finally(() => (settled += 1)),
      );
      // The lock is released once the two without a connection have given up (not after a fixed
      // time, by which a loaded machine may not have got there).
      await eventually('the writes without a connection to fail', () => settled === 2);
      await release();
      const results = await Promise.all(writes);
      expect(results.filter((r) => r === 'created')).toHaveLength(2);
      for (const r of results.filter((r) => r !== 'created'))
        expect(r).toBeInstanceOf(StorageUnavailableError);
    });

    it('closes within closeTimeoutMs with a call stuck on a lock, and that call fails', async () => {
      const { storage, schema } = await open({ lockTimeoutMs: 0, closeTimeoutMs: 300 });
      const release = await holdClockLock(schema);
      try {
        const stuck = storage.createResource('p', { resourceType: 'Patient' }).then(
          () => 'created',
          (error: unknown) => error,
        );
        await eventually('the write to wait on the lock', () => waitingOnLock(schema));
        const started = Date.now();
        await storage.close();
        expect(Date.now() - started).toBeLessThan(5_000);
        expect(await stuck).toBeInstanceOf(StorageUnavailableError);
      } finally {
        await release();
      }
    });

    it('runs project-locked kick-offs of more projects than the pool has connections', async () => {
      const { storage } = await open({ maxConnections: 2, acquireTimeoutMs: 5_000 });
      const queue = storage.exportQueue!;
      // Each holder of a project lock needs one more connection for its own statements.
      const results = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          queue.withProjectLock(`project-${i}`, async () => {
            await storage.listExportJobs({ projectId: `project-${i}` });
            return i;
          }),
        ),
      );
      expect(results).toEqual([0, 1, 2, 3, 4, 5]);
    });

    it('refuses timeouts that are not non-negative integers', () => {
      for (const name of ['acquireTimeoutMs', 'lockTimeoutMs', 'statementTimeoutMs', 'closeTimeoutMs'])
        expect(() => postgresStorage({ connectionString: POSTGRES_URL, [name]: -1 })).toThrow(
          expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
        );
    });
  });
}
