import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import request from 'supertest';
import { bulkExportRouter } from '../../src/bulk/router.js';
import type { ExportTask } from '../../src/bulk/export-task.js';
import { memoryStorage } from '../../src/storage/memory.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';
import { BASE, createApp, kickoff, poll, seed, tempDir, token } from './helpers.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

type App = Parameters<typeof request>[0];

function start(options: Parameters<typeof createApp>[1] = {}) {
  const storage = fixtureStorage({ dir: tempDir() });
  const exportDir = options.exportDir ?? tempDir('bulk-out-');
  const { app, router } = createApp(storage, { ...options, exportDir });
  closers.push(() => router.close());
  return { storage, app, router, exportDir };
}

function kickoffRequest(app: App, auth: string, target = '/$export?_type=Patient') {
  return request(app).get(`${BASE}${target}`).set('Authorization', auth).set('Prefer', 'respond-async');
}

/** Checks a refused kick-off: status, OperationOutcome issue code and a `Retry-After` in seconds. */
function expectRefused(res: request.Response, status: number, code: string): number {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
  expect(res.body.resourceType).toBe('OperationOutcome');
  expect(res.body.issue[0].code).toBe(code);
  expect(res.headers['retry-after']).toMatch(/^[1-9]\d*$/);
  return Number(res.headers['retry-after']);
}

describe('kick-offs per hour', () => {
  it('one more than maxKickoffsPerHour is 429 throttled with Retry-After, even after cancelling', async () => {
    const { storage, app } = start({ maxKickoffsPerHour: 2, maxRunningExports: 10 });
    await seed(storage);
    const auth = token('proj-a');
    const first = await kickoff(app, auth, '/$export?_type=Patient');
    // A cancelled (deleted) export still counts: cancelling must not reopen the window.
    expect((await request(app).delete(first).set('Authorization', auth)).status).toBe(202);
    const second = await kickoff(app, auth, '/$export?_type=Patient');
    expect((await poll(app, auth, second)).status).toBe(200);

    const retry = expectRefused(await kickoffRequest(app, auth), 429, 'throttled');
    expect(retry).toBeLessThanOrEqual(3600);
    expect(storage.state.jobs.size).toBe(1);
    // Other projects have their own count.
    expect((await kickoffRequest(app, token('proj-b'))).status).toBe(202);
  });
});

describe('bytes kept per project', () => {
  it('a project at maxProjectExportSize gets 429 too-costly; another project is unaffected; DELETE frees it', async () => {
    const { storage, app } = start({ maxProjectExportSize: 100 });
    await seed(storage);
    const auth = token('proj-a');
    // Under quota at kick-off: the export runs to completion, and leaves the project over quota.
    const done = await kickoff(app, auth, '/$export?_type=Patient,Observation');
    expect((await poll(app, auth, done)).status).toBe(200);

    const retry = expectRefused(await kickoffRequest(app, auth), 429, 'too-costly');
    // Until the completed export expires (retention, 6 h by default).
    expect(retry).toBeGreaterThan(3600);
    expect((await kickoffRequest(app, token('proj-b'))).status).toBe(202);

    expect((await request(app).delete(done).set('Authorization', auth)).status).toBe(202);
    expect((await kickoffRequest(app, auth)).status).toBe(202);
  });

  it('what a running export has written counts; the export itself goes on', async () => {
    const storage = fixtureStorage({ dir: tempDir(), delayMs: 30, chunkLines: 1 });
    const observations = Array.from({ length: 100 }, (_, i) => ({
      resourceType: 'Observation',
      id: `x${i}`,
      status: 'final',
      code: { text: 'x' },
    }));
    await seed(storage, observations);
    const { app, router } = createApp(storage, { maxProjectExportSize: 300, maxRunningExports: 5 });
    closers.push(() => router.close());
    const auth = token('proj-a');
    const running = await kickoff(app, auth, '/$export?_type=Observation');
    // Each Observation line is over 100 bytes: wait until at least 3 are written.
    for (;;) {
      const res = await request(app).get(running).set('Authorization', auth);
      expect(res.status).toBe(202);
      if (Number(/^(\d+) resources/.exec(res.headers['x-progress'] as string)?.[1] ?? 0) >= 3) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expectRefused(await kickoffRequest(app, auth), 429, 'too-costly');
    const status = await request(app).get(running).set('Authorization', auth);
    expect(status.status).toBe(202);
    expect((await request(app).delete(running).set('Authorization', auth)).status).toBe(202);
    expect((await kickoffRequest(app, auth)).status).toBe(202);
  });
});

describe('one export over maxExportSize', () => {
  it.each([
    ['worker thread', true],
    ['main thread', false],
  ])('fails with too-costly and leaves no file (%s)', async (_name, descriptor) => {
    const exportDir = tempDir('bulk-out-');
    const storage = fixtureStorage({ dir: tempDir(), descriptor });
    await seed(storage);
    // Small files, so that several are complete before the cap is reached.
    const { app, router } = createApp(storage, { exportDir, maxFileSize: 150, maxExportSize: 600 });
    closers.push(() => router.close());
    const auth = token('proj-a');
    const statusPath = await kickoff(app, auth, '/$export');
    const failed = await poll(app, auth, statusPath);
    expect(failed.status).toBe(500);
    expect(failed.body.resourceType).toBe('OperationOutcome');
    expect(failed.body.issue[0].code).toBe('too-costly');
    expect(fs.readdirSync(exportDir)).toEqual([]);
    expect(storage.state.snapshots.size).toBe(0);
    // A failed export holds no quota: the project may start again.
    expect((await kickoffRequest(app, auth, '/$export?_type=Organization')).status).toBe(202);
  });
});

describe('files of failed, cancelled and removed jobs', () => {
  it('a job whose worker crashes leaves no file', async () => {
    const exportDir = tempDir('bulk-out-');
    const storage = fixtureStorage({ dir: tempDir() });
    await seed(storage);
    const taskHook = (task: ExportTask): ExportTask => ({ ...task, crash: 'throw' });
    const { app, router } = createApp(storage, { exportDir, taskHook });
    closers.push(() => router.close());
    const auth = token('proj-a');
    const statusPath = await kickoff(app, auth, '/$export?_type=Patient');
    expect((await poll(app, auth, statusPath)).status).toBe(500);
    expect(fs.readdirSync(exportDir)).toEqual([]);
  });

  it('DELETE through another router on the same store removes the files where they were written', async () => {
    const storage = fixtureStorage({ dir: tempDir() });
    await seed(storage);
    const dirA = tempDir('bulk-out-a-');
    const a = createApp(storage, { exportDir: dirA });
    const b = createApp(storage, { exportDir: tempDir('bulk-out-b-') });
    closers.push(
      () => a.router.close(),
      () => b.router.close(),
    );
    const auth = token('proj-a');
    const statusPath = await kickoff(a.app, auth, '/$export?_type=Patient');
    expect((await poll(a.app, auth, statusPath)).status).toBe(200);
    expect(fs.readdirSync(dirA)).toHaveLength(1);
    expect((await request(b.app).delete(statusPath).set('Authorization', auth)).status).toBe(202);
    expect(fs.readdirSync(dirA)).toEqual([]);
  });

  it('a router removes job directories whose job no longer exists (e.g. a memory store restarted)', async () => {
    const exportDir = tempDir('bulk-out-');
    const orphan = path.join(exportDir, randomUUID());
    fs.mkdirSync(orphan);
    fs.writeFileSync(path.join(orphan, 'Patient-1.ndjson'), '{"resourceType":"Patient"}\n');
    // Not a job directory: left alone.
    fs.mkdirSync(path.join(exportDir, 'other'));
    const { router } = start({ exportDir });
    await router.ready;
    expect(fs.readdirSync(exportDir)).toEqual(['other']);
  });
});

describe('free disk space', () => {
  it('below minFreeSpace a kick-off is 503 transient with Retry-After, and creates nothing', async () => {
    let free = 10 * 1024 * 1024;
    const probed: string[] = [];
    const { storage, app, exportDir } = start({
      minFreeSpace: 64 * 1024 * 1024,
      freeSpaceProbe: (dir) => {
        probed.push(dir);
        return free;
      },
    });
    await seed(storage);
    const auth = token('proj-a');
    expectRefused(await kickoffRequest(app, auth), 503, 'transient');
    expect(probed).toEqual([exportDir]);
    expect(storage.state.jobs.size).toBe(0);
    expect(storage.state.snapshots.size).toBe(0);
    expect(fs.readdirSync(exportDir)).toEqual([]);

    free = 65 * 1024 * 1024;
    expect((await kickoffRequest(app, auth)).status).toBe(202);
  });
});

describe('options', () => {
  it.each([
    ['maxKickoffsPerHour', { maxKickoffsPerHour: 0 }],
    ['maxProjectExportSize', { maxProjectExportSize: -1 }],
    ['maxExportSize', { maxExportSize: Number.NaN }],
    ['minFreeSpace', { minFreeSpace: -1 }],
    ['minFreeSpace', { minFreeSpace: Number.POSITIVE_INFINITY }],
    ['freeSpaceProbe', { freeSpaceProbe: 'statfs' as unknown as () => number }],
  ])('a bad %s is an InvalidOptionError (ERR_INVALID_OPTION) naming it', (name, bad) => {
    const create = () =>
      bulkExportRouter({ storage: memoryStorage(), authenticate: testAuthenticate, ...bad });
    expect(create).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(create).toThrow(`bulkExportRouter: ${name} `);
  });
});
