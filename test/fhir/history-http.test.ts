import express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

const BASE = '/api/fhir/R4';
const silent = () => undefined;
const auth = (scopes = ['system/*.*'], projectId = 'p1') => testToken({ projectId, scopes });

interface Entry {
  fullUrl: string;
  resource?: { id: string; meta: { versionId: string }; active?: boolean };
  request: { method: string; url: string };
  response: { status: string; etag: string; lastModified: string };
}

/** `method url etag` of each entry of a history Bundle. */
function shape(res: request.Response): string[] {
  return (res.body.entry as Entry[]).map((e) => `${e.request.method} ${e.request.url} ${e.response.etag}`);
}

forEachStore('FHIR history', (store, open) => {
  describe(`history and vread over HTTP (${store})`, () => {
    let storage: Storage;
    let app: express.Express;
    beforeEach(async () => {
      storage = await open();
      await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
      await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
      app = express();
      app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: silent }));
    });
    afterEach(async () => {
      await storage.close();
    });

    const get = (path: string, token = auth()) =>
      request(app).get(`${BASE}${path}`).set('Authorization', token);

    async function write(): Promise<string> {
      const created = await request(app)
        .post(`${BASE}/Patient`)
        .set('Authorization', auth())
        .send({ resourceType: 'Patient', active: true });
      const id = created.body.id as string;
      await request(app)
        .put(`${BASE}/Patient/${id}`)
        .set('Authorization', auth())
        .send({ resourceType: 'Patient', id, active: false })
        .expect(200);
      await request(app).delete(`${BASE}/Patient/${id}`).set('Authorization', auth()).expect(204);
      await request(app)
        .put(`${BASE}/Patient/${id}`)
        .set('Authorization', auth())
        .send({ resourceType: 'Patient', id, gender: 'other' })
        .expect(201);
      return id;
    }

    it('vreads every kept version, 410 for a deletion, 404 for an unknown one', async () => {
      const id = await write();
      const v1 = await get(`/Patient/${id}/_history/1`);
      expect(v1.status).toBe(200);
      expect(v1.headers.etag).toBe('W/"1"');
      expect(v1.headers['last-modified']).toBeDefined();
      expect(v1.body.active).toBe(true);
      expect((await get(`/Patient/${id}/_history/2`)).body.active).toBe(false);
      expect((await get(`/Patient/${id}/_history/4`)).body.gender).toBe('other');
      expectOperationOutcome(await get(`/Patient/${id}/_history/3`), 410, 'deleted');
      expectOperationOutcome(await get(`/Patient/${id}/_history/5`), 404, 'not-found');
      expectOperationOutcome(await get(`/Patient/nobody/_history/1`), 404, 'not-found');
      expectOperationOutcome(await get(`/Patient/${id}/_history/%00`), 400, 'invalid');
      expectOperationOutcome(await get(`/Patient/${id}/_history/${'9'.repeat(65)}`), 400, 'invalid');
      expectOperationOutcome(
        await get(`/Patient/${id}/_history/1`, auth(['system/Observation.rs'])),
        403,
        'forbidden',
      );
      expectOperationOutcome(
        await get(`/Patient/${id}/_history/1`, auth(['system/*.*'], 'p2')),
        404,
        'not-found',
      );
      expectOperationOutcome(await request(app).get(`${BASE}/Patient/${id}/_history/1`), 401);
      expectOperationOutcome(
        await request(app).delete(`${BASE}/Patient/${id}/_history/1`).set('Authorization', auth()),
        405,
      );
    });

    it('answers history and vread GET entries in a batch, and refuses them in a transaction', async () => {
      const id = await write();
      const bundle = (type: string, urls: string[]) => ({
        resourceType: 'Bundle',
        type,
        entry: urls.map((url) => ({ request: { method: 'GET', url } })),
      });
      const batch = await request(app)
        .post(BASE)
        .set('Authorization', auth())
        .send(
          bundle('batch', [
            `Patient/${id}/_history/1`,
            `Patient/${id}/_history/3`,
            `Patient/${id}/_history`,
            'Patient/_history?_count=2',
            `Patient/${id}/_history/1/extra`,
            `Patient/${id}/_history?_bogus=1`,
            '_history',
            `Patient/${id}/_history/1/_history`,
          ]),
        );
      expect(batch.status).toBe(200);
      const [v1, deleted, instance, type, extra, bogus] = batch.body.entry as {
        resource?: { resourceType: string; type?: string; active?: boolean; entry?: unknown[] };
        response: { status: string };
      }[];
      expect(v1!.response.status).toBe('200 OK');
      expect(v1!.resource!.active).toBe(true);
      expect(deleted!.response.status).toMatch(/^410/);
      expect(instance!.resource!.type).toBe('history');
      expect(instance!.resource!.entry).toHaveLength(4);
      expect(type!.resource!.type).toBe('history');
      expect(type!.resource!.entry).toHaveLength(2);
      expect(extra!.response.status).toMatch(/^400/);
      expect(bogus!.response.status).toMatch(/^400/);
      for (const refused of (batch.body.entry as { response: { status: string } }[]).slice(6))
        expect(refused.response.status).toMatch(/^400/);
      // Another project's token sees no version of this resource.
      const other = await request(app)
        .post(BASE)
        .set('Authorization', auth(['system/*.*'], 'p2'))
        .send(bundle('batch', [`Patient/${id}/_history/1`]));
      expect(other.body.entry[0].response.status).toMatch(/^404/);
      const txn = await request(app)
        .post(BASE)
        .set('Authorization', auth())
        .send(bundle('transaction', [`Patient/${id}/_history`]));
      expectOperationOutcome(txn, 400);
    });

    it('answers instance, type and system histories as history Bundles, newest first', async () => {
      const id = await write();
      await request(app)
        .post(`${BASE}/Observation`)
        .set('Authorization', auth())
        .send({ resourceType: 'Observation', status: 'final', code: { text: 'x' } })
        .expect(201);

      const instance = await get(`/Patient/${id}/_history`);
      expect(instance.status).toBe(200);
      expect(instance.body).toMatchObject({ resourceType: 'Bundle', type: 'history', total: 4 });
      expect(shape(instance)).toEqual([
        'POST Patient W/"4"',
        `DELETE Patient/${id} W/"3"`,
        `PUT Patient/${id} W/"2"`,
        'POST Patient W/"1"',
      ]);
      const entries = instance.body.entry as Entry[];
      expect(entries[1]!.resource).toBeUndefined();
      expect(entries[1]!.response.status).toBe('204 No Content');
      expect(entries[2]!.response.status).toBe('200 OK');
      expect(entries[3]!.response.status).toBe('201 Created');
      expect(entries[0]!.fullUrl).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:\\d+${BASE}/Patient/${id}$`));
      expect(entries[3]!.resource!.active).toBe(true);
      expect(entries[3]!.response.lastModified).toMatch(/^\d{4}-\d{2}-\d{2}T.*Z$/);
      expect(instance.body.link[0].relation).toBe('self');

      const type = await get('/Patient/_history');
      expect(shape(type)).toHaveLength(4);
      const system = await get('/_history');
      expect(shape(system)[0]).toBe('POST Observation W/"1"');
      expect(shape(system)).toHaveLength(5);
      // A principal that may search only Observations sees only those in the system history.
      const observations = await get('/_history', auth(['system/Observation.rs']));
      expect(shape(observations)).toEqual(['POST Observation W/"1"']);
      expectOperationOutcome(
        await get('/Patient/_history', auth(['system/Observation.rs'])),
        403,
        'forbidden',
      );
      expectOperationOutcome(await get('/_history', auth(['system/Observation.c'])), 403, 'forbidden');
      // Another project sees nothing of p1's.
      expect((await get('/_history', auth(['system/*.*'], 'p2'))).body.entry).toEqual([]);
      expectOperationOutcome(
        await get(`/Patient/${id}/_history`, auth(['system/*.*'], 'p2')),
        404,
        'not-found',
      );
      expectOperationOutcome(await get('/Patient/nobody/_history'), 404, 'not-found');
      // Filtered to nothing, an existing resource's history is an empty Bundle, not a 404.
      const future = encodeURIComponent(new Date(Date.now() + 60_000).toISOString());
      expect((await get(`/Patient/${id}/_history?_since=${future}`)).body.total).toBe(0);
      expectOperationOutcome(await request(app).get(`${BASE}/_history`), 401);
      expectOperationOutcome(
        await request(app).post(`${BASE}/Patient/_history`).set('Authorization', auth()),
        405,
      );
      expectOperationOutcome(await get('/Nonsense/_history'), 404, 'not-found');
    });

    it('pages with _count and next links, and filters with _since and _at', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push(await write());
      const seen: string[] = [];
      let url: string | undefined = `${BASE}/Patient/_history?_count=7`;
      let pages = 0;
      while (url) {
        const page: request.Response = await request(app).get(url).set('Authorization', auth());
        expect(page.status).toBe(200);
        seen.push(...(page.body.entry as Entry[]).map((e) => `${e.fullUrl} ${e.response.etag}`));
        const next = (page.body.link as { relation: string; url: string }[]).find(
          (l) => l.relation === 'next',
        );
        url = next ? new URL(next.url).pathname + new URL(next.url).search : undefined;
        if (next) expect(next.url).toContain('_count=7');
        pages += 1;
      }
      expect(pages).toBe(3);
      expect(seen).toHaveLength(20);
      expect(new Set(seen).size).toBe(20);

      const latest = (await get(`/Patient/${ids[4]}`)).body.meta.lastUpdated as string;
      const since = await get(`/_history?_since=${encodeURIComponent(latest)}`);
      expect(shape(since)).toEqual(['POST Patient W/"4"']);
      const at = await get(`/Patient/${ids[0]}/_history?_at=${encodeURIComponent(latest)}`);
      expect(shape(at)).toEqual(['POST Patient W/"4"']);
      expect((await get('/_history?_count=0')).body.entry).toEqual([]);

      expectOperationOutcome(await get('/_history?_since=yesterday'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_since=2024-01-01'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_since=2024-01-01T10:00Z'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_since=2024-01-01T10:00:00'), 400, 'invalid');
      expect((await get('/_history?_since=2024-01-01T10:00:00%2B02:00')).status).toBe(200);
      expectOperationOutcome(await get('/_history?_at=2024-13'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_count=-1'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_cursor=nonsense'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_cursor=a%2Fb'), 400, 'invalid');
      expectOperationOutcome(await get('/_history?_list=x'), 400, 'not-supported');
      expect((await get('/_history?_list=x').set('Prefer', 'handling=lenient')).status).toBe(200);
    });
  });
});
