import express from 'express';
import request from 'supertest';
import { describe, expect, it, vi } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { clockPast } from '../helpers/eventually.js';

// Patient/{id}/$everything and Patient/$everything, on each store: what a patient's record holds,
// paging while others write, the parameters, scopes and project isolation.
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const FHIR_JSON = 'application/fhir+json';

type Open = () => Storage | Promise<Storage>;
type Json = Record<string, unknown>;
interface BundleEntry {
  fullUrl?: string;
  resource: { resourceType: string; id: string; meta: { lastUpdated: string } };
  search: { mode: string };
}
interface Bundle {
  type: string;
  link: { relation: string; url: string }[];
  entry: BundleEntry[];
}

async function appOver(open: Open): Promise<{ app: express.Express; storage: Storage }> {
  const storage = await open();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return { app, storage };
}

async function put(app: express.Express, resource: Json, token = auth): Promise<void> {
  const res = await request(app)
    .put(`${BASE}/${String(resource.resourceType)}/${String(resource.id)}`)
    .set('Authorization', token)
    .type(FHIR_JSON)
    .send(JSON.stringify(resource));
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
}

const get = (app: express.Express, url: string, token = auth) =>
  request(app)
    .get(url.startsWith('http') ? new URL(url).pathname + new URL(url).search : `${BASE}/${url}`)
    .set('Authorization', token);

/** Two patients: `ann` with observations, an encounter and a medication request, `bob` with one observation. */
async function seed(app: express.Express): Promise<void> {
  await put(app, { resourceType: 'Organization', id: 'org1', name: 'Clinic' });
  await put(app, { resourceType: 'Organization', id: 'org-unused', name: 'Other' });
  await put(app, { resourceType: 'Practitioner', id: 'doc1' });
  await put(app, { resourceType: 'Medication', id: 'med1' });
  await put(app, { resourceType: 'Location', id: 'loc1' });
  await put(app, {
    resourceType: 'Patient',
    id: 'ann',
    managingOrganization: { reference: 'Organization/org1' },
  });
  await put(app, { resourceType: 'Patient', id: 'bob' });
  for (const n of [1, 2, 3]) {
    await put(app, {
      resourceType: 'Observation',
      id: `ann-obs${n}`,
      status: 'final',
      code: { text: 'x' },
      subject: { reference: 'Patient/ann' },
      performer: [{ reference: 'Practitioner/doc1' }],
    });
  }
  await put(app, {
    resourceType: 'Encounter',
    id: 'ann-enc',
    status: 'finished',
    class: { code: 'AMB' },
    subject: { reference: 'Patient/ann' },
    location: [{ location: { reference: 'Location/loc1' } }],
  });
  await put(app, {
    resourceType: 'MedicationRequest',
    id: 'ann-mr',
    status: 'active',
    intent: 'order',
    subject: { reference: 'Patient/ann' },
    medicationReference: { reference: 'Medication/med1' },
    requester: { reference: 'Practitioner/doc1' },
  });
  await put(app, {
    resourceType: 'Observation',
    id: 'bob-obs',
    status: 'final',
    code: { text: 'x' },
    subject: { reference: 'Patient/bob' },
  });
}

const keys = (bundle: Bundle): string[] =>
  bundle.entry.map((e) => `${e.resource.resourceType}/${e.resource.id}`);

const ANN = [
  'Patient/ann',
  'Encounter/ann-enc',
  'MedicationRequest/ann-mr',
  'Observation/ann-obs1',
  'Observation/ann-obs2',
  'Observation/ann-obs3',
  'Practitioner/doc1',
  'Organization/org1',
  'Location/loc1',
  'Medication/med1',
];

/** Every page of a walk, following `next` links; `between` runs after each page. */
async function walk(app: express.Express, url: string, between?: () => Promise<void>): Promise<string[]> {
  const out: string[] = [];
  let next: string | undefined = url;
  for (let pages = 0; next !== undefined; pages++) {
    expect(pages).toBeLessThan(50);
    const res = await get(app, next);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const bundle = res.body as Bundle;
    out.push(...keys(bundle));
    next = bundle.link.find((l) => l.relation === 'next')?.url;
    if (between) await between();
  }
  return out;
}

function expectIssue(res: request.Response, status: number, code?: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.resourceType).toBe('OperationOutcome');
  if (code) expect(res.body.issue[0].code).toBe(code);
}

function suite(name: string, open: Open): void {
  describe(`$everything: ${name}`, () => {
    it('answers the patient, its compartment and what it references, each once, in a searchset', async () => {
      const { app } = await appOver(open);
      await seed(app);
      const res = await get(app, 'Patient/ann/$everything?_count=100');
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const bundle = res.body as Bundle;
      expect(bundle.type).toBe('searchset');
      expect(keys(bundle)).toEqual(ANN);
      expect(bundle.entry[0]!.fullUrl).toMatch(/\/api\/fhir\/R4\/Patient\/ann$/);
      expect(bundle.entry.filter((e) => e.search.mode === 'include').map((e) => e.resource.id)).toEqual([
        'doc1',
        'org1',
        'loc1',
        'med1',
      ]);
      expect(bundle.link.find((l) => l.relation === 'next')).toBeUndefined();
      // `%24` spelling, and POST with a form body.
      expect(keys((await get(app, 'Patient/ann/%24everything?_count=100')).body as Bundle)).toEqual(ANN);
      const posted = await request(app)
        .post(`${BASE}/Patient/ann/$everything`)
        .set('Authorization', auth)
        .type('form')
        .send('_type=Observation&_count=100');
      expect(posted.status, JSON.stringify(posted.body)).toBe(200);
      expect(keys(posted.body as Bundle)).toEqual([
        'Observation/ann-obs1',
        'Observation/ann-obs2',
        'Observation/ann-obs3',
      ]);
    });

    it('pages with next links that neither repeat nor skip while others write', async () => {
      const { app } = await appOver(open);
      await seed(app);
      expect(await walk(app, 'Patient/ann/$everything?_count=3')).toEqual(ANN);
      // Writes between pages: a new observation (after the walk's position in its type) is found,
      // a resource already answered is not answered again when another is added before it in order.
      let n = 0;
      const seen = await walk(app, 'Patient/ann/$everything?_count=2', async () => {
        n++;
        if (n === 1) {
          await put(app, {
            resourceType: 'Observation',
            id: 'ann-new',
            status: 'final',
            code: { text: 'x' },
            subject: { reference: 'Patient/ann' },
          });
        }
      });
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen).toEqual([...ANN.slice(0, 6), 'Observation/ann-new', ...ANN.slice(6)]);
    });

    it('takes _type and _since, and refuses bad parameters with an OperationOutcome', async () => {
      const { app } = await appOver(open);
      await seed(app);
      const typed = await get(app, 'Patient/ann/$everything?_type=Observation,Practitioner&_count=100');
      expect(keys(typed.body as Bundle)).toEqual([
        'Observation/ann-obs1',
        'Observation/ann-obs2',
        'Observation/ann-obs3',
        'Practitioner/doc1',
      ]);
      const all = (await get(app, 'Patient/ann/$everything?_count=100')).body as Bundle;
      const obs2 = all.entry.find((e) => e.resource.id === 'ann-obs2')!.resource.meta.lastUpdated;
      const since = new Date(Date.parse(obs2) + 1).toISOString();
      await clockPast(Date.parse(since));
      await put(app, { resourceType: 'Practitioner', id: 'doc1', active: true });
      const recent = await get(app, `Patient/ann/$everything?_since=${encodeURIComponent(since)}`);
      expect(recent.status, JSON.stringify(recent.body)).toBe(200);
      expect(keys(recent.body as Bundle)).toEqual([
        'Encounter/ann-enc',
        'MedicationRequest/ann-mr',
        'Observation/ann-obs3',
        'Practitioner/doc1',
      ]);

      expectIssue(await get(app, 'Patient/ann/$everything?_since=yesterday'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?_since=2024-01-01'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?_type=Nonsense'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?_count=0'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?_count=ten'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?_cursor=zzz'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?foo=1'), 400, 'not-supported');
      const lenient = await get(app, 'Patient/ann/$everything?foo=1&_count=100').set(
        'Prefer',
        'handling=lenient',
      );
      expect(lenient.status).toBe(200);
      expect(lenient.body.entry.at(-1).search.mode).toBe('outcome');
      // A cursor of the type-level walk is not one of the instance walk.
      const typeLevel = (await get(app, 'Patient/$everything?_count=1')).body as Bundle;
      const cursor = new URL(typeLevel.link.find((l) => l.relation === 'next')!.url).searchParams.get(
        '_cursor',
      )!;
      expectIssue(await get(app, `Patient/ann/$everything?_cursor=${cursor}`), 400, 'invalid');
      expect(
        (await request(app).delete(`${BASE}/Patient/ann/$everything`).set('Authorization', auth)).status,
      ).toBe(405);
    });

    it('takes start and end as care dates: the date search parameter of each type that has one', async () => {
      const { app } = await appOver(open);
      await seed(app);
      const dated = (id: string, when: string) => ({
        resourceType: 'Observation',
        id,
        status: 'final',
        code: { text: 'x' },
        subject: { reference: 'Patient/ann' },
        performer: [{ reference: 'Practitioner/doc1' }],
        effectiveDateTime: when,
      });
      await put(app, dated('ann-obs1', '2020-05-01'));
      await put(app, dated('ann-obs2', '2023-02-01T10:00:00Z'));
      const range = async (query: string) =>
        keys(
          (await get(app, `Patient/ann/$everything?_type=Patient,Observation,Practitioner&${query}`))
            .body as Bundle,
        );
      expect(await range('start=2022')).toEqual(['Patient/ann', 'Observation/ann-obs2', 'Practitioner/doc1']);
      expect(await range('end=2021-12')).toEqual([
        'Patient/ann',
        'Observation/ann-obs1',
        'Practitioner/doc1',
      ]);
      expect(await range('start=2021&end=2022')).toEqual(['Patient/ann']);
      // A type without a `date` parameter is kept whole.
      await put(app, {
        resourceType: 'Condition',
        id: 'ann-cond',
        subject: { reference: 'Patient/ann' },
      });
      expect(
        keys((await get(app, 'Patient/ann/$everything?_type=Condition&start=2030')).body as Bundle),
      ).toEqual(['Condition/ann-cond']);
      expectIssue(await get(app, 'Patient/ann/$everything?start=2024-13'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?end=soon'), 400, 'invalid');
      expectIssue(await get(app, 'Patient/ann/$everything?start=2020&start=2021'), 400, 'invalid');
    });

    it('answers 404 for an unknown patient, 410 for a deleted one, and stays in the caller project', async () => {
      const { app } = await appOver(open);
      await seed(app);
      expectIssue(await get(app, 'Patient/nobody/$everything'), 404);
      expectIssue(await get(app, 'Patient/bad$id/$everything'), 400);
      const other = testToken({ projectId: 'p2', scopes: ['system/*.*'] });
      expectIssue(await get(app, 'Patient/ann/$everything', other), 404);
      await put(app, { resourceType: 'Patient', id: 'ann', active: true }, other);
      await put(
        app,
        {
          resourceType: 'Observation',
          id: 'p2-obs',
          status: 'final',
          code: { text: 'x' },
          subject: { reference: 'Patient/ann' },
        },
        other,
      );
      expect(keys((await get(app, 'Patient/ann/$everything', other)).body as Bundle)).toEqual([
        'Patient/ann',
        'Observation/p2-obs',
      ]);
      expect(keys((await get(app, 'Patient/ann/$everything?_count=100')).body as Bundle)).toEqual(ANN);
      expect((await request(app).delete(`${BASE}/Patient/bob`).set('Authorization', auth)).status).toBe(204);
      expectIssue(await get(app, 'Patient/bob/$everything'), 410);
      expect((await request(app).get(`${BASE}/Patient/ann/$everything`)).status).toBe(401);
    });

    it('gives a caller only the types its scopes let it search', async () => {
      const { app } = await appOver(open);
      await seed(app);
      const observations = testToken({ projectId: 'p1', scopes: ['system/Observation.read'] });
      const res = await get(app, 'Patient/ann/$everything', observations);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(keys(res.body as Bundle)).toEqual([
        'Observation/ann-obs1',
        'Observation/ann-obs2',
        'Observation/ann-obs3',
      ]);
      // Still a 404 for a patient that does not exist, and nothing the scopes do not name.
      expectIssue(await get(app, 'Patient/nobody/$everything', observations), 404);
      // Referenced resources come from the compartment resources the caller may read only.
      const orgs = testToken({ projectId: 'p1', scopes: ['system/Organization.read'] });
      expect(keys((await get(app, 'Patient/ann/$everything', orgs)).body as Bundle)).toEqual([]);
      const patientOrgs = testToken({
        projectId: 'p1',
        scopes: ['system/Patient.read', 'system/Organization.read'],
      });
      expect(keys((await get(app, 'Patient/ann/$everything', patientOrgs)).body as Bundle)).toEqual([
        'Patient/ann',
        'Organization/org1',
      ]);
      const none = testToken({ projectId: 'p1', scopes: ['system/ValueSet.read'] });
      expectIssue(await get(app, 'Patient/ann/$everything', none), 403);
      // The type level needs Patient.
      expectIssue(await get(app, 'Patient/$everything', observations), 403);
    });

    it('is listed on Patient in the CapabilityStatement', async () => {
      const { app } = await appOver(open);
      const res = await request(app).get(`${BASE}/metadata`);
      const patient = (res.body.rest[0].resource as { type: string; operation?: Json[] }[]).find(
        (r) => r.type === 'Patient',
      );
      expect(patient?.operation).toContainEqual({
        name: 'everything',
        definition: 'http://hl7.org/fhir/OperationDefinition/Patient-everything',
      });
    });

    it('Patient/$everything walks every patient of the project, paged', async () => {
      const { app } = await appOver(open);
      await seed(app);
      const whole = await get(app, 'Patient/$everything?_count=100');
      expect(whole.status, JSON.stringify(whole.body)).toBe(200);
      const expected = [...ANN, 'Patient/bob', 'Observation/bob-obs'];
      expect(keys(whole.body as Bundle)).toEqual(expected);
      expect(await walk(app, 'Patient/$everything?_count=3')).toEqual(expected);
      expect(await walk(app, 'Patient/$everything?_count=1&_type=Observation')).toEqual([
        'Observation/ann-obs1',
        'Observation/ann-obs2',
        'Observation/ann-obs3',
        'Observation/bob-obs',
      ]);
    });

    // A store that can say which types a patient's compartment holds (`compartmentTypes`: the
    // PostgreSQL store's) is asked once per patient, and only those types are searched, not each of
    // the sixty-odd in turn (a round trip each on a database).
    it.runIf(name === 'PostgreSQL')('searches only the types of a patient’s compartment', async () => {
      const { app, storage } = await appOver(open);
      await seed(app);
      expect((await storage.compartmentTypes!('p1', 'ann')).sort()).toEqual([
        'Encounter',
        'MedicationRequest',
        'Observation',
        'Patient',
      ]);
      expect(await storage.compartmentTypes!('p2', 'ann')).toEqual([]);
      const searched: string[] = [];
      const search = storage.searchResources.bind(storage);
      vi.spyOn(storage, 'searchResources').mockImplementation((projectId, type, query) => {
        searched.push(type);
        return search(projectId, type, query);
      });
      const res = await get(app, 'Patient/ann/$everything?_count=100');
      expect(keys(res.body as Bundle)).toEqual(ANN);
      // The four compartment types (Observation once for the page, once for its references, …) and
      // the four referenced ones.
      expect([...new Set(searched)].sort()).toEqual([
        'Encounter',
        'Location',
        'Medication',
        'MedicationRequest',
        'Observation',
        'Organization',
        'Patient',
        'Practitioner',
      ]);
      expect(searched.length).toBeLessThanOrEqual(12);
      searched.length = 0;
      const all = await get(app, 'Patient/$everything?_count=100');
      expect(keys(all.body as Bundle)).toEqual([...ANN, 'Patient/bob', 'Observation/bob-obs']);
      expect(searched.length).toBeLessThanOrEqual(20);
    });
  });
}

forEachStore('$everything', (store, open) => suite(store, open));
