// How an ExportPool ends (piscina's split): close() drains, destroy() terminates; and how the bulk
// router's close() uses them: running jobs get `closeTimeout` to finish, those still running stop
// (to resume later), then its own pool drains.
import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ExportPool } from '../../src/bulk/export-pool.js';
import type { ExportTask } from '../../src/bulk/export-task.js';
import type { FhirPlatformOptions } from '../../src/platform.js';
import { fileStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { createPlatformApp } from '../helpers/platform-app.js';
import { slowExports } from '../helpers/slow-exports.js';
import {
  createApp,
  kickoff,
  sampleResources,
  seed,
  tempDir,
  token,
  waitForProgress,
} from '../helpers/bulk-export.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';

/** A task exporting proj-a's Patients (4 of them, one chunk each) from `storage` into a new directory. */
async function patientTask(storage: Storage, descriptor: boolean): Promise<ExportTask> {
  const snapshot = await storage.exportSnapshot('proj-a');
  return {
    jobId: 'job-1',
    projectId: 'proj-a',
    params: { level: 'system', outputFormat: 'application/fhir+ndjson', lenient: false },
    types: ['Patient'],
    snapshot,
    ...(descriptor && storage.descriptor ? { descriptor: storage.descriptor } : {}),
    outputDir: tempDir('pool-out-'),
    maxFileSize: 1 << 20,
    issues: [],
  };
}

/** A store of the sample data whose every chunk (one resource) takes `delayMs` to read. */
async function slowStore(delayMs: number, descriptor: boolean) {
  const storage = fixtureStorage({ dir: tempDir(), delayMs, chunkLines: 1, descriptor });
  await seed(storage, sampleResources());
  return storage;
}

/** Resolves once `onProgress` has been called (the run has started reading). */
function started(): { onProgress: () => void; promise: Promise<void> } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { onProgress: () => resolve(), promise };
}

describe('ExportPool.close() and destroy()', () => {
  it.each([
    ['worker thread', true],
    ['this thread', false],
  ])('close() drains (%s): the running export ends whole, new ones are refused', async (_n, descriptor) => {
    const storage = await slowStore(100, descriptor);
    const pool = new ExportPool({ maxThreads: 1 });
    afterTest(() => pool.destroy());
    const task = await patientTask(storage, descriptor);
    const start = started();
    const run = pool.run(task, { reader: storage.exportReader, onProgress: start.onProgress });
    await start.promise;
    const closing = pool.close();
    expect(pool.status()).toBe('closed');
    await expect(pool.run(task, { reader: storage.exportReader })).rejects.toMatchObject({
      code: 'ERR_EXPORT_POOL_CLOSED',
    });
    const result = await run;
    expect(result.output).toEqual([{ type: 'Patient', file: expect.any(String), count: 4 }]);
    await closing;
    const file = path.join(task.outputDir!, result.output[0]!.file);
    expect(fs.readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(4);
  });

  it('destroy() terminates a worker: its running export rejects at once', async () => {
    // The first chunk takes 10 s: destroyed while the worker waits for it.
    const storage = await slowStore(10_000, true);
    const pool = new ExportPool({ maxThreads: 1 });
    afterTest(() => pool.destroy());
    const task = await patientTask(storage, true);
    const outcome = pool.run(task).then(
      () => 'resolved',
      () => 'rejected',
    );
    await new Promise((resolve) => setImmediate(resolve));
    const before = Date.now();
    await pool.destroy();
    expect(await outcome).toBe('rejected');
    expect(Date.now() - before).toBeLessThan(5000);
    expect(pool.status()).toBe('closed');
    await expect(pool.run(task)).rejects.toMatchObject({ code: 'ERR_EXPORT_POOL_CLOSED' });
  });

  it('destroy() aborts an export running in this thread at its next chunk, and waits for it', async () => {
    const storage = await slowStore(200, false);
    const pool = new ExportPool();
    const task = await patientTask(storage, false);
    const start = started();
    const outcome = pool.run(task, { reader: storage.exportReader, onProgress: start.onProgress }).then(
      () => undefined,
      (error: unknown) => error,
    );
    await start.promise;
    await pool.destroy();
    // Settled when destroy() resolves: nothing of it writes afterwards.
    const settled = await Promise.race([outcome, Promise.resolve('pending')]);
    expect(settled).toMatchObject({ code: 'ERR_EXPORT_STOPPED' });
  });

  it('destroy() during a close() bounds the drain', async () => {
    const storage = await slowStore(10_000, true);
    const pool = new ExportPool({ maxThreads: 1 });
    const run = pool.run(await patientTask(storage, true)).then(
      () => 'resolved',
      () => 'rejected',
    );
    await new Promise((resolve) => setImmediate(resolve));
    const closing = pool.close();
    await pool.destroy();
    await closing;
    expect(await run).toBe('rejected');
  });

  it('close() and destroy() of a pool that never ran anything resolve', async () => {
    await new ExportPool().close();
    await new ExportPool().destroy();
    const pool = new ExportPool();
    await pool.close();
    await pool.destroy();
  });
});

describe('bulkExportRouter close()', () => {
  /** A router on a store whose export reads a chunk (one resource) per `delayMs`. */
  async function running(delayMs: number, closeTimeout?: number) {
    const storage = fixtureStorage({ dir: tempDir(), delayMs, chunkLines: 1 });
    await seed(storage, sampleResources());
    const { app, router } = createApp(storage, closeTimeout === undefined ? {} : { closeTimeout });
    afterTest(() => router.close());
    const auth = token('proj-a');
    const statusPath = await kickoff(app, auth, '/$export?_type=Patient');
    await waitForProgress(app, auth, statusPath);
    /** The job's status in the store. */
    const status = () => [...storage.state.jobs.values()][0]?.status;
    return { storage, router, status };
  }

  it('by default stops the running export at once (it resumes at the next start)', async () => {
    // Four chunks of 1 s: had close() waited, the export would have completed.
    const { router, status } = await running(1000);
    await router.close();
    expect(status()).toBe('in-progress');
  });

  it('with closeTimeout, lets a running export finish within it', async () => {
    const { storage, router, status } = await running(100, 20_000);
    await router.close();
    expect(status()).toBe('completed');
    expect(storage.state.snapshots.size).toBe(0);
  });

  it('with closeTimeout, stops an export still running when it has passed', async () => {
    // Four chunks of 2 s each: the export cannot end within 300 ms.
    const { router, status } = await running(2000, 300);
    const before = Date.now();
    await router.close();
    expect(Date.now() - before).toBeGreaterThanOrEqual(290);
    expect(status()).toBe('in-progress');
  });
});

describe('fhirPlatform close()', () => {
  /** A platform on a file store whose exports wait 300 ms after each chunk, with an export running. */
  async function platformExporting(bulk: FhirPlatformOptions['bulk']) {
    const storage = slowExports(await fileStorage({ dir: tempDir('platform-store-') }), () => 300);
    const t = await createPlatformApp({ bulk }, storage);
    let closed = false;
    afterTest(async () => {
      if (!closed) await t.close();
    });
    const projectId = await t.initProject('Exports');
    const client = await t.newClient(projectId, { name: 'etl', admin: true });
    await storage.writeResources(projectId, [
      { op: 'update', resource: { resourceType: 'Patient', id: 'p1' } },
    ]);
    const res = await request(t.app)
      .get('/fhir/R4/$export?_type=Patient')
      .set('Authorization', await t.bearer(client.id, client.secret))
      .set('Prefer', 'respond-async');
    expect(res.status).toBe(202);
    const statusOf = async () => (await storage.listExportJobs({ projectId }))[0]?.status;
    const close = async () => {
      closed = true;
      await t.platform.close();
      const status = await statusOf();
      await t.close();
      return status;
    };
    return { close };
  }

  it('lets a running export finish (bulk.closeTimeout, 10 s by default)', async () => {
    const { close } = await platformExporting({});
    expect(await close()).toBe('completed');
  });

  it('with bulk.closeTimeout 0, stops it at once (it resumes at the next start)', async () => {
    const { close } = await platformExporting({ closeTimeout: 0 });
    expect(await close()).toMatch(/^(accepted|in-progress)$/);
  });
});
