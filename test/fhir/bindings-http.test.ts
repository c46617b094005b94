import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// Issue 47: coded elements are checked against their bindings on every write path: errors of
// required bindings refuse the write in a strict project; findings are warnings otherwise, shown
// by `Prefer: return=OperationOutcome`.
const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';
const GENDER = 'http://hl7.org/fhir/ValueSet/administrative-gender';
const MARITAL = 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus';

interface Issue {
  severity: string;
  code: string;
  details?: { text?: string };
  expression?: string[];
  location?: string[];
}

const issuesOf = (res: request.Response, severity: string): Issue[] =>
  (res.body.issue as Issue[]).filter((i) => i.severity === severity);

const auth = (project: string) => testToken({ projectId: project, scopes: ['system/*.*'] });

forEachStore('bindings', (store, open) => {
  async function createApp(): Promise<express.Express> {
    const storage: Storage = await open();
    afterTest(() => storage.close());
    await storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
    await storage.createProject({ id: 'lenient', name: 'Lenient', strictMode: false });
    const app = express();
    app.use(
      BASE,
      fhirRouter({
        storage,
        authenticate: testAuthenticate,
        onError: () => undefined,
      }),
    );
    return app;
  }

  const post = (app: express.Express, resource: Record<string, unknown>, project = 'strict') =>
    request(app)
      .post(`${BASE}/${String(resource.resourceType)}`)
      .set('Authorization', auth(project))
      .type(FHIR_JSON)
      .send(JSON.stringify(resource));

  describe(`bindings on writes (${store})`, () => {
    it('refuses a code outside a required value set in a strict project, naming the element and value set', async () => {
      const app = await createApp();
      const res = await post(app, { resourceType: 'Patient', gender: 'mail' });
      expect(res.status).toBe(400);
      const [error] = issuesOf(res, 'error');
      expect(error).toMatchObject({ code: 'code-invalid', expression: ['Patient.gender'] });
      expect(error?.details?.text).toContain(GENDER);
      const status = await post(app, {
        resourceType: 'Observation',
        status: 'finalized',
        code: { text: 'x' },
      });
      expect(status.status).toBe(400);
      expect(issuesOf(status, 'error')[0]?.expression).toEqual(['Observation.status']);
      expect((await post(app, { resourceType: 'Patient', gender: 'female' })).status).toBe(201);
    });

    it('reports every issue at once, structure and bindings', async () => {
      const app = await createApp();
      const res = await post(app, {
        resourceType: 'Patient',
        gender: 'mail',
        name: [{ use: 'bogus' }],
        active: 'yes',
      });
      expect(res.status).toBe(400);
      const expressions = issuesOf(res, 'error').flatMap((i) => i.expression ?? []);
      expect(expressions).toEqual(expect.arrayContaining(['Patient.gender', 'Patient.name[0].use']));
      expect(expressions.length).toBeGreaterThanOrEqual(3);
    });

    it('accepts codes of systems the server does not hold (LOINC)', async () => {
      const app = await createApp();
      const res = await post(app, {
        resourceType: 'Observation',
        status: 'final',
        code: { coding: [{ system: 'http://loinc.org', code: '8302-2' }] },
      });
      expect(res.status).toBe(201);
    });

    it('answers extensible and preferred findings as warnings with Prefer: return=OperationOutcome', async () => {
      const app = await createApp();
      const patient = {
        resourceType: 'Patient',
        maritalStatus: { coding: [{ system: MARITAL, code: 'Q' }] },
      };
      const res = await post(app, patient).set('Prefer', 'return=OperationOutcome');
      expect(res.status).toBe(201);
      expect(res.body.resourceType).toBe('OperationOutcome');
      expect(issuesOf(res, 'warning')).toEqual([
        expect.objectContaining({ code: 'code-invalid', expression: ['Patient.maritalStatus.coding[0]'] }),
      ]);
      expect((await post(app, patient)).status).toBe(201);
    });

    it('accepts a lenient write, its findings as warnings when asked for', async () => {
      const app = await createApp();
      const plain = await post(app, { resourceType: 'Patient', gender: 'mail' }, 'lenient');
      expect(plain.status).toBe(201);
      const res = await post(app, { resourceType: 'Patient', gender: 'mail' }, 'lenient').set(
        'Prefer',
        'return=OperationOutcome',
      );
      expect(res.status).toBe(201);
      expect(issuesOf(res, 'error')).toEqual([]);
      expect(issuesOf(res, 'warning')[0]?.expression).toEqual(['Patient.gender']);
    });

    it('refuses an invalid code on update, conditional create and conditional update', async () => {
      const app = await createApp();
      const put = await request(app)
        .put(`${BASE}/Patient/p1`)
        .set('Authorization', auth('strict'))
        .type(FHIR_JSON)
        .send(JSON.stringify({ resourceType: 'Patient', id: 'p1', gender: 'mail' }));
      expect(put.status).toBe(400);
      const conditional = await post(app, { resourceType: 'Patient', gender: 'mail' }).set(
        'If-None-Exist',
        'identifier=x|1',
      );
      expect(conditional.status).toBe(400);
      const conditionalUpdate = await request(app)
        .put(`${BASE}/Patient?identifier=x|1`)
        .set('Authorization', auth('strict'))
        .type(FHIR_JSON)
        .send(JSON.stringify({ resourceType: 'Patient', gender: 'mail' }));
      expect(conditionalUpdate.status).toBe(400);
    });

    it('refuses a PATCH that makes a code invalid', async () => {
      const app = await createApp();
      const created = await post(app, { resourceType: 'Patient', gender: 'male' });
      const res = await request(app)
        .patch(`${BASE}/Patient/${created.body.id as string}`)
        .set('Authorization', auth('strict'))
        .type('application/json-patch+json')
        .send(JSON.stringify([{ op: 'replace', path: '/gender', value: 'mail' }]));
      expect(res.status).toBe(400);
      expect(issuesOf(res, 'error')[0]?.expression).toEqual(['Patient.gender']);
    });

    it('refuses a Bundle entry with an invalid code', async () => {
      const app = await createApp();
      const entry = (gender: string) => ({
        resource: { resourceType: 'Patient', gender },
        request: { method: 'POST', url: 'Patient' },
      });
      const send = (type: string) =>
        request(app)
          .post(BASE)
          .set('Authorization', auth('strict'))
          .type(FHIR_JSON)
          .send(JSON.stringify({ resourceType: 'Bundle', type, entry: [entry('male'), entry('mail')] }));
      const transaction = await send('transaction');
      expect(transaction.status).toBe(400);
      const batch = await send('batch');
      expect(batch.status).toBe(200);
      expect((batch.body.entry as { response: { status: string } }[]).map((e) => e.response.status)).toEqual([
        '201 Created',
        expect.stringMatching(/^400/),
      ]);
    });

    it('reports an NDJSON line with an invalid code, and loads the others', async () => {
      const app = await createApp();
      const lines = [
        { resourceType: 'Patient', gender: 'male' },
        { resourceType: 'Patient', gender: 'mail' },
      ].map((r) => JSON.stringify(r));
      const res = await request(app)
        .post(BASE)
        .set('Authorization', auth('strict'))
        .attach('f', Buffer.from(`${lines.join('\n')}\n`), {
          filename: 'p.ndjson',
          contentType: 'application/fhir+ndjson',
        });
      expect(res.status).toBe(200);
      const errors = issuesOf(res, 'error');
      expect(errors).toHaveLength(1);
      expect(errors[0]?.location).toEqual(['p.ndjson:2']);
      expect(JSON.stringify(errors[0])).toContain('Patient.gender');
    });
  });
});
