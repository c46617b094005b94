import { describe, expect, it } from 'vitest';
import request from 'supertest';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';
import {
  BASE,
  bulkTestApp,
  download,
  downloadAll,
  expectMatchesStore,
  exportManifest,
  keysOf,
  tempDir,
} from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { clockPast } from '../helpers/eventually.js';

const stores: [string, () => Promise<Storage>][] = [
  ['fixture store, worker threads', () => Promise.resolve(fixtureStorage({ dir: tempDir() }))],
  [
    'fixture store, main thread',
    () => Promise.resolve(fixtureStorage({ dir: tempDir(), descriptor: false })),
  ],
  ['memoryStorage (main thread)', () => Promise.resolve(memoryStorage())],
  ['fileStorage (worker threads)', () => fileStorage({ dir: tempDir(), durability: 'write' })],
];

describe.each(stores)('bulk export flow, %s', (_name, makeStorage) => {
  async function setup(options = {}) {
    const storage = await makeStorage();
    afterTest(() => storage.close());
    return bulkTestApp({ ...options, storage });
  }

  it('system level: every resource of the project, each file checked line by line', async () => {
    const { storage, app, auth } = await setup();
    const manifest = await exportManifest(app, auth, '/$export');
    expect(manifest.requiresAccessToken).toBe(true);
    expect(manifest.request).toMatch(/\/fhir\/R4\/\$export$/);
    expect(manifest.error).toEqual([]);
    expect(manifest.deleted).toBeUndefined();
    expect(Date.parse(manifest.transactionTime)).not.toBeNaN();
    const byType = await downloadAll(app, auth, manifest);
    expect(keysOf(byType)).toEqual(
      [
        'Patient/p1',
        'Patient/p2',
        'Patient/p3',
        'Patient/p4',
        'Observation/o1',
        'Observation/o2',
        'Observation/o3',
        'Observation/o4',
        'Condition/c1',
        'Encounter/e1',
        'Organization/org1',
        'Group/g1',
        'Group/g2',
      ].sort(),
    );
    await expectMatchesStore(storage, 'proj-a', byType);
    for (const entry of manifest.output)
      expect(entry.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/fhir\/R4\/\$export-file\//);
  });

  it('Patient level: the compartments of every patient, nothing else', async () => {
    const { storage, app, auth } = await setup();
    const manifest = await exportManifest(app, auth, '/Patient/$export');
    const byType = await downloadAll(app, auth, manifest);
    expect(keysOf(byType)).toEqual(
      [
        'Patient/p1',
        'Patient/p2',
        'Patient/p3',
        'Patient/p4',
        'Observation/o1',
        'Observation/o2',
        'Observation/o3',
        'Observation/o4',
        'Condition/c1',
        'Encounter/e1',
        // Group is in the R4 Patient compartment through Group.member.
        'Group/g1',
        'Group/g2',
      ].sort(),
    );
    await expectMatchesStore(storage, 'proj-a', byType);
  });

  it('Group level: nested Groups resolved, cycles safe, inactive members skipped', async () => {
    const { storage, app, auth } = await setup();
    const manifest = await exportManifest(app, auth, '/Group/g1/$export');
    const byType = await downloadAll(app, auth, manifest);
    expect(keysOf(byType)).toEqual([
      'Condition/c1',
      'Group/g1',
      'Group/g2',
      'Observation/o1',
      'Observation/o3',
      'Patient/p1',
      'Patient/p3',
    ]);
    await expectMatchesStore(storage, 'proj-a', byType);
  });

  it('accepts %24 for $ and POST with a Parameters body', async () => {
    const { app, auth } = await setup();
    const viaEncoded = await exportManifest(app, auth, '/Group/g1/%24export?_type=Patient');
    expect(viaEncoded.output.map((o) => o.type)).toEqual(['Patient']);
    const viaPost = await exportManifest(app, auth, '/Patient/$export', {
      method: 'post',
      body: {
        resourceType: 'Parameters',
        parameter: [
          { name: '_type', valueString: 'Patient,Observation' },
          { name: 'patient', valueReference: { reference: 'Patient/p2' } },
          { name: '_outputFormat', valueString: 'application/fhir+ndjson' },
        ],
      },
    });
    expect(keysOf(await downloadAll(app, auth, viaPost))).toEqual(['Observation/o2', 'Patient/p2']);
  });

  it('transactionTime: writes after kick-off are not exported', async () => {
    const { storage, app, auth } = await setup();
    const manifest = await exportManifest(app, auth, '/$export?_type=Organization');
    await storage.writeResources('proj-a', [
      { op: 'update', resource: { resourceType: 'Organization', id: 'org2' } },
    ]);
    const byType = await downloadAll(app, auth, manifest);
    expect(keysOf(byType)).toEqual(['Organization/org1']);
  });

  it('_since: changes after it, and deletions as transaction Bundles', async () => {
    const { storage, app, auth } = await setup();
    // An instant strictly after every earlier write and strictly before the writes below: each
    // store stamps strictly increasing instants, at least the wall clock's (_since counts whole
    // milliseconds), so `since` is the millisecond after a last write, and the writes wait for
    // the wall clock to pass it.
    const [mark] = await storage.writeResources('proj-a', [
      { op: 'update', resource: { resourceType: 'Basic', id: 'clock-mark', code: { text: 'mark' } } },
    ]);
    const sinceMs = Math.floor(Date.parse(mark!.resource!.meta.lastUpdated)) + 1;
    const since = new Date(sinceMs).toISOString();
    await clockPast(sinceMs);
    await storage.writeResources('proj-a', [
      {
        op: 'update',
        resource: {
          resourceType: 'Observation',
          id: 'o1',
          status: 'amended',
          code: { text: 'a' },
          subject: { reference: 'Patient/p1' },
        },
      },
      { op: 'delete', resourceType: 'Observation', id: 'o2' },
    ]);
    const manifest = await exportManifest(
      app,
      auth,
      `/Patient/$export?_type=Observation&_since=${encodeURIComponent(since)}`,
    );
    const byType = await downloadAll(app, auth, manifest);
    expect(keysOf(byType)).toEqual(['Observation/o1']);
    await expectMatchesStore(storage, 'proj-a', byType);
    expect(manifest.deleted).toHaveLength(1);
    const bundles = await download(app, auth, manifest.deleted![0]!.url);
    expect(bundles.map((b) => (b.entry as { request: { url: string } }[])[0]!.request)).toEqual([
      { method: 'DELETE', url: 'Observation/o2' },
    ]);
  });

  it('other requests fall through to the next handler', async () => {
    const { app, auth } = await setup();
    const res = await request(app).get(`${BASE}/Patient/p1`).set('Authorization', auth);
    expect(res.status).toBe(418);
    const unauth = await request(app).get(`${BASE}/metadata`);
    expect(unauth.status).toBe(418);
  });

  it('splits files at maxFileSize', async () => {
    const { app, auth } = await setup({ maxFileSize: 150 });
    const manifest = await exportManifest(app, auth, '/$export?_type=Observation');
    expect(manifest.output.length).toBeGreaterThan(1);
    expect(manifest.output.every((o) => o.type === 'Observation')).toBe(true);
    expect(manifest.output.reduce((n, o) => n + o.count, 0)).toBe(4);
    const names = manifest.output.map((o) => o.url.split('/').pop());
    expect(names[0]).toBe('Observation-1.ndjson');
    const lines = (await Promise.all(manifest.output.map((o) => download(app, auth, o.url)))).flat();
    expect(lines.map((r) => r.id).sort()).toEqual(['o1', 'o2', 'o3', 'o4']);
  });
});
