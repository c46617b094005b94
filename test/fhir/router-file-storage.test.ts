import express from 'express';
import fs from 'node:fs';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { fileStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { tempDir } from '../helpers/temp-dir.js';

// The same interactions over the embedded default store, including a reopen.
const BASE = '/api/fhir/R4';
const token = testToken({ projectId: 'p1' });

let dir: string;
let storage: Storage;

function appOver(store: Storage): express.Express {
  const app = express();
  app.use(BASE, fhirRouter({ storage: store, authenticate: testAuthenticate, onError: () => undefined }));
  return app;
}

beforeEach(async () => {
  dir = tempDir('fpk-fhir-file-');
  storage = await fileStorage({ dir, durability: 'write' });
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
});
afterEach(async () => {
  await storage.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('fhirRouter over fileStorage', () => {
  it('creates, updates, deletes, loads bundles and uploads, and keeps it all across a reopen', async () => {
    const app = appOver(storage);
    const created = await request(app)
      .post(`${BASE}/Patient`)
      .set('Authorization', token)
      .send({ resourceType: 'Patient', name: [{ family: 'File' }] });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const updated = await request(app)
      .put(`${BASE}/Patient/${id}`)
      .set('Authorization', token)
      .set('If-Match', 'W/"1"')
      .send({ ...created.body, active: true });
    expect(updated.status).toBe(200);
    expect(updated.headers.etag).toBe('W/"2"');

    const tx = await request(app)
      .post(BASE)
      .set('Authorization', token)
      .send({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: 'urn:uuid:aaaaaaaa-0000-4000-8000-000000000001',
            resource: { resourceType: 'Patient', name: [{ family: 'Tx' }] },
            request: { method: 'POST', url: 'Patient' },
          },
          {
            resource: {
              resourceType: 'Observation',
              status: 'final',
              code: { text: 'x' },
              subject: { reference: 'urn:uuid:aaaaaaaa-0000-4000-8000-000000000001' },
            },
            request: { method: 'POST', url: 'Observation' },
          },
        ],
      });
    expect(tx.status).toBe(200);
    const txPatient = tx.body.entry[0].resource.id as string;

    const upload = await request(app)
      .post(BASE)
      .set('Authorization', token)
      .attach('f', Buffer.from('{"resourceType":"Patient","id":"up1"}\nbroken\n'), 'u.ndjson');
    expect(upload.status).toBe(200);

    const del = await request(app)
      .post(`${BASE}/Patient`)
      .set('Authorization', token)
      .send({ resourceType: 'Patient' });
    expect(
      (await request(app).delete(`${BASE}/Patient/${del.body.id}`).set('Authorization', token)).status,
    ).toBe(204);

    await storage.close();
    storage = await fileStorage({ dir, durability: 'write' });
    const reopened = appOver(storage);
    const read = await request(reopened).get(`${BASE}/Patient/${id}`).set('Authorization', token);
    expect(read.status).toBe(200);
    expect(read.body.active).toBe(true);
    expect(read.headers.etag).toBe('W/"2"');
    expect((await request(reopened).get(`${BASE}/Patient/up1`).set('Authorization', token)).status).toBe(200);
    expect(
      (await request(reopened).get(`${BASE}/Patient/${del.body.id}`).set('Authorization', token)).status,
    ).toBe(410);
    const obs = await request(reopened)
      .get(`${BASE}/Observation?patient=${txPatient}`)
      .set('Authorization', token);
    expect(obs.body.entry).toHaveLength(1);
    const all = await request(reopened).get(`${BASE}/Patient?_count=0`).set('Authorization', token);
    expect(all.body.total).toBe(3);
  });
});
