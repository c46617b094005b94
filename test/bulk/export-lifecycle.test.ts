import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import request from 'supertest';
import { ExportJobManager } from '../../src/bulk/export-jobs.js';
import { ExportPool } from '../../src/bulk/export-pool.js';
import type { FhirResource } from '../../src/storage/types.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';
import {
  BASE,
  bulkTestApp,
  createApp,
  downloadAll,
  expectMatchesStore,
  kickoff,
  pathOf,
  poll,
  sampleResources,
  seed,
  tempDir,
  token,
  waitForProgress,
} from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { eventually } from '../helpers/eventually.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

/** The sample plus `n` more Observations, so that a slowed export takes a while. */
function manyResources(n: number): FhirResource[] {
  const extra = Array.from({ length: n }, (_, i) => ({
    resourceType: 'Observation',
    id: `x${i}`,
    status: 'final',
    code: { text: 'x' },
    subject: { reference: 'Patient/p1' },
  }));
  return [...sampleResources(), ...extra];
}

describe('cancel', () => {
  it.each([
    ['worker thread', true],
    ['main thread', false],
  ])(
    'DELETE stops a running export (%s) without waiting for it, removes its files, then 404',
    async (_n, descriptor) => {
      const { storage, app, auth, exportDir } = await bulkTestApp({
        storage: fixtureStorage({ dir: tempDir(), delayMs: 50, chunkLines: 1, descriptor }),
        seed: manyResources(200),
      });
      const statusPath = await kickoff(app, auth, '/$export?_type=Observation');
      await waitForProgress(app, auth, statusPath);
      const jobId = statusPath.split('/').pop()!;
      expect(fs.existsSync(path.join(exportDir, jobId))).toBe(true);
      const started = Date.now();
      const del = await request(app).delete(statusPath).set('Authorization', auth);
      expect(del.status).toBe(202);
      // The whole export would take 200 × 50 ms = 10 s: the DELETE does not wait for it.
      expect(Date.now() - started).toBeLessThan(5000);
      expect(fs.existsSync(path.join(exportDir, jobId))).toBe(false);
      const after = await request(app).get(statusPath).set('Authorization', auth);
      expect(after.status).toBe(404);
      expect(after.body.resourceType).toBe('OperationOutcome');
      expect((await request(app).delete(statusPath).set('Authorization', auth)).status).toBe(404);
      expect(storage.state.jobs.size).toBe(0);
      expect(storage.state.snapshots.size).toBe(0);
      // The project may start new exports at once.
      expect(
        (await request(app).get(`${BASE}/$export?_type=Patient`).set('Authorization', auth)).status,
      ).toBe(202);
    },
  );

  it('DELETE of a completed export removes its files', async () => {
    const { storage, app, auth, exportDir } = await bulkTestApp();
    const statusPath = await kickoff(app, auth, '/$export?_type=Patient');
    const done = await poll(app, auth, statusPath);
    const fileUrl = JSON.parse(done.text).output[0].url as string;
    expect((await request(app).delete(statusPath).set('Authorization', auth)).status).toBe(202);
    expect((await request(app).get(pathOf(fileUrl)).set('Authorization', auth)).status).toBe(404);
    expect(fs.readdirSync(exportDir)).toEqual([]);
    expect(storage.state.snapshots.size).toBe(0);
  });
});

describe('restart', () => {
  it('a job running when the router closes resumes with the same transactionTime on the next router', async () => {
    const exportDir = tempDir('bulk-out-');
    const dir = tempDir();
    const first = fixtureStorage({ dir, delayMs: 40, chunkLines: 1 });
    await seed(first, manyResources(100));
    const one = createApp(first, { exportDir });
    const auth = token('proj-a');
    const statusPath = await kickoff(one.app, auth, '/$export?_type=Patient,Observation');
    await waitForProgress(one.app, auth, statusPath);
    await one.router.close();
    const [job] = [...first.state.jobs.values()];
    expect(job!.status).toBe('in-progress');
    // Written after kick-off: must not appear in the resumed export.
    await first.writeResources('proj-a', [
      { op: 'update', resource: { resourceType: 'Patient', id: 'late' } },
    ]);

    const second = fixtureStorage({ dir }, first.state);
    const two = await bulkTestApp({ storage: second, seed: false, exportDir });
    await two.router.ready;
    const done = await poll(two.app, auth, statusPath);
    expect(done.status).toBe(200);
    const manifest = JSON.parse(done.text);
    expect(manifest.transactionTime).toBe(job!.transactionTime);
    const byType = await downloadAll(two.app, auth, manifest);
    expect(byType.get('Observation')).toHaveLength(104);
    expect(
      byType
        .get('Patient')!
        .map((p) => p.id)
        .sort(),
    ).toEqual(['p1', 'p2', 'p3', 'p4']);
    await expectMatchesStore(second, 'proj-a', byType);
    expect(second.state.snapshots.size).toBe(0);
  });
});

describe('worker crash', () => {
  it.each(['exit', 'throw'] as const)(
    'a worker that %ss fails its job with an OperationOutcome; the pool goes on',
    async (crash) => {
      // The fixture reader crashes in the worker while the fault file says so.
      const faultFile = path.join(tempDir('fault-'), 'fault.json');
      fs.writeFileSync(faultFile, JSON.stringify({ crash }));
      const { storage, app, auth } = await bulkTestApp({
        storage: fixtureStorage({ dir: tempDir(), faultFile }),
      });
      const failedPath = await kickoff(app, auth, '/$export?_type=Patient');
      expectOperationOutcome(await poll(app, auth, failedPath), 500, 'exception');
      expect(storage.state.snapshots.size).toBe(0);
      fs.rmSync(faultFile);
      const okPath = await kickoff(app, auth, '/$export?_type=Patient');
      const ok = await poll(app, auth, okPath);
      expect(ok.status).toBe(200);
    },
  );
});

describe('retention', () => {
  // Expiry is decided on `Date.now()`: the tests move a fake `Date` past it (timers stay real, the
  // clock goes on with them) rather than sleep past a short retention, which a loaded machine
  // could let lapse before the first download, or not yet reach when the test looks.
  const HOUR = 3_600_000;
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('files and job records expire and are cleaned up', async () => {
    const { storage, app, auth, exportDir } = await bulkTestApp({ retention: HOUR, cleanupInterval: 50 });
    const statusPath = await kickoff(app, auth, '/$export?_type=Patient');
    const done = await poll(app, auth, statusPath);
    expect(done.status).toBe(200);
    const fileUrl = JSON.parse(done.text).output[0].url as string;
    expect((await request(app).get(pathOf(fileUrl)).set('Authorization', auth)).status).toBe(200);
    vi.setSystemTime(Date.now() + HOUR + 1000);
    // Expired: gone for clients at once, then removed by the next sweep (every 50 ms).
    expect((await request(app).get(statusPath).set('Authorization', auth)).status).toBe(404);
    expect((await request(app).get(pathOf(fileUrl)).set('Authorization', auth)).status).toBe(404);
    await eventually('the sweep to remove the expired job', () => storage.state.jobs.size === 0);
    expect(fs.readdirSync(exportDir)).toEqual([]);
    expect(storage.state.snapshots.size).toBe(0);
  });

  it('never while a download of the job is in flight', async () => {
    const exportDir = tempDir('bulk-out-');
    const storage = fixtureStorage({ dir: tempDir() });
    await seed(storage);
    const pool = new ExportPool();
    const jobs = new ExportJobManager({
      storage,
      pool,
      exportDir,
      maxFileSize: 1 << 20,
      retention: HOUR,
      cleanupInterval: 1e9,
      onError: () => undefined,
    });
    afterTest(async () => {
      await jobs.close();
      await pool.close();
    });
    await jobs.start();
    const job = await jobs.kickoff({
      projectId: 'proj-a',
      ownerId: 'test-client',
      request: 'http://x/$export',
      plan: {
        params: { level: 'system', outputFormat: 'application/fhir+ndjson', lenient: false },
        types: ['Patient'],
        issues: [],
      },
    });
    await eventually(
      'the job to complete',
      async () => (await storage.readExportJob('proj-a', job.id)).status === 'completed',
    );
    const end = await jobs.beginDownload({ projectId: 'proj-a', jobId: job.id });
    vi.setSystemTime(Date.now() + HOUR + 1000);
    await jobs.sweep();
    expect(fs.existsSync(path.join(exportDir, job.id, 'Patient-1.ndjson'))).toBe(true);
    expect(storage.state.jobs.size).toBe(1);
    end();
    await jobs.sweep();
    expect(fs.existsSync(path.join(exportDir, job.id))).toBe(false);
    expect(storage.state.jobs.size).toBe(0);
    expect(storage.state.snapshots.size).toBe(0);
  });
});
