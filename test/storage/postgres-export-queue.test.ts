// The PostgreSQL export job queue (leases) and export file store, in one process: two stores on one
// schema stand for two instances.
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import express from 'express';
import { buffer } from 'node:stream/consumers';
import pg from 'pg';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgresExportFiles } from '../../src/storage/postgres/export-files.js';
import { postgresStorage } from '../../src/postgres.js';
import type { ExportJobRecord, NewExportJob, Storage } from '../../src/storage/types.js';
import { BASE, createApp, downloadAll, exportManifest, token } from '../helpers/bulk-export.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { afterTest } from '../helpers/cleanup.js';
import { postgresTestUrl } from '../helpers/postgres.js';

const url = postgresTestUrl('PostgreSQL export queue and files');

if (url) {
  const connectionString = url;
  let admin: pg.Pool;
  const schemas: string[] = [];

  /** Two stores (two instances) on a fresh schema, closed after the test. */
  function twoInstances(options: { exportFileChunkBytes?: number } = {}): [Storage, Storage, string] {
    const schema = `fpk_queue_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    const a = postgresStorage({ connectionString, schema, ...options });
    const b = postgresStorage({ connectionString, schema, ...options });
    afterTest(async () => {
      await a.close();
      await b.close();
    });
    return [a, b, schema];
  }

  /** A new job of `projectId` with a fresh snapshot, as a kick-off makes it. */
  async function jobInput(storage: Storage, projectId = 'p1'): Promise<NewExportJob> {
    const snapshot = await storage.exportSnapshot(projectId);
    return {
      id: randomUUID(),
      projectId,
      ownerId: 'client',
      status: 'accepted',
      request: 'http://x/$export',
      transactionTime: snapshot.takenAt,
      params: {},
      snapshot,
    };
  }

  /**
   * Ends the lease (or download hold) of a job now, as the database's clock passing its end would:
   * leases run on `clock_timestamp()`, so the tests move the lease rather than sleep past it, and
   * hold every lease for a minute meanwhile (a slow machine cannot let one lapse early).
   */
  async function expireLease(schema: string, jobId: string): Promise<void> {
    const { rowCount } = await admin.query(
      `UPDATE "${schema}".export_jobs SET lease_until = clock_timestamp() - interval '1 second'
        WHERE id = $1 AND lease_until IS NOT NULL`,
      [jobId],
    );
    expect(rowCount).toBe(1);
  }

  async function newJob(storage: Storage, projectId = 'p1'): Promise<ExportJobRecord> {
    return storage.createExportJob(await jobInput(storage, projectId));
  }

  beforeAll(() => {
    admin = new pg.Pool({ connectionString, max: 2 });
  });
  afterAll(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  describe('PostgreSQL export queue', () => {
    it('a job is leased to one run at a time; an expired lease is taken over and the old run is shut out', async () => {
      const [a, b, schema] = twoInstances();
      const job = await newJob(a);
      const qa = a.exportQueue!;
      const qb = b.exportQueue!;
      const claims = await Promise.all([qa.claim('run-a', 60_000), qb.claim('run-b', 60_000)]);
      expect(claims.filter((c) => c !== undefined).map((c) => c.id)).toEqual([job.id]);
      const winner = claims[0] ? 'run-a' : 'run-b';
      const loser = winner === 'run-a' ? 'run-b' : 'run-a';
      expect(await qa.claim('run-c', 60_000)).toBeUndefined();
      expect(await qb.renew('p1', job.id, winner, 60_000)).toBe(true);
      expect(await qb.renew('p1', job.id, loser, 60_000)).toBe(false);
      // The winner dies: no renewal; once the lease has expired, another run claims the job.
      await expireLease(schema, job.id);
      const taken = await qb.claim('run-d', 10_000);
      expect(taken?.id).toBe(job.id);
      expect(taken?.transactionTime).toBe(job.transactionTime);
      expect(taken?.snapshot).toEqual(job.snapshot);
      expect(await qa.renew('p1', job.id, winner, 60_000)).toBe(false);
      // The old run can neither finish the job nor add files to it.
      expect(await qa.finish('p1', job.id, winner, { status: 'completed' })).toBe(false);
      await expect(
        a.exportFiles!.sink({ projectId: 'p1', jobId: job.id, run: winner }).create('Patient-1.ndjson'),
      ).rejects.toMatchObject({ code: 'ERR_EXPORT_STOPPED' });
      expect(await qb.finish('p1', job.id, 'run-d', { status: 'completed' })).toBe(true);
      expect((await a.readExportJob('p1', job.id)).status).toBe('completed');
      // Over: nothing to claim, no lease to renew.
      expect(await qa.claim('run-e', 60_000)).toBeUndefined();
      expect(await qb.renew('p1', job.id, 'run-d', 60_000)).toBe(false);
    });

    it('a job created leased is not claimed by another instance until its lease expires', async () => {
      const [a, b, schema] = twoInstances();
      const job = await a.exportQueue!.createLeased(await jobInput(a), 'run-a', 60_000);
      expect((await b.readExportJob('p1', job.id)).status).toBe('accepted');
      expect(await b.exportQueue!.claim('run-b', 60_000)).toBeUndefined();
      expect(await a.exportQueue!.renew('p1', job.id, 'run-a', 60_000)).toBe(true);
      await expect(a.exportQueue!.createLeased({ ...job }, 'run-a', 60_000)).rejects.toMatchObject({
        code: 'ERR_STORAGE_CONFLICT',
      });
      await expireLease(schema, job.id);
      expect((await b.exportQueue!.claim('run-b', 60_000))?.id).toBe(job.id);
    });

    it("a download hold keeps a finished job from every instance's expiry sweep until it lapses", async () => {
      const [a, b, schema] = twoInstances();
      const job = await newJob(a);
      // Runnable jobs are not download holds: a lease on them belongs to a run.
      await a.exportQueue!.holdForDownload('p1', job.id, 60_000);
      expect((await b.exportQueue!.claim('run-b', 60_000))?.id).toBe(job.id);
      expect(await b.exportQueue!.finish('p1', job.id, 'run-b', { status: 'completed' })).toBe(true);
      await a.exportQueue!.holdForDownload('p1', job.id, 60_000);
      expect(await b.exportQueue!.deleteIfUnheld('p1', job.id)).toBe(false);
      expect((await b.readExportJob('p1', job.id)).status).toBe('completed');
      await expireLease(schema, job.id);
      expect(await b.exportQueue!.deleteIfUnheld('p1', job.id)).toBe(true);
      await expect(a.readExportJob('p1', job.id)).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });
      // Gone already: nothing holds it.
      expect(await a.exportQueue!.deleteIfUnheld('p1', job.id)).toBe(true);
    });

    it('a released job is claimable at once', async () => {
      const [a, b] = twoInstances();
      const job = await newJob(a);
      expect((await a.exportQueue!.claim('run-a', 60_000, { projectId: 'p1', id: job.id }))?.id).toBe(job.id);
      expect(await b.exportQueue!.claim('run-b', 60_000)).toBeUndefined();
      await a.exportQueue!.release('p1', job.id, 'run-a');
      expect((await b.exportQueue!.claim('run-b', 60_000))?.id).toBe(job.id);
    });

    it('concurrent kick-offs through two instances: the running-export limit counts the jobs of both', async () => {
      const [a, b] = twoInstances();
      await a.createResource('proj-a', { resourceType: 'Patient', id: 'p' });
      const options = { maxRunningExports: 1, onError: () => undefined };
      const one = createApp(a, options);
      const two = createApp(b, options);
      afterTest(() => one.router.close());
      afterTest(() => two.router.close());
      const auth = token('proj-a');
      const answers = await Promise.all(
        [one.app, two.app, one.app, two.app].map((app) =>
          request(app).get('/fhir/R4/$export').set('Authorization', auth),
        ),
      );
      expect(answers.map((r) => r.status).sort()).toEqual([202, 429, 429, 429]);
      expect((await a.listExportJobs({ projectId: 'proj-a' })).length).toBe(1);
    });
  });

  describe('the built package on PostgreSQL', () => {
    it('workers reopen the store and its export files from the package entry', async () => {
      const dist = fileURLToPath(new URL('../../dist/', import.meta.url));
      if (!fs.existsSync(`${dist}index.js`)) throw new Error('dist/ is missing: run `npm run build` first');
      const mod = {
        ...((await import(pathToFileURL(`${dist}postgres.js`).href)) as {
          postgresStorage: typeof postgresStorage;
        }),
        ...((await import(pathToFileURL(`${dist}index.js`).href)) as {
          bulkExportRouter: (options: Record<string, unknown>) => express.Router & { close(): Promise<void> };
        }),
      };
      const schema = `fpk_queue_${randomBytes(6).toString('hex')}`;
      schemas.push(schema);
      const storage = mod.postgresStorage({ connectionString, schema });
      afterTest(() => storage.close());
      expect(storage.exportFiles?.descriptor?.module).toMatch(/\/dist\/postgres\.js$/);
      await storage.createResource('proj-a', { resourceType: 'Patient', id: 'p1' });
      const router = mod.bulkExportRouter({
        storage,
        authenticate: testAuthenticate,
        onError: () => undefined,
      });
      afterTest(() => router.close());
      const app = express();
      app.use(BASE, router);
      const manifest = await exportManifest(app, token('proj-a'), '/$export?_type=Patient');
      expect((await downloadAll(app, token('proj-a'), manifest)).get('Patient')?.map((p) => p.id)).toEqual([
        'p1',
      ]);
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".export_files WHERE complete`,
      );
      expect(rows[0]!.n).toBe(1);
    });
  });

  describe('PostgreSQL export files', () => {
    it('written in chunks, complete files served whole or by range, removed with their job', async () => {
      const [a, , schema] = twoInstances({ exportFileChunkBytes: 10 });
      const job = await newJob(a);
      const ref = { projectId: 'p1', jobId: job.id };
      const files = a.exportFiles!;
      const sink = files.sink(ref);
      const file = await sink.create('Patient-1.ndjson');
      const text = Array.from({ length: 20 }, (_, i) => `{"resourceType":"Patient","id":"${i}"}\n`).join('');
      for (let at = 0; at < text.length; at += 7) await file.write(text.slice(at, at + 7));
      // Not served before it is complete.
      expect(await files.size(ref, 'Patient-1.ndjson')).toBeUndefined();
      await file.commit();
      const dropped = await sink.create('Patient-2.ndjson');
      await dropped.write('{"x":1}\n');
      await dropped.abort();
      expect(await files.size(ref, 'Patient-1.ndjson')).toBe(text.length);
      expect(await files.size(ref, 'Patient-2.ndjson')).toBeUndefined();
      expect(await files.bytes(ref)).toBe(text.length);
      expect((await buffer(files.read(ref, 'Patient-1.ndjson'))).toString()).toBe(text);
      for (const [start, end] of [
        [0, 0],
        [5, 23],
        [text.length - 3, text.length - 1],
      ] as const) {
        const part = await buffer(files.read(ref, 'Patient-1.ndjson', { start, end }));
        expect(part.toString()).toBe(text.slice(start, end + 1));
      }
      // A worker reopens the store from its descriptor and sees the same files.
      expect(files.descriptor?.exportName).toBe('openPostgresExportFiles');
      const reopened = openPostgresExportFiles(files.descriptor!.options as { connectionString: string });
      expect((await buffer(reopened.read(ref, 'Patient-1.ndjson'))).toString()).toBe(text);
      await reopened.close();
      await a.deleteExportJob('p1', job.id);
      const { rows } = await admin.query<{ n: number }>(
        `SELECT (SELECT count(*) FROM "${schema}".export_files) + (SELECT count(*) FROM "${schema}".export_file_chunks) AS n`,
      );
      expect(Number(rows[0]!.n)).toBe(0);
    });
  });
}
