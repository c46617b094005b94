// PostgreSQL lost while an export runs (its worker reads through COPY and writes its files into the
// database), and the database's backends terminated in the middle of a request
// (`pg_terminate_backend`, what a restart does to them). Each run: the answer in protocol shape
// while the database is gone, the job ending cleanly (failed with an OperationOutcome and no file
// of it left, or completed whole), the server up, and everything working once it is back.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import request from 'supertest';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import type { Storage } from '../../src/storage/types.js';
import { download } from '../helpers/bulk-export.js';
import { Relay } from '../helpers/pg-relay.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';
import { slowExports } from '../helpers/slow-exports.js';
import { sleep } from '../helpers/sleep.js';
import { eventually } from '../helpers/eventually.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/** Enough data (about 1 MB) that a COPY is still streaming, not buffered whole, when the fault hits. */
const PATIENTS = 1000;
const FILLER = 'x'.repeat(1000);

if (postgresTestUrl('PostgreSQL lost mid-export and mid-request')) {
  const url = new URL(POSTGRES_URL!);
  const schema = schemaFactory(POSTGRES_URL!);
  let relay: Relay;
  let relayed: URL;
  let admin: pg.Pool;
  const apps: PlatformTestApp[] = [];

  beforeAll(async () => {
    relay = new Relay({ host: url.hostname, port: Number(url.port || 5432) });
    relayed = new URL(url);
    relayed.hostname = '127.0.0.1';
    relayed.port = String(await relay.listen());
    admin = new pg.Pool({ connectionString: POSTGRES_URL!, max: 2 });
  });
  afterEach(async () => {
    relay.restore();
    for (const t of apps.splice(0)) await t.close();
  });
  afterAll(async () => {
    await admin.end();
    await relay.close();
  });

  /**
   * A platform on a new schema reached through `base` (the relay or the database), tagged with its
   * own `application_name` so that only its backends are terminated; exports slowed per chunk.
   */
  async function platform(base: URL) {
    const app = `fpk_rel_${randomBytes(5).toString('hex')}`;
    const connection = new URL(base);
    connection.searchParams.set('application_name', app);
    const name = schema();
    const storage: Storage = slowExports(
      postgresStorage({
        connectionString: connection.href,
        schema: name,
        exportChunkBytes: 16 * 1024,
        exportFileChunkBytes: 16 * 1024,
      }),
      () => 20,
    );
    const t = await createPlatformApp({}, storage);
    apps.push(t);
    const projectId = await t.initProject('Acme');
    const client = await t.newClient(projectId, { name: 'app', scope: 'system/*.*', admin: true });
    const auth = await t.bearer(client.id, client.secret);
    await storage.writeResources(
      projectId,
      Array.from({ length: PATIENTS }, (_, i) => ({
        op: 'update' as const,
        resource: { resourceType: 'Patient', id: `p${i}`, name: [{ family: `F${i}`, text: FILLER }] },
      })),
    );
    const status = (path: string) => request(t.app).get(path).set('Authorization', auth);
    const kickoff = async (): Promise<string> => {
      const res = await request(t.app)
        .get('/fhir/R4/$export?_type=Patient')
        .set('Authorization', auth)
        .set('Prefer', 'respond-async');
      expect(res.status, res.text).toBe(202);
      return new URL(res.headers['content-location'] as string).pathname;
    };
    /** Polls until the job made progress (some resources written); how many it wrote. */
    const started = (path: string): Promise<number> =>
      eventually('the export to make progress', async () => {
        const res = await status(path);
        expect(res.status, res.text).toBe(202);
        const done = Number(/^(\d+) resources/.exec(res.headers['x-progress'] as string)?.[1] ?? 0);
        return done > 0 && done;
      });
    /** Polls until the status is neither 202 nor 503. */
    const outcome = (path: string): Promise<request.Response> =>
      eventually(
        'the export to end',
        async () => {
          const res = await status(path);
          if (res.status === 503) expectOperationOutcome(res, 503, 'transient');
          return res.status !== 202 && res.status !== 503 && res;
        },
        { intervalMs: 100 },
      );
    /** The ids in a completed export's Patient files. */
    const exported = async (res: request.Response): Promise<string[]> => {
      expect(res.status, res.text).toBe(200);
      const manifest = JSON.parse(res.text) as { output: { url: string }[] };
      const ids: string[] = [];
      for (const file of manifest.output) {
        for (const resource of await download(t.app, auth, file.url)) ids.push(String(resource.id));
      }
      return ids.sort();
    };
    const all = Array.from({ length: PATIENTS }, (_, i) => `p${i}`).sort();
    /** Export file rows of a job (complete or not), straight from the database. */
    const fileRows = async (path: string): Promise<number> => {
      const jobId = path.split('/').at(-1)!;
      const { rows } = await admin.query<{ n: string }>(
        `SELECT count(*) AS n FROM "${name}".export_files WHERE job_id = $1`,
        [jobId],
      );
      return Number(rows[0]!.n);
    };
    const terminate = async (): Promise<number> => {
      const { rowCount } = await admin.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
        [app],
      );
      return rowCount ?? 0;
    };
    return { t, app, name, auth, status, kickoff, started, outcome, exported, all, fileRows, terminate };
  }

  /** A job hit by a fault: failed with an OperationOutcome and no file left, or completed whole. */
  async function endedCleanly(p: Awaited<ReturnType<typeof platform>>, path: string): Promise<string> {
    const end = await p.outcome(path);
    if (end.status === 200) {
      expect(await p.exported(end)).toEqual(p.all);
      return 'completed';
    }
    expectOperationOutcome(end, 500, 'transient');
    expect(await p.fileRows(path)).toBe(0);
    return 'failed';
  }

  describe('PostgreSQL lost mid-export and mid-request', () => {
    it('connections cut while an export runs in a worker: 503 while cut, then the job ends cleanly; a new export succeeds', async () => {
      const p = await platform(relayed);
      const path = await p.kickoff();
      // Cut half-way: the worker has written part of the resources (what the socket buffers held
      // beyond that is lost with the connections).
      expect(await p.started(path)).toBeLessThan(PATIENTS);
      relay.cut();
      expectOperationOutcome(await p.status(path), 503, 'transient');
      const read = await request(p.t.app).get('/fhir/R4/Patient/p1').set('Authorization', p.auth);
      expectOperationOutcome(read, 503, 'transient');
      expect(read.headers['retry-after']).toBe('1');
      await sleep(300); // the database stays unreachable a while
      relay.restore();
      const ended = await endedCleanly(p, path);
      console.info(`PostgreSQL cut mid-export: the job ${ended}`);
      expect(await p.exported(await p.outcome(await p.kickoff()))).toEqual(p.all);
    });

    it('backends terminated while an export runs: the job ends cleanly; a new export succeeds', async () => {
      const p = await platform(url);
      const path = await p.kickoff();
      expect(await p.started(path)).toBeLessThan(PATIENTS);
      // Every backend of the platform, the worker's included (its COPY may have been sent whole
      // into the socket buffers already: then the run goes on, its next queries on new connections).
      expect(await p.terminate()).toBeGreaterThan(0);
      const ended = await endedCleanly(p, path);
      console.info(`backends terminated mid-export: the job ${ended}`);
      expect(await p.exported(await p.outcome(await p.kickoff()))).toEqual(p.all);
    });

    it('backends terminated in the middle of a write: 503 OperationOutcome, the write absent; the next requests succeed', async () => {
      const p = await platform(url);
      const put = (id: string) =>
        request(p.t.app)
          .put(`/fhir/R4/Patient/${id}`)
          .set('Authorization', p.auth)
          .type(FHIR_JSON)
          .send(JSON.stringify({ resourceType: 'Patient', id }));
      expect((await put('kept')).status).toBe(201);
      // The write waits on a lock held here until its backend is terminated.
      const locker = await admin.connect();
      let pending: Promise<request.Response> | undefined;
      try {
        await locker.query('BEGIN');
        await locker.query(`LOCK TABLE "${p.name}".resources IN ACCESS EXCLUSIVE MODE`);
        pending = put('refused').then((r) => r);
        await eventually('the write waiting for the lock', async () => {
          const { rows } = await admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
            [p.app],
          );
          return Number(rows[0]!.n) > 0;
        });
        expect(await p.terminate()).toBeGreaterThan(0);
      } finally {
        await locker.query('ROLLBACK');
        locker.release();
      }
      const refused = await pending;
      expectOperationOutcome(refused, 503, 'transient');
      expect(refused.headers['retry-after']).toBe('1');
      expect((await put('after')).status).toBe(201);
      const read = (id: string) =>
        request(p.t.app).get(`/fhir/R4/Patient/${id}`).set('Authorization', p.auth);
      expect((await read('kept')).status).toBe(200);
      expect((await read('after')).status).toBe(200);
      expectOperationOutcome(await read('refused'), 404);
    });
  });
}
