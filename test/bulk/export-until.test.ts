import { describe, expect, it } from 'vitest';
import request from 'supertest';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import {
  BASE,
  openWithProjects,
  bulkTestApp,
  download,
  downloadAll,
  exportManifest,
  keysOf,
  sampleResources,
} from '../helpers/bulk-export.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

// `_until` (Bulk Data 3.0.0): only resources last updated at or before it, and with `_since` the
// window between; the `deleted` array honours it too.

const observation = (id: string, text: string): FhirResource & { id: string } => ({
  resourceType: 'Observation',
  id,
  status: 'final',
  code: { text },
  subject: { reference: 'Patient/p1' },
});

/** The stored `meta.lastUpdated` of a resource (stores stamp writes with a strictly increasing clock). */
async function lastUpdated(storage: Storage, type: string, id: string): Promise<string> {
  return (await storage.readResource('proj-a', type, id)).meta.lastUpdated;
}

forEachStore('_until', (store, open) =>
  describe(`_until (${store} store)`, () => {
    async function setup() {
      const storage = await openWithProjects(open);
      return bulkTestApp({ storage, seed: sampleResources() });
    }

    it('leaves out what changed after it; with _since, exports the window and its deletions only', async () => {
      const { storage, app, auth } = await setup();
      const seeded = await lastUpdated(storage, 'Observation', 'o4');
      await storage.writeResources('proj-a', [{ op: 'delete', resourceType: 'Observation', id: 'o2' }]);
      await storage.writeResources('proj-a', [{ op: 'update', resource: observation('o3', 'c2') }]);
      const middle = await lastUpdated(storage, 'Observation', 'o3');
      await storage.writeResources('proj-a', [{ op: 'delete', resourceType: 'Observation', id: 'o4' }]);
      await storage.writeResources('proj-a', [
        { op: 'update', resource: observation('o1', 'a2') },
        { op: 'update', resource: observation('o5', 'e') },
      ]);

      const until = await exportManifest(
        app,
        auth,
        `/$export?_type=Observation&_until=${encodeURIComponent(middle)}`,
      );
      // o3 changed exactly at _until (included); o1 changed after it: left out, as o5; o2 and o4
      // are deleted as of the kick-off.
      expect(keysOf(await downloadAll(app, auth, until))).toEqual(['Observation/o3']);
      expect(until.deleted).toBeUndefined();

      const window = await exportManifest(
        app,
        auth,
        `/$export?_type=Observation&_since=${encodeURIComponent(seeded)}&_until=${encodeURIComponent(middle)}`,
      );
      expect(keysOf(await downloadAll(app, auth, window))).toEqual(['Observation/o3']);
      // o2 was deleted inside the window, o4 after it.
      expect(window.deleted).toHaveLength(1);
      const bundles = await download(app, auth, window.deleted![0]!.url);
      expect(
        bundles.map((b) => (b as unknown as { entry: { request: { url: string } }[] }).entry[0]!.request.url),
      ).toEqual(['Observation/o2']);
    });

    it('bounds Patient and Group exports too, by GET and POST', async () => {
      const { storage, app, auth } = await setup();
      const seeded = await lastUpdated(storage, 'Observation', 'o4');
      await storage.writeResources('proj-a', [{ op: 'update', resource: observation('o9', 'late') }]);
      const query = `_type=Observation&_until=${encodeURIComponent(seeded)}`;
      const patient = await exportManifest(app, auth, `/Patient/$export?${query}`);
      expect(keysOf(await downloadAll(app, auth, patient))).toEqual([
        'Observation/o1',
        'Observation/o2',
        'Observation/o3',
        'Observation/o4',
      ]);
      const group = await exportManifest(app, auth, '/Group/g1/$export', {
        method: 'post',
        body: {
          resourceType: 'Parameters',
          parameter: [
            { name: '_type', valueString: 'Observation' },
            { name: '_until', valueInstant: seeded },
          ],
        },
      });
      // g1 holds p1 (and, through g2, p3): o9 of p1 came after _until.
      expect(keysOf(await downloadAll(app, auth, group))).toEqual(['Observation/o1', 'Observation/o3']);
    });

    it('a future _until exports everything up to the kick-off, whose time stays transactionTime', async () => {
      const { app, auth } = await setup();
      const future = new Date(Date.now() + 86_400_000).toISOString();
      const started = Date.now();
      const m = await exportManifest(
        app,
        auth,
        `/$export?_type=Observation&_until=${encodeURIComponent(future)}`,
      );
      expect(m.output.reduce((n, o) => n + o.count, 0)).toBe(4);
      expect(Date.parse(m.transactionTime)).toBeGreaterThanOrEqual(started - 1000);
      expect(Date.parse(m.transactionTime)).toBeLessThan(Date.parse(future));
    });
  }),
);

describe('_until errors', () => {
  it('is 400 when malformed, repeated or before _since, even under lenient handling', async () => {
    const { app, auth } = await bulkTestApp();
    const bad = [
      '_until=yesterday',
      '_until=2024-01-01',
      '_until=2024-01-01T00:00:00Z&_until=2024-02-01T00:00:00Z',
      '_since=2024-02-01T00:00:00Z&_until=2024-01-01T00:00:00Z',
    ];
    for (const query of bad) {
      for (const prefer of ['respond-async', 'respond-async, handling=lenient']) {
        const res = await request(app)
          .get(`${BASE}/$export?${query}`)
          .set('Authorization', auth)
          .set('Prefer', prefer);
        expectOperationOutcome(res, 400);
        expect(JSON.stringify(res.body)).toContain('_until');
      }
    }
    // _until equal to _since is an empty window, not an error.
    const res = await request(app)
      .get(`${BASE}/$export?_since=2024-01-01T00:00:00Z&_until=2024-01-01T00:00:00Z`)
      .set('Authorization', auth)
      .set('Prefer', 'respond-async');
    expect(res.status).toBe(202);
  });
});
