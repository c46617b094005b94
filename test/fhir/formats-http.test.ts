import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { bulkTestApp, kickoff, poll } from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// The server answers FHIR JSON only: a client asking for XML alone (or another format) gets 406 with
// an OperationOutcome, on every route of the FHIR router and on the Bulk Data status.
const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });

async function appOver(open: () => Storage | Promise<Storage>): Promise<express.Express> {
  const storage = await open();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  const put = await request(app)
    .put(`${BASE}/Patient/ann`)
    .set('Authorization', auth)
    .type(FHIR_JSON)
    .send(JSON.stringify({ resourceType: 'Patient', id: 'ann' }));
  expect(put.status).toBe(201);
  return app;
}

function expect406(res: request.Response): void {
  expect(res.status, JSON.stringify(res.body)).toBe(406);
  expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
  expect(res.body.resourceType).toBe('OperationOutcome');
  expect(res.body.issue[0].code).toBe('not-supported');
}

function suite(store: string, open: () => Storage | Promise<Storage>): void {
  describe(`formats (${store})`, () => {
    const get = (app: express.Express, path: string) =>
      request(app).get(`${BASE}/${path}`).set('Authorization', auth);

    it('refuses `_format` of every XML spelling, and an unknown one', async () => {
      const app = await appOver(open);
      for (const format of ['xml', 'text/xml', 'application/xml', 'application/fhir+xml', 'XML', 'ttl'])
        expect406(await get(app, `Patient/ann?_format=${encodeURIComponent(format)}`));
      expect406(
        await get(app, `Patient?_format=${encodeURIComponent('application/fhir+xml; fhirVersion=4.0')}`),
      );
      expect406(await request(app).get(`${BASE}/metadata?_format=xml`));
    });

    it('refuses an Accept header that allows no JSON', async () => {
      const app = await appOver(open);
      for (const accept of ['application/fhir+xml', 'application/xml, text/xml', 'application/fhir+json;q=0'])
        expect406(await get(app, 'Patient/ann').set('Accept', accept));
      expect406(await request(app).get(`${BASE}/metadata`).set('Accept', 'application/fhir+xml'));
      expect406(await get(app, 'Patient/_history').set('Accept', 'application/fhir+xml'));
      expect406(
        await request(app)
          .post(BASE)
          .set('Authorization', auth)
          .set('Accept', 'application/fhir+xml')
          .type(FHIR_JSON)
          .send(JSON.stringify({ resourceType: 'Bundle', type: 'batch', entry: [] })),
      );
    });

    it('answers JSON for JSON formats, wildcards and `_format` overriding Accept', async () => {
      const app = await appOver(open);
      for (const format of ['json', 'application/json', 'application/fhir+json', 'application/json+fhir']) {
        const res = await get(app, `Patient/ann?_format=${encodeURIComponent(format)}`);
        expect(res.status, format).toBe(200);
      }
      // `+` left unescaped decodes to a space: still JSON.
      expect((await get(app, 'Patient?_format=application/fhir+json')).status).toBe(200);
      expect((await get(app, 'Patient/ann?_format=json').set('Accept', 'application/fhir+xml')).status).toBe(
        200,
      );
      for (const accept of [
        FHIR_JSON,
        'application/json',
        '*/*',
        'application/*',
        'application/fhir+xml, */*;q=0.1',
      ])
        expect((await get(app, 'Patient/ann').set('Accept', accept)).status, accept).toBe(200);
      expect((await request(app).get(`${BASE}/metadata?_format=json`)).status).toBe(200);
    });

    it('answers 415 for an XML body when JSON is accepted', async () => {
      const app = await appOver(open);
      const res = await request(app)
        .put(`${BASE}/Patient/ann`)
        .set('Authorization', auth)
        .type('application/fhir+xml')
        .send('<Patient xmlns="http://hl7.org/fhir"><id value="ann"/></Patient>');
      expect(res.status).toBe(415);
      expect(res.body.resourceType).toBe('OperationOutcome');
    });
  });
}

forEachStore('formats', suite);

describe('formats of the Bulk Data status', () => {
  it('answers the status with Accept: application/json, 406 for XML only', async () => {
    const { app, auth: bulkAuth } = await bulkTestApp();
    const status = await kickoff(app, bulkAuth, '/Patient/$export');
    const done = await poll(app, bulkAuth, status);
    expect(done.status).toBe(200);
    const json = await request(app)
      .get(status)
      .set('Authorization', bulkAuth)
      .set('Accept', 'application/json');
    expect(json.status).toBe(200);
    expect(json.body.output.length).toBeGreaterThan(0);
    expect406(
      await request(app).get(status).set('Authorization', bulkAuth).set('Accept', 'application/fhir+xml'),
    );
  });
});
