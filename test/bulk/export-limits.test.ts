import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import request from 'supertest';
import { bulkExportRouter } from '../../src/bulk/router.js';
import { memoryStorage } from '../../src/stores.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';
import {
  BASE,
  bulkTestApp,
  downloadAll,
  exportManifest,
  kickoff,
  poll,
  tempDir,
  token,
  waitForProgress,
} from '../helpers/bulk-export.js';
import { DirectoryExportFiles } from '../../src/bulk/directory-export-files.js';
import type { ExportFileStore } from '../../src/storage/types.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

type App = Parameters<typeof request>[0];

function kickoffRequest(app: App, auth: string, target = '/$export?_type=Patient') {
  return request(app).get(`${BASE}${target}`).set('Authorization', auth).set('Prefer', 'respond-async');
}

/** Checks a refused kick-off: status, OperationOutcome issue code and a `Retry-After` in seconds. */
function expectRefused(res: request.Response, status: number, code: string): number {
  expectOperationOutcome(res, status, code);
  expect(res.headers['retry-after']).toMatch(/^[1-9]\d*$/);
  return Number(res.headers['retry-after']);
}

describe('kick-offs per hour', () => {
  it('one more than maxKickoffsPerHour is 429 throttled with Retry-After, even after cancelling', async () => {
    const { storage, app, auth } = await bulkTestApp({ maxKickoffsPerHour: 2, maxRunningExports: 10 });
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

describe('default limits', () => {
  it("let a conformance kit's burst through: 120 kick-offs in a row, each cancelled, all 202", async () => {
    // smart-on-fhir/bdt kicks off ~100 exports within minutes and cancels each; the old default
    // of 30 an hour failed a third of its tests with 429.
    const { app, auth } = await bulkTestApp();
    for (let i = 0; i < 120; i++) {
      const status = await kickoff(app, auth, '/$export?_type=Patient');
      expect((await request(app).delete(status).set('Authorization', auth)).status).toBe(202);
    }
  });
});

describe('bytes kept per project', () => {
  it('a project at maxProjectExportSize gets 429 too-costly; another project is unaffected; DELETE frees it', async () => {
    const { app, auth } = await bulkTestApp({ maxProjectExportSize: 100 });
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
    const observations = Array.from({ length: 100 }, (_, i) => ({
      resourceType: 'Observation',
      id: `x${i}`,
      status: 'final',
      code: { text: 'x' },
    }));
    const { app, auth } = await bulkTestApp({
      storage: fixtureStorage({ dir: tempDir(), delayMs: 30, chunkLines: 1 }),
      seed: observations,
      maxProjectExportSize: 300,
      maxRunningExports: 5,
    });
    const running = await kickoff(app, auth, '/$export?_type=Observation');
    // Each Observation line is over 100 bytes: wait until at least 3 are written.
    await waitForProgress(app, auth, running, 3, { limitMs: Infinity });
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
    // Small files, so that several are complete before the cap is reached.
    const { storage, app, auth, exportDir } = await bulkTestApp({
      storage: fixtureStorage({ dir: tempDir(), descriptor }),
      maxFileSize: 150,
      maxExportSize: 600,
    });
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
    const faultFile = path.join(tempDir('fault-'), 'fault.json');
    fs.writeFileSync(faultFile, JSON.stringify({ crash: 'throw' }));
    const { app, auth, exportDir } = await bulkTestApp({
      storage: fixtureStorage({ dir: tempDir(), faultFile }),
    });
    const statusPath = await kickoff(app, auth, '/$export?_type=Patient');
    expect((await poll(app, auth, statusPath)).status).toBe(500);
    expect(fs.readdirSync(exportDir)).toEqual([]);
  });

  it('DELETE through another router on the same store removes the files where they were written', async () => {
    const dirA = tempDir('bulk-out-a-');
    const a = await bulkTestApp({ exportDir: dirA });
    const b = await bulkTestApp({ storage: a.storage, seed: false, exportDir: tempDir('bulk-out-b-') });
    const { auth } = a;
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
    const { router } = await bulkTestApp({ seed: false, exportDir });
    await router.ready;
    expect(fs.readdirSync(exportDir)).toEqual(['other']);
  });
});

describe('free disk space', () => {
  it('below minFreeSpace a kick-off is 503 transient with Retry-After, and creates nothing', async () => {
    let free = 10 * 1024 * 1024;
    const probed: string[] = [];
    const { storage, app, auth, exportDir } = await bulkTestApp({
      minFreeSpace: 64 * 1024 * 1024,
      freeSpaceProbe: (dir) => {
        probed.push(dir);
        return free;
      },
    });
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
  it('exportFiles: the files go to that store, not to exportDir', async () => {
    const elsewhere = tempDir('bulk-files-');
    const { app, auth, exportDir } = await bulkTestApp({ exportFiles: new DirectoryExportFiles(elsewhere) });
    const manifest = await exportManifest(app, auth, '/$export?_type=Patient');
    const jobId = manifest.output[0]!.url.split('/').at(-2)!;
    expect(fs.readdirSync(path.join(elsewhere, jobId))).toContain('Patient-1.ndjson');
    expect(fs.existsSync(path.join(exportDir, jobId))).toBe(false);
    expect((await downloadAll(app, auth, manifest)).get('Patient')?.length).toBeGreaterThan(0);
  });

  it.each([
    ['maxKickoffsPerHour', { maxKickoffsPerHour: 0 }],
    ['maxProjectExportSize', { maxProjectExportSize: -1 }],
    ['maxExportSize', { maxExportSize: Number.NaN }],
    ['minFreeSpace', { minFreeSpace: -1 }],
    ['minFreeSpace', { minFreeSpace: Number.POSITIVE_INFINITY }],
    ['freeSpaceProbe', { freeSpaceProbe: 'statfs' as unknown as () => number }],
    ['leaseDuration', { leaseDuration: 0 }],
    ['heartbeatInterval', { heartbeatInterval: -5 }],
    ['heartbeatInterval', { leaseDuration: 5000, heartbeatInterval: 5000 }],
    ['exportFiles', { exportFiles: '/tmp/exports' as unknown as ExportFileStore }],
    ['exportFiles', { exportFiles: { sink: () => undefined } as unknown as ExportFileStore }],
  ])('a bad %s is an InvalidOptionError (ERR_INVALID_OPTION) naming it', (name, bad) => {
    const create = () =>
      bulkExportRouter({ storage: memoryStorage(), authenticate: testAuthenticate, ...bad });
    expect(create).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(create).toThrow(`bulkExportRouter: ${name} `);
  });
});
