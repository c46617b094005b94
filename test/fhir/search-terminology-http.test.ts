import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { UnsupportedSearchError } from '../../src/storage/errors.js';
import { typeSearch, type ParameterFilter } from '../../src/storage/search-request.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { fakeTerminology } from '../helpers/fake-terminology.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

/*
 * The token modifiers `:in`, `:not-in`, `:below`, `:above` over HTTP on every store: resolved by the
 * router's terminology (here a small fake one with explicit code lists, so that the expected
 * answers are plain) into token lists each store answers alike; in chains and `_has`, the criteria
 * of a conditional write and a batch entry; refusals as 400s; a store asked an unresolved one
 * refuses it.
 */
const BASE = '/api/fhir/R4';
const auth = () => testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const STATUS = 'http://hl7.org/fhir/observation-status';
const CS = 'urn:acme:cs';
const many = (n: number, extra: string[]) => [
  ...Array.from({ length: n }, (_, i) => ({ system: CS, code: `unused-${i}` })),
  ...extra.map((code) => ({ system: CS, code })),
];
const terminology = fakeTerminology({
  valueSets: {
    'urn:vs:status': ['final', 'amended'].map((code) => ({ system: STATUS, code })),
    'urn:vs:acme': ['parent', 'child'].map((code) => ({ system: CS, code })),
    'urn:vs:female': [{ system: 'http://hl7.org/fhir/administrative-gender', code: 'female' }],
    'urn:vs:empty': [],
    'urn:vs:large': many(4000, ['parent']),
    'urn:vs:huge': many(6000, []),
  },
  systems: { [CS]: { parent: [], child: ['parent'], grandchild: ['child'], other: [] } },
});

const patient = (id: string, gender: string) => ({ resourceType: 'Patient', id, gender });
const observation = (id: string, status: string, subject: string, code?: string) => ({
  resourceType: 'Observation',
  id,
  status,
  subject: { reference: `Patient/${subject}` },
  code: code === undefined ? { text: 'no coding' } : { coding: [{ system: CS, code }] },
});

async function appOver(storage: Storage): Promise<express.Express> {
  await storage.createProject({ id: 'p1', name: 'p1', strictMode: false });
  afterTest(() => storage.close());
  for (const resource of [
    patient('pf', 'female'),
    patient('pm', 'male'),
    observation('o1', 'final', 'pf', 'parent'),
    observation('o2', 'preliminary', 'pm', 'grandchild'),
    observation('o3', 'amended', 'pm', 'other'),
    observation('o4', 'final', 'pf'),
  ]) {
    await storage.updateResource('p1', resource);
  }
  const app = express();
  app.use(
    BASE,
    fhirRouter({
      storage,
      authenticate: testAuthenticate,
      onError: () => undefined,
      terminology,
      searchLimits: { maxTerminologyCodes: 5000 },
    }),
  );
  return app;
}

const get = (app: express.Express, url: string) =>
  request(app).get(`${BASE}/${url}`).set('Authorization', auth());

async function ids(app: express.Express, url: string): Promise<string[]> {
  const res = await get(app, url);
  expect(res.status, `${url}: ${JSON.stringify(res.body)}`).toBe(200);
  return (res.body.entry ?? []).map((e: { resource: { id: string } }) => e.resource.id).sort();
}

function expect400(res: request.Response, code: string, expression: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(400);
  expect(res.body.resourceType).toBe('OperationOutcome');
  expect(res.body.issue[0].code).toBe(code);
  expect(res.body.issue[0].expression).toEqual([expression]);
}

forEachStore('token terminology modifiers over HTTP', (store, open) =>
  describe(`token terminology modifiers over HTTP (${store})`, () => {
    it(':in, :not-in, :below, :above, alone, in chains and in _has', async () => {
      const app = await appOver(await open());
      // `status` is a `code` element: no system of its own, matched by the value set's codes.
      expect(await ids(app, 'Observation?status:in=urn:vs:status')).toEqual(['o1', 'o3', 'o4']);
      expect(await ids(app, 'Observation?status:not-in=urn:vs:status')).toEqual(['o2']);
      expect(await ids(app, 'Observation?code:in=urn:vs:acme')).toEqual(['o1']);
      // Not in: without the element too.
      expect(await ids(app, 'Observation?code:not-in=urn:vs:acme')).toEqual(['o2', 'o3', 'o4']);
      expect(await ids(app, `Observation?code:below=${CS}|parent`)).toEqual(['o1', 'o2']);
      expect(await ids(app, `Observation?code:below=${CS}|child`)).toEqual(['o2']);
      expect(await ids(app, `Observation?code:above=${CS}|grandchild`)).toEqual(['o1', 'o2']);
      expect(await ids(app, `Observation?code:above=${CS}|parent,${CS}|other`)).toEqual(['o1', 'o3']);
      expect(await ids(app, 'Observation?code:in=urn:vs:empty')).toEqual([]);
      expect(await ids(app, 'Observation?code:not-in=urn:vs:empty')).toEqual(['o1', 'o2', 'o3', 'o4']);
      expect(await ids(app, 'Observation?code:in=urn:vs:empty&_summary=count')).toEqual([]);
      expect(await ids(app, 'Observation?status:in=urn:vs:status&code:in=urn:vs:acme')).toEqual(['o1']);
      expect(await ids(app, 'Observation?subject:Patient.gender:in=urn:vs:female')).toEqual(['o1', 'o4']);
      expect(await ids(app, 'Observation?subject:Patient.gender:not-in=urn:vs:female')).toEqual(['o2', 'o3']);
      expect(await ids(app, `Patient?_has:Observation:subject:code:below=${CS}|child`)).toEqual(['pm']);
      expect(await ids(app, 'Patient?_has:Observation:subject:status:not-in=urn:vs:status')).toEqual(['pm']);
      // A long list (4,001 codes): one lookup on PostgreSQL, postings on the embedded stores.
      expect(await ids(app, 'Observation?code:in=urn:vs:large')).toEqual(['o1']);
      expect(await ids(app, 'Observation?code:not-in=urn:vs:large')).toEqual(['o2', 'o3', 'o4']);
      const counted = await get(app, 'Observation?code:in=urn:vs:large&_summary=count');
      expect(counted.body.total).toBe(1);
    });

    it('in the criteria of a conditional update and in a batch entry', async () => {
      const app = await appOver(await open());
      const put = await request(app)
        .put(`${BASE}/Observation?code:in=urn:vs:acme&status:in=urn:vs:status`)
        .set('Authorization', auth())
        .send({ ...observation('o1', 'amended', 'pf', 'parent') });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      expect(put.body).toMatchObject({ id: 'o1', status: 'amended', meta: { versionId: '2' } });
      const batch = await request(app)
        .post(BASE)
        .set('Authorization', auth())
        .send({
          resourceType: 'Bundle',
          type: 'batch',
          entry: [
            { request: { method: 'GET', url: 'Observation?status:not-in=urn:vs:status' } },
            { request: { method: 'GET', url: 'Observation?code:in=urn:vs:nope' } },
          ],
        });
      expect(batch.status).toBe(200);
      const [found, refused] = batch.body.entry;
      expect(found.resource.entry.map((e: { resource: { id: string } }) => e.resource.id)).toEqual(['o2']);
      expect(refused.response.status).toMatch(/^400/);
      expect(refused.response.outcome.issue[0].code).toBe('not-found');
    });

    it('refuses with a 400 naming the parameter: unknown value set or code, too many codes, no system', async () => {
      const app = await appOver(await open());
      expect400(await get(app, 'Observation?code:in=urn:vs:nope'), 'not-found', 'code:in');
      expect400(await get(app, 'Observation?code:below=urn:nope|x'), 'not-found', 'code:below');
      expect400(await get(app, `Observation?code:above=${CS}|nope`), 'invalid', 'code:above');
      expect400(await get(app, 'Observation?code:not-in=urn:vs:huge'), 'too-costly', 'code:not-in');
      expect400(await get(app, 'Observation?code:below=parent'), 'invalid', 'code:below');
      expect400(
        await get(app, 'Patient?_has:Observation:subject:subject:Patient.gender:in=urn:vs:nope'),
        'not-found',
        '_has:Observation:subject:subject.gender:in',
      );
      const put = await request(app)
        .put(`${BASE}/Observation?code:in=urn:vs:huge`)
        .set('Authorization', auth())
        .send({ resourceType: 'Observation', status: 'final', code: { text: 'x' } });
      expect400(put, 'too-costly', 'code:in');
    });

    it('a store asked an unresolved terminology filter refuses it', async () => {
      const storage = await open();
      await storage.createProject({ id: 'p1', name: 'p1', strictMode: false });
      afterTest(() => storage.close());
      const unresolved: ParameterFilter[] = [
        {
          kind: 'parameter',
          code: 'code',
          type: 'token',
          modifier: 'in',
          values: [{ type: 'uri', value: 'urn:vs:acme' }],
        },
        {
          kind: 'parameter',
          code: 'code',
          type: 'token',
          modifier: 'below',
          values: [{ type: 'token', system: CS, code: 'parent' }],
        },
      ];
      for (const filter of unresolved) {
        for (const search of [
          typeSearch('Observation', [filter]),
          typeSearch('Patient', [
            { kind: 'has', resourceType: 'Observation', referenceParam: 'subject', filter },
          ]),
        ]) {
          await expect(storage.searchResources('p1', search.resourceType, { search })).rejects.toBeInstanceOf(
            UnsupportedSearchError,
          );
        }
      }
    });
  }),
);

/*
 * The same modifiers with the router's own terminology (the R4 definitions and the project's
 * `CodeSystem` / `ValueSet` resources, uploaded with PUT).
 */
const REAL_CS = 'http://acme.org/fhir/CodeSystem/findings';
const REAL_VS = 'http://acme.org/fhir/ValueSet/parent-findings';

async function realAppOver(storage: Storage): Promise<express.Express> {
  await storage.createProject({ id: 'p1', name: 'p1', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  const put = async (resource: Record<string, unknown>) => {
    const res = await request(app)
      .put(`${BASE}/${String(resource.resourceType)}/${String(resource.id)}`)
      .set('Authorization', auth())
      .send(resource);
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
  };
  await put({
    resourceType: 'CodeSystem',
    id: 'findings',
    url: REAL_CS,
    status: 'active',
    content: 'complete',
    hierarchyMeaning: 'is-a',
    concept: [
      { code: 'parent', concept: [{ code: 'child', concept: [{ code: 'grandchild' }] }] },
      { code: 'other' },
    ],
  });
  await put({
    resourceType: 'ValueSet',
    id: 'parent-findings',
    url: REAL_VS,
    status: 'active',
    compose: {
      include: [{ system: REAL_CS, filter: [{ property: 'concept', op: 'is-a', value: 'child' }] }],
    },
  });
  await put({
    resourceType: 'ValueSet',
    id: 'all-loinc',
    url: 'http://acme.org/fhir/ValueSet/all-loinc',
    status: 'active',
    compose: { include: [{ system: 'http://loinc.org' }] },
  });
  const data = [
    patient('pf', 'female'),
    patient('pm', 'mail'),
    observation('o1', 'final', 'pf', 'parent'),
    observation('o2', 'finalized', 'pm', 'grandchild'),
    observation('o3', 'amended', 'pm', 'other'),
    observation('o4', 'final', 'pf'),
  ].map((r) =>
    'code' in r ? { ...r, code: JSON.parse(JSON.stringify(r.code).replaceAll(CS, REAL_CS)) as unknown } : r,
  );
  for (const resource of data) await put(resource);
  return app;
}

forEachStore('token terminology modifiers with the R4 terminology', (store, open) =>
  describe(`token terminology modifiers with the R4 terminology (${store})`, () => {
    it('answers over R4 value sets and the project own, and refuses what it cannot expand', async () => {
      const app = await realAppOver(await open());
      const r4 = 'http://hl7.org/fhir/ValueSet/observation-status';
      expect(await ids(app, `Observation?status:in=${r4}`)).toEqual(['o1', 'o3', 'o4']);
      expect(await ids(app, `Observation?status:not-in=${r4}`)).toEqual(['o2']);
      expect(await ids(app, `Observation?code:in=${REAL_VS}`)).toEqual(['o2']);
      expect(await ids(app, `Observation?code:not-in=${REAL_VS}`)).toEqual(['o1', 'o3', 'o4']);
      expect(await ids(app, `Observation?code:below=${REAL_CS}|parent`)).toEqual(['o1', 'o2']);
      expect(await ids(app, `Observation?code:above=${REAL_CS}|grandchild`)).toEqual(['o1', 'o2']);
      const gender = 'http://hl7.org/fhir/ValueSet/administrative-gender';
      expect(await ids(app, `Observation?subject:Patient.gender:in=${gender}`)).toEqual(['o1', 'o4']);
      expect(await ids(app, `Patient?_has:Observation:subject:code:below=${REAL_CS}|child`)).toEqual(['pm']);
      expect400(
        await get(app, 'Observation?code:in=http://acme.org/fhir/ValueSet/nope'),
        'not-found',
        'code:in',
      );
      const loinc = await get(app, 'Observation?code:in=http://acme.org/fhir/ValueSet/all-loinc');
      expect(loinc.status, JSON.stringify(loinc.body)).toBe(400);
      expect(loinc.body.issue[0].expression).toEqual(['code:in']);
      expect400(await get(app, `Observation?code:below=${REAL_CS}|nope`), 'invalid', 'code:below');
    });
  }),
);
