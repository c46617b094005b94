import fs from 'node:fs';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fileStorage } from '../../src/stores.js';
import type { FhirResource } from '../../src/storage/types.js';
import {
  bulkTestApp,
  createApp,
  downloadAll,
  expectMatchesStore,
  kickoff,
  poll,
  sampleResources,
  seed,
  tempDir,
  token,
} from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';

function withObservations(n: number): FhirResource[] {
  const extra = Array.from({ length: n }, (_, i) => ({
    resourceType: 'Observation',
    id: `x${i}`,
    status: 'final',
    code: { text: 'x'.repeat(50) },
    subject: { reference: `Patient/p${(i % 4) + 1}` },
  }));
  return [...sampleResources(), ...extra];
}

describe('fileStorage: restart and cancel', () => {
  it('a job interrupted by a shutdown resumes on the reopened store, same transactionTime and snapshot', async () => {
    const dir = tempDir();
    const exportDir = tempDir('bulk-out-');
    const auth = token('proj-a');
    const first = await fileStorage({ dir, durability: 'write' });
    await seed(first, withObservations(3000));
    const one = createApp(first, { exportDir, maxFileSize: 64 * 1024 });
    const statusPath = await kickoff(one.app, auth, '/Patient/$export?_type=Patient,Observation');
    // Written after kick-off: must not be exported.
    await first.writeResources('proj-a', [
      { op: 'update', resource: { resourceType: 'Patient', id: 'late' } },
      {
        op: 'update',
        resource: {
          resourceType: 'Observation',
          id: 'x0',
          status: 'amended',
          code: {},
          subject: { reference: 'Patient/p1' },
        },
      },
    ]);
    await one.router.close();
    const jobId = statusPath.split('/').pop()!;
    const interrupted = await first.readExportJob('proj-a', jobId);
    await first.close();
    expect(['accepted', 'in-progress']).toContain(interrupted.status);

    const second = await fileStorage({ dir, durability: 'write' });
    afterTest(() => second.close());
    const two = await bulkTestApp({ storage: second, seed: false, exportDir, maxFileSize: 64 * 1024 });
    await two.router.ready;
    const done = await poll(two.app, auth, statusPath);
    expect(done.status).toBe(200);
    const manifest = JSON.parse(done.text);
    expect(manifest.transactionTime).toBe(interrupted.transactionTime);
    expect(manifest.output.length).toBeGreaterThan(2);
    const byType = await downloadAll(two.app, auth, manifest);
    expect(
      byType
        .get('Patient')!
        .map((p) => p.id)
        .sort(),
    ).toEqual(['p1', 'p2', 'p3', 'p4']);
    const observations = byType.get('Observation')!;
    expect(observations).toHaveLength(3004);
    expect(observations.find((o) => o.id === 'x0')!.status).toBe('final');
    const original = new Map(withObservations(3000).map((r) => [`${r.resourceType}/${r.id}`, r]));
    for (const o of observations) {
      const { meta: _meta, ...rest } = o;
      expect(rest).toEqual(original.get(`Observation/${o.id}`));
    }
  });

  it('cancel removes the files of a running export; status then 404', async () => {
    const storage = await fileStorage({ dir: tempDir(), durability: 'write' });
    afterTest(() => storage.close());
    const { app, auth, exportDir } = await bulkTestApp({ storage, seed: withObservations(3000) });
    const statusPath = await kickoff(app, auth, '/$export');
    const del = await request(app).delete(statusPath).set('Authorization', auth);
    expect(del.status).toBe(202);
    expect(fs.readdirSync(exportDir)).toEqual([]);
    expect((await request(app).get(statusPath).set('Authorization', auth)).status).toBe(404);
    // And the store still exports normally.
    const again = await kickoff(app, auth, '/$export?_type=Patient');
    const res = await poll(app, auth, again);
    expect(res.status).toBe(200);
    const byType = await downloadAll(app, auth, JSON.parse(res.text));
    await expectMatchesStore(storage, 'proj-a', byType);
  });
});
