import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// Conditional references (`Organization?identifier=…`) in batch and transaction entries, conditional
// `fullUrl`s, and the GET entries a batch runs (reads, conditional reads, searches, $everything), on
// each store.
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const FHIR_JSON = 'application/fhir+json';

type Open = () => Storage | Promise<Storage>;
type Json = Record<string, unknown>;
interface ResponseEntry {
  resource?: Json & { managingOrganization?: { reference: string }; entry?: { resource: Json }[] };
  response: { status: string; outcome?: { issue: { code: string; expression?: string[] }[] } };
}

async function appOver(open: Open): Promise<express.Express> {
  const storage = await open();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return app;
}

const org = (value: string, extra: Json = {}): Json => ({
  resourceType: 'Organization',
  identifier: [{ system: 'urn:org', value }],
  ...extra,
});
const patient = (value: string, orgRef?: string): Json => ({
  resourceType: 'Patient',
  identifier: [{ system: 'urn:pat', value }],
  ...(orgRef ? { managingOrganization: { reference: orgRef } } : {}),
});

async function create(app: express.Express, resource: Json): Promise<string> {
  const res = await request(app)
    .post(`${BASE}/${String(resource.resourceType)}`)
    .set('Authorization', auth)
    .type(FHIR_JSON)
    .send(JSON.stringify(resource));
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

const post = (app: express.Express, type: 'batch' | 'transaction', entry: unknown[], token = auth) =>
  request(app)
    .post(BASE)
    .set('Authorization', token)
    .type(FHIR_JSON)
    .send(JSON.stringify({ resourceType: 'Bundle', type, entry }));

async function count(app: express.Express, query: string): Promise<number> {
  const counted = `${query}${query.includes('?') ? '&' : '?'}_summary=count`;
  const res = await request(app).get(`${BASE}/${counted}`).set('Authorization', auth);
  expect(res.status).toBe(200);
  return res.body.total as number;
}

const statuses = (res: request.Response): string[] =>
  (res.body.entry as ResponseEntry[]).map((e) => e.response.status.slice(0, 3));

function suite(name: string, open: Open): void {
  describe(`conditional references and GET entries: ${name}`, () => {
    it('a transaction resolves each to its one match, 404 for none, 412 for several, and writes nothing on failure', async () => {
      const app = await appOver(open);
      const o1 = await create(app, org('o1'));
      await create(app, org('twice'));
      await create(app, org('twice'));
      const ok = await post(app, 'transaction', [
        {
          resource: patient('a', 'Organization?identifier=urn:org|o1'),
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: patient('b', 'Organization?identifier=urn:org|o1'),
          request: { method: 'PUT', url: 'Patient?identifier=urn:pat|b' },
        },
      ]);
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      for (const entry of ok.body.entry as ResponseEntry[]) {
        expect(entry.resource?.managingOrganization).toEqual({ reference: `Organization/${o1}` });
      }
      for (const [value, status, code] of [
        ['none', 404, 'not-found'],
        ['twice', 412, 'duplicate'],
      ] as const) {
        const failed = await post(app, 'transaction', [
          { resource: patient('c'), request: { method: 'POST', url: 'Patient' } },
          {
            resource: patient('d', `Organization?identifier=urn:org|${value}`),
            request: { method: 'POST', url: 'Patient' },
          },
        ]);
        expect(failed.status, JSON.stringify(failed.body)).toBe(status);
        expect(failed.body.issue[0]).toMatchObject({ code, expression: ['Bundle.entry[1]'] });
      }
      // Criteria naming no search parameter, or an unknown one, are refused too.
      for (const reference of ['Organization?', 'Organization?nonsense=1']) {
        const res = await post(app, 'transaction', [
          { resource: patient('e', reference), request: { method: 'POST', url: 'Patient' } },
        ]);
        expect(res.status, reference).toBeGreaterThanOrEqual(400);
        expect(res.status, reference).toBeLessThan(500);
      }
      expect(await count(app, 'Patient?identifier=urn:pat|c')).toBe(0);
      expect(await count(app, 'Patient?identifier=urn:pat|e')).toBe(0);
    });

    it('a conditional fullUrl names the entry it is on: references to it need no search', async () => {
      const app = await appOver(open);
      const res = await post(app, 'transaction', [
        {
          resource: patient('f', 'Organization?identifier=urn:org|new'),
          request: { method: 'POST', url: 'Patient' },
        },
        {
          fullUrl: 'Organization?identifier=urn:org|new',
          resource: org('new'),
          request: { method: 'POST', url: 'Organization', ifNoneExist: 'identifier=urn:org|new' },
        },
      ]);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const [p, o] = res.body.entry as ResponseEntry[];
      expect(o!.response.status).toMatch(/^201/);
      expect(p!.resource?.managingOrganization).toEqual({
        reference: `Organization/${String(o!.resource?.id)}`,
      });
      // Again: the conditional create now finds the organization, and the reference follows it.
      const again = await post(app, 'transaction', [
        {
          resource: patient('g', 'Organization?identifier=urn:org|new'),
          request: { method: 'POST', url: 'Patient' },
        },
        {
          fullUrl: 'Organization?identifier=urn:org|new',
          resource: org('new'),
          request: { method: 'POST', url: 'Organization', ifNoneExist: 'identifier=urn:org|new' },
        },
      ]);
      expect(again.status, JSON.stringify(again.body)).toBe(200);
      const [p2, o2] = again.body.entry as ResponseEntry[];
      expect(o2!.response.status).toMatch(/^200/);
      expect(o2!.resource?.id).toBe(o!.resource?.id);
      expect(p2!.resource?.managingOrganization).toEqual(p!.resource?.managingOrganization);
      expect(await count(app, 'Organization?identifier=urn:org|new')).toBe(1);
    });

    it('in a batch each entry resolves on its own', async () => {
      const app = await appOver(open);
      const o1 = await create(app, org('o1'));
      await create(app, org('twice'));
      await create(app, org('twice'));
      const res = await post(app, 'batch', [
        {
          resource: patient('h', 'Organization?identifier=urn:org|o1'),
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: patient('i', 'Organization?identifier=urn:org|none'),
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: patient('j', 'Organization?identifier=urn:org|twice'),
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: patient('k', 'Organization?identifier=urn:org|o1'),
          request: { method: 'PUT', url: 'Patient?identifier=urn:pat|k' },
        },
      ]);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(statuses(res)).toEqual(['201', '404', '412', '201']);
      const entries = res.body.entry as ResponseEntry[];
      expect(entries[0]!.resource?.managingOrganization).toEqual({ reference: `Organization/${o1}` });
      expect(entries[3]!.resource?.managingOrganization).toEqual({ reference: `Organization/${o1}` });
      expect(entries[1]!.response.outcome?.issue[0]?.code).toBe('not-found');
      expect(await count(app, 'Patient?identifier=urn:pat|i')).toBe(0);
      expect(await count(app, 'Patient?identifier=urn:pat|h')).toBe(1);
    });

    it('needs the right to search the referenced type', async () => {
      const app = await appOver(open);
      await create(app, org('o1'));
      const patientsOnly = testToken({ projectId: 'p1', scopes: ['system/Patient.*'] });
      const res = await post(
        app,
        'transaction',
        [
          {
            resource: patient('l', 'Organization?identifier=urn:org|o1'),
            request: { method: 'POST', url: 'Patient' },
          },
        ],
        patientsOnly,
      );
      expect(res.status).toBe(403);
      expect(await count(app, 'Patient?identifier=urn:pat|l')).toBe(0);
    });

    it('a batch answers reads, conditional reads, searches and $everything', async () => {
      const app = await appOver(open);
      const o1 = await create(app, org('o1'));
      const p1 = await create(app, patient('m', `Organization/${o1}`));
      const res = await post(app, 'batch', [
        { request: { method: 'GET', url: `Patient/${p1}` } },
        { request: { method: 'GET', url: `Patient/${p1}`, ifNoneMatch: 'W/"1"' } },
        { request: { method: 'GET', url: 'Patient?identifier=urn:pat|m' } },
        { request: { method: 'GET', url: `Patient/${p1}/$everything` } },
        { request: { method: 'GET', url: 'Patient/$everything?_type=Organization,Patient' } },
        { request: { method: 'GET', url: 'Patient/nobody/$everything' } },
        { request: { method: 'GET', url: `Patient/${p1}/$everything?_since=bad` } },
        { request: { method: 'POST', url: `Patient/${p1}/$everything` } },
        { request: { method: 'GET', url: 'Observation/$everything' } },
      ]);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(statuses(res)).toEqual(['200', '304', '200', '200', '200', '404', '400', '405', '404']);
      const entries = res.body.entry as ResponseEntry[];
      expect(entries[2]!.resource?.entry).toHaveLength(1);
      const everything = (i: number) =>
        entries[i]!.resource?.entry?.map(
          (e) => `${String(e.resource.resourceType)}/${String(e.resource.id)}`,
        );
      expect(everything(3)).toEqual([`Patient/${p1}`, `Organization/${o1}`]);
      expect(everything(4)).toEqual([`Patient/${p1}`, `Organization/${o1}`]);
      // The same in a transaction, after its writes.
      const tx = await post(app, 'transaction', [
        { request: { method: 'GET', url: `Patient/${p1}/$everything?_type=Patient` } },
        { resource: patient('n'), request: { method: 'POST', url: 'Patient' } },
      ]);
      expect(tx.status, JSON.stringify(tx.body)).toBe(200);
      expect(statuses(tx)).toEqual(['200', '201']);
    });
  });
}

forEachStore('conditional references', (store, open) => suite(store, open));
