import express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

const BASE = '/api/fhir/R4';
const silent = () => undefined;

interface TestApp {
  app: express.Express;
  storage: Storage;
}

async function createTestApp(options: Partial<FhirRouterOptions> = {}): Promise<TestApp> {
  const storage = memoryStorage();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: silent, ...options }));
  return { app, storage };
}

const auth = (projectId: string | null = 'p1', scopes = ['system/*.*']) => testToken({ projectId, scopes });

const patient = (extra: Record<string, unknown> = {}) => ({
  resourceType: 'Patient',
  name: [{ family: 'Smith', given: ['Ann'] }],
  ...extra,
});

let t: TestApp;
beforeEach(async () => {
  t = await createTestApp();
});
afterEach(async () => {
  await t.storage.close();
});

async function create(
  resource: Record<string, unknown>,
  token = auth(),
): Promise<{ id: string } & Record<string, unknown>> {
  const res = await request(t.app)
    .post(`${BASE}/${String(resource.resourceType)}`)
    .set('Authorization', token)
    .set('Content-Type', 'application/fhir+json')
    .send(JSON.stringify(resource));
  expect(res.status).toBe(201);
  return res.body;
}

describe('metadata', () => {
  it('serves a public CapabilityStatement with contributions', async () => {
    const app = express();
    const storage = memoryStorage();
    app.use(
      BASE,
      fhirRouter({
        storage,
        authenticate: testAuthenticate,
        capabilities: [
          {
            operations: [
              { name: 'export', definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export' },
              {
                name: 'export',
                definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/patient-export',
                resourceTypes: ['Patient'],
              },
            ],
            security: { service: [{ text: 'SMART-on-FHIR' }] },
            customize: (cs) => ({ ...cs, publisher: 'test' }),
          },
        ],
      }),
    );
    const res = await request(app).get(`${BASE}/metadata`);
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
    expect(res.body.resourceType).toBe('CapabilityStatement');
    expect(res.body.fhirVersion).toBe('4.0.1');
    expect(res.body.publisher).toBe('test');
    const rest = res.body.rest[0];
    expect(rest.security.service[0].text).toBe('SMART-on-FHIR');
    expect(rest.operation[0].name).toBe('export');
    const patientCaps = rest.resource.find((r: { type: string }) => r.type === 'Patient');
    expect(patientCaps.operation[0].name).toBe('export');
    expect(patientCaps.interaction.map((i: { code: string }) => i.code)).toEqual([
      'read',
      'vread',
      'update',
      'patch',
      'delete',
      'history-instance',
      'history-type',
      'create',
      'search-type',
    ]);
    expect(patientCaps).toMatchObject({
      readHistory: true,
      conditionalCreate: true,
      conditionalRead: 'full-support',
      conditionalUpdate: true,
      conditionalDelete: 'single',
    });
    const obs = rest.resource.find((r: { type: string }) => r.type === 'Observation');
    expect(obs.searchParam.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(['_id', 'patient']),
    );
    expect(rest.interaction.map((i: { code: string }) => i.code)).toEqual([
      'batch',
      'transaction',
      'history-system',
    ]);
    expectOperationOutcome(await request(app).post(`${BASE}/metadata`), 405);
    await storage.close();
  });

  it('fails fast on bad options', () => {
    expect(() => fhirRouter({ storage: t.storage, authenticate: testAuthenticate, maxCount: 0 })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() => fhirRouter({ authenticate: testAuthenticate } as FhirRouterOptions)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() =>
      fhirRouter({
        storage: t.storage,
        authenticate: testAuthenticate,
        defaultReturn: 'OperationOutcome' as 'minimal',
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(() =>
      fhirRouter({
        storage: t.storage,
        authenticate: testAuthenticate,
        conditionalDelete: 'all' as 'multiple',
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
  });
});

describe('authentication and authorization', () => {
  it('answers 401 without credentials and 403 outside a project', async () => {
    const res = await request(t.app).get(`${BASE}/Patient`);
    expectOperationOutcome(res, 401, 'login');
    expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient`).set('Authorization', auth(null)),
      403,
      'forbidden',
    );
  });

  it('asks the access decision per type and action', async () => {
    const readOnly = auth('p1', ['system/Patient.rs']);
    const created = await create(patient());
    expect(
      (await request(t.app).get(`${BASE}/Patient/${created.id}`).set('Authorization', readOnly)).status,
    ).toBe(200);
    expect((await request(t.app).get(`${BASE}/Patient`).set('Authorization', readOnly)).status).toBe(200);
    expectOperationOutcome(
      await request(t.app).post(`${BASE}/Patient`).set('Authorization', readOnly).send(patient()),
      403,
      'forbidden',
    );
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Observation`).set('Authorization', readOnly),
      403,
      'forbidden',
    );
    expectOperationOutcome(
      await request(t.app).delete(`${BASE}/Patient/${created.id}`).set('Authorization', readOnly),
      403,
      'forbidden',
    );
  });

  it('keeps projects apart: ids of other projects are 404', async () => {
    const created = await create(patient());
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient/${created.id}`).set('Authorization', auth('p2')),
      404,
      'not-found',
    );
    const search = await request(t.app).get(`${BASE}/Patient`).set('Authorization', auth('p2'));
    expect(search.body.entry).toHaveLength(0);
  });
});

describe('CRUD', () => {
  it('creates with a server-assigned id, Location and ETag', async () => {
    const res = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', auth())
      .set('Content-Type', 'application/fhir+json')
      .send(
        JSON.stringify(
          patient({ id: 'client-chosen', meta: { versionId: '99', lastUpdated: '2000-01-01T00:00:00Z' } }),
        ),
      );
    expect(res.status).toBe(201);
    expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
    expect(res.body.id).not.toBe('client-chosen');
    expect(res.body.meta.versionId).toBe('1');
    expect(res.headers.etag).toBe('W/"1"');
    expect(res.headers.location).toMatch(
      new RegExp(`^http://127\\.0\\.0\\.1:\\d+${BASE}/Patient/${res.body.id}/_history/1$`),
    );
    const vread = await request(t.app)
      .get(new URL(res.headers.location as string).pathname)
      .set('Authorization', auth());
    expect(vread.status).toBe(200);
    expect(vread.headers.etag).toBe('W/"1"');
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient/${res.body.id}/_history/9`).set('Authorization', auth()),
      404,
    );
    expectOperationOutcome(
      await request(t.app).delete(new URL(res.headers.location as string).pathname),
      405,
    );
  });

  it('reads with ETag, updates with version checks, deletes', async () => {
    const created = await create(patient());
    const url = `${BASE}/Patient/${created.id}`;
    const read = await request(t.app).get(url).set('Authorization', auth());
    expect(read.status).toBe(200);
    expect(read.headers.etag).toBe('W/"1"');
    expect(read.headers['last-modified']).toBeDefined();
    expect(read.body.name[0].family).toBe('Smith');

    const updated = await request(t.app)
      .put(url)
      .set('Authorization', auth())
      .set('If-Match', 'W/"1"')
      .send({ ...read.body, active: true });
    expect(updated.status).toBe(200);
    expect(updated.body.meta.versionId).toBe('2');
    expect(updated.headers.etag).toBe('W/"2"');

    const stale = await request(t.app)
      .put(url)
      .set('Authorization', auth())
      .set('If-Match', 'W/"1"')
      .send(read.body);
    expectOperationOutcome(stale, 412);
    expectOperationOutcome(
      await request(t.app).delete(url).set('Authorization', auth()).set('If-Match', 'W/"1"'),
      412,
    );
    expectOperationOutcome(
      await request(t.app).put(url).set('Authorization', auth()).set('If-Match', 'garbage "x'),
      400,
    );

    expect((await request(t.app).delete(url).set('Authorization', auth())).status).toBe(204);
    expectOperationOutcome(await request(t.app).get(url).set('Authorization', auth()), 410);
    expect((await request(t.app).delete(url).set('Authorization', auth())).status).toBe(204);
  });

  it('creates through PUT with a client id and rejects id mismatches', async () => {
    const res = await request(t.app)
      .put(`${BASE}/Patient/chosen-1`)
      .set('Authorization', auth())
      .send(patient({ id: 'chosen-1' }));
    expect(res.status).toBe(201);
    expect(res.body.id).toBe('chosen-1');
    expectOperationOutcome(
      await request(t.app)
        .put(`${BASE}/Patient/chosen-1`)
        .set('Authorization', auth())
        .send(patient({ id: 'other' })),
      400,
    );
    expectOperationOutcome(
      await request(t.app).put(`${BASE}/Patient/chosen-1`).set('Authorization', auth()).send(patient()),
      400,
    );
  });

  it('answers 404 for unknown types and ids, 400 for bad ids', async () => {
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient/nope`).set('Authorization', auth()),
      404,
      'not-found',
    );
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patientz/1`).set('Authorization', auth()),
      404,
      'not-found',
    );
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patientz`).set('Authorization', auth()),
      404,
      'not-found',
    );
    expectOperationOutcome(
      await request(t.app).delete(`${BASE}/Patient/nope`).set('Authorization', auth()),
      404,
    );
    expectOperationOutcome(await request(t.app).get(`${BASE}/Patient/a_b`).set('Authorization', auth()), 400);
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient/1/2/3`).set('Authorization', auth()),
      404,
    );
  });

  it('answers 405 for wrong methods on known routes', async () => {
    const created = await create(patient());
    for (const res of [
      await request(t.app).patch(`${BASE}/Patient`).set('Authorization', auth()).send([]),
      await request(t.app).post(`${BASE}/Patient/${created.id}`).set('Authorization', auth()).send(patient()),
      await request(t.app).delete(`${BASE}/Patient`).set('Authorization', auth()),
      await request(t.app).put(`${BASE}/Patient`).set('Authorization', auth()).send(patient()),
      await request(t.app).get(`${BASE}/`).set('Authorization', auth()),
      await request(t.app).put(`${BASE}/metadata`),
    ]) {
      expectOperationOutcome(res, 405, 'not-supported');
      expect(res.headers.allow).toBeDefined();
    }
  });

  it('validates bodies: JSON object, R4 resourceType matching the URL, media type, size', async () => {
    const post = () => request(t.app).post(`${BASE}/Patient`).set('Authorization', auth());
    expectOperationOutcome(
      await post().set('Content-Type', 'application/json').send('{"resourceType":'),
      400,
    );
    expectOperationOutcome(await post().set('Content-Type', 'application/json').send('[1,2]'), 400);
    expectOperationOutcome(await post().set('Content-Type', 'application/json').send('"text"'), 400);
    expectOperationOutcome(await post().send({ resourceType: 'Observation', status: 'final' }), 400);
    expectOperationOutcome(await post().send({ resourceType: 'NotAType' }), 400);
    expectOperationOutcome(await post().send({ name: [] }), 400);
    expectOperationOutcome(await post().set('Content-Type', 'application/json').send(''), 400);
    expectOperationOutcome(await post().set('Content-Type', 'text/plain').send('hello'), 415);
    expectOperationOutcome(await post().set('Content-Type', 'application/fhir+xml').send('<Patient/>'), 415);
    expect(
      (await post().set('Content-Type', 'application/json; charset=utf-8').send(JSON.stringify(patient())))
        .status,
    ).toBe(201);

    const small = await createTestApp({ bodyLimit: 200 });
    const big = await request(small.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', auth())
      .send(patient({ text: { status: 'generated', div: 'x'.repeat(1000) } }));
    expectOperationOutcome(big, 413);
    await small.storage.close();
  });

  it('honours Prefer: return', async () => {
    const minimal = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', auth())
      .set('Prefer', 'return=minimal')
      .send(patient());
    expect(minimal.status).toBe(201);
    expect(minimal.text).toBe('');
    expect(minimal.headers.location).toBeDefined();
    const outcome = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', auth())
      .set('Prefer', 'return=OperationOutcome')
      .send(patient());
    expect(outcome.body.resourceType).toBe('OperationOutcome');
  });

  it('answers writes without their resource by default with defaultReturn: minimal, unless asked', async () => {
    const quiet = await createTestApp({ defaultReturn: 'minimal' });
    const post = (prefer?: string) => {
      const req = request(quiet.app).post(`${BASE}/Patient`).set('Authorization', auth());
      if (prefer) req.set('Prefer', prefer);
      return req.send(patient());
    };
    const created = await post();
    expect(created.status).toBe(201);
    expect(created.text).toBe('');
    const location = created.headers.location as string;
    expect(location).toMatch(/\/Patient\/[^/]+\/_history\/1$/);
    const id = location.split('/').at(-3)!;
    const updated = await request(quiet.app)
      .put(`${BASE}/Patient/${id}`)
      .set('Authorization', auth())
      .send(patient({ id, active: false }));
    expect(updated.status).toBe(200);
    expect(updated.text).toBe('');
    expect(updated.headers.etag).toBe('W/"2"');
    const asked = await post('return=representation');
    expect(asked.status).toBe(201);
    expect(asked.body.resourceType).toBe('Patient');
    expect((await post('return=OperationOutcome')).body.resourceType).toBe('OperationOutcome');
    // The default router still answers with the resource.
    expect((await create(patient())).resourceType).toBe('Patient');
    await quiet.storage.close();
  });

  it('never loses a write under concurrent updates', async () => {
    const created = await create(patient());
    const url = `${BASE}/Patient/${created.id}`;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        request(t.app)
          .put(url)
          .set('Authorization', auth())
          .send(patient({ id: created.id, birthDate: `2000-01-${String(i + 1).padStart(2, '0')}` })),
      ),
    );
    for (const r of results) expect(r.status).toBe(200);
    const versions = results.map((r) => Number(r.body.meta.versionId)).sort((a, b) => a - b);
    expect(versions).toEqual(Array.from({ length: 20 }, (_, i) => i + 2));
    const final = await request(t.app).get(url).set('Authorization', auth());
    expect(final.body.meta.versionId).toBe('21');
  });

  it('supports conditional create with If-None-Exist', async () => {
    const body = patient({ identifier: [{ system: 'urn:mrn', value: '42' }] });
    const first = await request(t.app).post(`${BASE}/Patient`).set('Authorization', auth()).send(body);
    expect(first.status).toBe(201);
    const second = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', auth())
      .set('If-None-Exist', 'identifier=urn:mrn|42')
      .send(body);
    expect(second.status).toBe(200);
    expect(second.body.id).toBe(first.body.id);
  });
});

describe('search', () => {
  it('returns a searchset with absolute paging links, and a total when _total asks', async () => {
    for (let i = 0; i < 5; i++) await create(patient());
    const res = await request(t.app).get(`${BASE}/Patient?_count=2`).set('Authorization', auth());
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
    expect(res.body).toMatchObject({ resourceType: 'Bundle', type: 'searchset' });
    expect(res.body).not.toHaveProperty('total');
    const counted = await request(t.app)
      .get(`${BASE}/Patient?_count=2&_total=accurate`)
      .set('Authorization', auth());
    expect(counted.body).toMatchObject({ total: 5, entry: [{}, {}] });
    expect(res.body.entry).toHaveLength(2);
    expect(res.body.entry[0].fullUrl).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:\\d+${BASE}/Patient/`));
    const next = res.body.link.find((l: { relation: string }) => l.relation === 'next').url as string;
    expect(next).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:\\d+${BASE}/Patient\\?`));
    const seen = new Set(res.body.entry.map((e: { resource: { id: string } }) => e.resource.id));
    let url: string | undefined = next;
    while (url) {
      const page: request.Response = await request(t.app)
        .get(new URL(url).pathname + new URL(url).search)
        .set('Authorization', auth());
      expect(page.status).toBe(200);
      for (const e of page.body.entry) seen.add(e.resource.id);
      url = page.body.link.find((l: { relation: string }) => l.relation === 'next')?.url;
    }
    expect(seen.size).toBe(5);
    const count = await request(t.app).get(`${BASE}/Patient?_summary=count`).set('Authorization', auth());
    expect(count.body.total).toBe(5);
    expect(count.body.entry).toHaveLength(0);
  });

  it('filters by _id, _lastUpdated, patient references and sorts', async () => {
    const a = await create(patient());
    const b = await create(patient());
    const obsA = await create({
      resourceType: 'Observation',
      status: 'final',
      code: { text: 'x' },
      subject: { reference: `Patient/${a.id}` },
    });
    await create({
      resourceType: 'Observation',
      status: 'final',
      code: { text: 'x' },
      subject: { reference: `Patient/${b.id}` },
    });

    const byId = await request(t.app).get(`${BASE}/Patient?_id=${a.id},nope`).set('Authorization', auth());
    expect(byId.body.entry).toHaveLength(1);
    for (const q of [
      `patient=${a.id}`,
      `patient=Patient/${a.id}`,
      `subject=Patient/${a.id}`,
      `subject:Patient=${a.id}`,
    ]) {
      const res = await request(t.app).get(`${BASE}/Observation?${q}`).set('Authorization', auth());
      expect(res.status).toBe(200);
      expect(res.body.entry).toHaveLength(1);
      expect(res.body.entry[0].resource.id).toBe(obsA.id);
    }
    const future = await request(t.app)
      .get(`${BASE}/Patient?_lastUpdated=gt2999`)
      .set('Authorization', auth());
    expect(future.body.entry).toHaveLength(0);
    const past = await request(t.app)
      .get(`${BASE}/Patient?_lastUpdated=ge2020-01-01T00:00:00Z`)
      .set('Authorization', auth());
    expect(past.body.entry).toHaveLength(2);
    const desc = await request(t.app).get(`${BASE}/Patient?_sort=-_lastUpdated`).set('Authorization', auth());
    expect(desc.body.entry[0].resource.id).toBe(b.id);
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient?_lastUpdated=xx2020`).set('Authorization', auth()),
      400,
    );
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient?_count=-3`).set('Authorization', auth()),
      400,
    );
  });

  it('rejects unknown parameters with 400, and ignores them under handling=lenient', async () => {
    await create(patient());
    const strict = await request(t.app).get(`${BASE}/Patient?nickname=Smith`).set('Authorization', auth());
    expectOperationOutcome(strict, 400, 'invalid');
    expect(strict.body.issue[0].expression).toEqual(['nickname']);
    const lenient = await request(t.app)
      .get(`${BASE}/Patient?nickname=Smith`)
      .set('Authorization', auth())
      .set('Prefer', 'handling=lenient');
    expect(lenient.status).toBe(200);
    expect(
      lenient.body.entry.filter((e: { search: { mode: string } }) => e.search.mode === 'match'),
    ).toHaveLength(1);
    const outcome = lenient.body.entry.find((e: { search: { mode: string } }) => e.search.mode === 'outcome');
    expect(outcome.resource.issue[0].code).toBe('not-supported');
    expect(lenient.body.link[0].url).not.toContain('nickname');
    expectOperationOutcome(
      await request(t.app)
        .get(`${BASE}/Patient?nickname=Smith`)
        .set('Authorization', auth())
        .set('Prefer', 'handling=strict'),
      400,
    );
  });

  it('says why each parameter was ignored: one without a value, one not supported', async () => {
    await create(patient());
    const outcomeOf = (res: request.Response) =>
      res.body.entry.find((e: { search: { mode: string } }) => e.search.mode === 'outcome')?.resource;
    // An empty value is ignored under either handling, and said to be empty, not unsupported.
    const empty = await request(t.app).get(`${BASE}/Patient?name=`).set('Authorization', auth());
    expect(empty.status).toBe(200);
    // Not a filter: the one Patient matches.
    expect(
      empty.body.entry.filter((e: { search: { mode: string } }) => e.search.mode === 'match'),
    ).toHaveLength(1);
    expect(outcomeOf(empty).issue).toEqual([
      expect.objectContaining({
        severity: 'warning',
        code: 'informational',
        details: { text: expect.stringMatching(/^Search parameter name has no value and was ignored$/) },
        expression: ['name'],
      }),
    ]);
    const both = await request(t.app)
      .get(`${BASE}/Patient?name=&nickname=Smith`)
      .set('Authorization', auth())
      .set('Prefer', 'handling=lenient');
    expect(both.status).toBe(200);
    const [noValue, unsupported] = outcomeOf(both).issue as { code: string; details: { text: string } }[];
    expect(noValue!.details.text).toMatch(/name has no value/);
    expect(noValue!.details.text).not.toMatch(/not supported/);
    expect(unsupported).toMatchObject({ code: 'not-supported', expression: ['nickname'] });
    expect(unsupported!.details.text).toMatch(/nickname is not supported/);
  });
});

describe('batch and transaction', () => {
  const transaction = (entries: Record<string, unknown>[], type = 'transaction') => ({
    resourceType: 'Bundle',
    type,
    entry: entries,
  });

  it('resolves urn:uuid fullUrls and rewrites references in a transaction', async () => {
    const pid = 'urn:uuid:7c2d3d3a-8a7a-4e55-9d0b-9c1f1a7b0c11';
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth())
      .set('Content-Type', 'application/fhir+json')
      .send(
        JSON.stringify(
          transaction([
            {
              fullUrl: 'urn:uuid:0f0e0d0c-0000-4000-8000-000000000001',
              resource: {
                resourceType: 'Encounter',
                status: 'finished',
                class: { code: 'AMB' },
                subject: { reference: pid },
              },
              request: { method: 'POST', url: 'Encounter' },
            },
            { fullUrl: pid, resource: patient(), request: { method: 'POST', url: 'Patient' } },
            {
              resource: {
                resourceType: 'Observation',
                status: 'final',
                code: { text: 'x' },
                subject: { reference: pid },
                encounter: { reference: 'urn:uuid:0f0e0d0c-0000-4000-8000-000000000001' },
              },
              request: { method: 'POST', url: 'Observation' },
            },
          ]),
        ),
      );
    expect(res.status).toBe(200);
    expect(res.body.type).toBe('transaction-response');
    const [enc, pat, obs] = res.body.entry;
    expect(enc.response.status).toMatch(/^201/);
    expect(pat.response.location).toMatch(/^Patient\/[^/]+\/_history\/1$/);
    const patientId = pat.resource.id as string;
    expect(enc.resource.subject.reference).toBe(`Patient/${patientId}`);
    expect(obs.resource.encounter.reference).toBe(`Encounter/${enc.resource.id}`);
    const search = await request(t.app)
      .get(`${BASE}/Observation?patient=${patientId}`)
      .set('Authorization', auth());
    expect(search.body.entry).toHaveLength(1);
  });

  it('answers each write with fullUrl, the stored resource and its response, escaped and in order', async () => {
    const baseUrl = 'https://example.org/fhir "R4" é';
    const escaped = await createTestApp({ baseUrl });
    await request(escaped.app)
      .put(`${BASE}/Patient/kept`)
      .set('Authorization', auth())
      .send(patient({ id: 'kept' }));
    for (const [type, prefer] of [
      ['transaction', undefined],
      ['batch', undefined],
      ['transaction', 'return=minimal'],
    ] as const) {
      const post = request(escaped.app).post(BASE).set('Authorization', auth());
      if (prefer) post.set('Prefer', prefer);
      const res = await post.send(
        transaction(
          [
            {
              fullUrl: 'urn:uuid:1',
              resource: patient({ name: [{ family: 'Zoë "Q"' }] }),
              request: { method: 'POST', url: 'Patient' },
            },
            {
              resource: patient({ id: 'kept', active: true }),
              request: { method: 'PUT', url: 'Patient/kept' },
            },
          ],
          type,
        ),
      );
      expect(res.status).toBe(200);
      type Answered = { fullUrl: string; resource?: unknown; response: Record<string, unknown> };
      for (const [i, entry] of (res.body.entry as Answered[]).entries()) {
        expect(Object.keys(entry)).toEqual(
          prefer ? ['fullUrl', 'response'] : ['fullUrl', 'resource', 'response'],
        );
        expect(Object.keys(entry.response)).toEqual(['status', 'location', 'etag', 'lastModified']);
        const id = i === 0 ? entry.fullUrl.split('/').pop()! : 'kept';
        expect(entry.fullUrl).toBe(`${baseUrl}${BASE}/Patient/${id}`);
        const read = await request(escaped.app).get(`${BASE}/Patient/${id}`).set('Authorization', auth());
        const { versionId, lastUpdated } = read.body.meta as { versionId: string; lastUpdated: string };
        expect(entry.response).toEqual({
          status: i === 0 ? '201 Created' : '200 OK',
          location: `Patient/${id}/_history/${versionId}`,
          etag: `W/"${versionId}"`,
          lastModified: lastUpdated,
        });
        if (!prefer) expect(entry.resource).toEqual(read.body);
      }
    }
  });

  it('leaves the resources out of Bundle entries by default with defaultReturn: minimal, but not the reads', async () => {
    const quiet = await createTestApp({ defaultReturn: 'minimal' });
    await request(quiet.app)
      .put(`${BASE}/Patient/known`)
      .set('Authorization', auth())
      .send(patient({ id: 'known' }));
    for (const [type, prefer, withResource] of [
      ['transaction', undefined, false],
      ['batch', undefined, false],
      ['transaction', 'return=representation', true],
      ['batch', 'return=minimal', false],
    ] as const) {
      const req = request(quiet.app).post(BASE).set('Authorization', auth());
      if (prefer) req.set('Prefer', prefer);
      const res = await req.send(
        transaction(
          [
            { resource: patient(), request: { method: 'POST', url: 'Patient' } },
            { request: { method: 'GET', url: 'Patient/known' } },
          ],
          type,
        ),
      );
      expect(res.status).toBe(200);
      const [written, read] = res.body.entry as { resource?: { id: string }; response: { status: string } }[];
      expect(written!.response.status).toBe('201 Created');
      expect('resource' in written!).toBe(withResource);
      // `Prefer: return=` is about writes: a read answers its resource either way.
      expect(read!.resource?.id).toBe('known');
    }
    await quiet.storage.close();
  });

  it('is all-or-nothing', async () => {
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth())
      .send(
        transaction([
          { resource: patient(), request: { method: 'POST', url: 'Patient' } },
          { resource: { resourceType: 'Patient', id: 'x' }, request: { method: 'PUT', url: 'Patient/y' } },
        ]),
      );
    expectOperationOutcome(res, 400);
    expect(res.body.issue[0].expression).toEqual(['Bundle.entry[1]']);
    expect(
      (await request(t.app).get(`${BASE}/Patient?_total=accurate`).set('Authorization', auth())).body.total,
    ).toBe(0);

    const created = await create(patient());
    const conflict = await request(t.app)
      .post(BASE)
      .set('Authorization', auth())
      .send(
        transaction([
          { resource: patient(), request: { method: 'POST', url: 'Patient' } },
          {
            resource: patient({ id: created.id }),
            request: { method: 'PUT', url: `Patient/${created.id}`, ifMatch: 'W/"7"' },
          },
        ]),
      );
    expectOperationOutcome(conflict, 412);
    expect(
      (await request(t.app).get(`${BASE}/Patient?_total=accurate`).set('Authorization', auth())).body.total,
    ).toBe(1);
  });

  it('handles conditional creates, deletes and reads in a transaction', async () => {
    const existing = await create(patient({ identifier: [{ system: 'urn:mrn', value: '7' }] }));
    const other = await create(patient());
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth())
      .send(
        transaction([
          {
            fullUrl: 'urn:uuid:11111111-1111-4111-8111-111111111111',
            resource: patient({ identifier: [{ system: 'urn:mrn', value: '7' }] }),
            request: { method: 'POST', url: 'Patient', ifNoneExist: 'identifier=urn:mrn|7' },
          },
          {
            resource: {
              resourceType: 'Observation',
              status: 'final',
              code: { text: 'x' },
              subject: { reference: 'urn:uuid:11111111-1111-4111-8111-111111111111' },
            },
            request: { method: 'POST', url: 'Observation' },
          },
          { request: { method: 'DELETE', url: `Patient/${other.id}` } },
          { request: { method: 'GET', url: `Patient/${existing.id}` } },
          { request: { method: 'GET', url: 'Observation?patient=Patient/' + existing.id } },
        ]),
      );
    expect(res.status).toBe(200);
    const [cond, obs, del, read, search] = res.body.entry;
    expect(cond.response.status).toMatch(/^200/);
    expect(cond.resource.id).toBe(existing.id);
    expect(obs.resource.subject.reference).toBe(`Patient/${existing.id}`);
    expect(del.response.status).toMatch(/^204/);
    expect(read.resource.id).toBe(existing.id);
    expect(search.resource.entry).toHaveLength(1);
    expectOperationOutcome(
      await request(t.app).get(`${BASE}/Patient/${other.id}`).set('Authorization', auth()),
      410,
    );
  });

  it("fails a transaction whose DELETE names an unknown id or another project's: 404, nothing written", async () => {
    const elsewhere = await create(patient(), auth('p2'));
    for (const id of ['missing', elsewhere.id]) {
      const res = await request(t.app)
        .post(BASE)
        .set('Authorization', auth())
        .send(
          transaction([
            { resource: patient(), request: { method: 'POST', url: 'Patient' } },
            { request: { method: 'DELETE', url: `Patient/${id}` } },
          ]),
        );
      expectOperationOutcome(res, 404, 'not-found');
      expect(res.body.issue[0].expression).toEqual(['Bundle.entry[1]']);
      expect((await t.storage.searchResources('p1', 'Patient')).total).toBe(0);
    }
    expect((await t.storage.readResource('p2', 'Patient', elsewhere.id)).id).toBe(elsewhere.id);
  });

  it('answers DELETE alike plainly, in a batch and in a transaction', async () => {
    const gone = await create(patient());
    expect(
      (await request(t.app).delete(`${BASE}/Patient/${gone.id}`).set('Authorization', auth())).status,
    ).toBe(204);
    const elsewhere = await create(patient(), auth('p2'));
    // [url, If-Match, expected status]: unknown ids and other projects' are 404; deleting a deleted
    // resource again is 204, but 410 with If-Match (no version left to match).
    const cases: [string, string | undefined, number][] = [
      ['Patient/missing', undefined, 404],
      ['Patient/missing', 'W/"1"', 404],
      [`Patient/${elsewhere.id}`, undefined, 404],
      [`Patient/${gone.id}`, undefined, 204],
      [`Patient/${gone.id}`, 'W/"2"', 410],
    ];
    for (const [url, ifMatch, status] of cases) {
      let plain = request(t.app).delete(`${BASE}/${url}`).set('Authorization', auth());
      if (ifMatch) plain = plain.set('If-Match', ifMatch);
      expect((await plain).status, `plain ${url} ${ifMatch}`).toBe(status);
      const entry = { request: { method: 'DELETE', url, ...(ifMatch ? { ifMatch } : {}) } };
      const batch = await request(t.app)
        .post(BASE)
        .set('Authorization', auth())
        .send(transaction([entry], 'batch'));
      expect(batch.body.entry[0].response.status.slice(0, 3), `batch ${url} ${ifMatch}`).toBe(String(status));
      const tx = await request(t.app)
        .post(BASE)
        .set('Authorization', auth())
        .send(transaction([entry]));
      if (status === 204) expect(tx.body.entry[0].response.status.slice(0, 3)).toBe('204');
      else expectOperationOutcome(tx, status, status === 404 ? 'not-found' : 'deleted');
    }
    expect((await t.storage.readResource('p2', 'Patient', elsewhere.id)).meta.versionId).toBe('1');
  });

  it('processes batch entries independently', async () => {
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth())
      .send(
        transaction(
          [
            { resource: patient(), request: { method: 'POST', url: 'Patient' } },
            { request: { method: 'GET', url: 'Patient/missing' } },
            { resource: { resourceType: 'Patient' }, request: { method: 'POST', url: 'Observation' } },
            { request: { method: 'HEAD', url: 'Patient/x' } },
            { resource: patient(), request: { method: 'POST', url: 'Unknown' } },
          ],
          'batch',
        ),
      );
    expect(res.status).toBe(200);
    expect(res.body.type).toBe('batch-response');
    const statuses = res.body.entry.map((e: { response: { status: string } }) =>
      e.response.status.slice(0, 3),
    );
    expect(statuses).toEqual(['201', '404', '400', '405', '404']);
    expect(res.body.entry[1].response.outcome.resourceType).toBe('OperationOutcome');
    expect(
      (await request(t.app).get(`${BASE}/Patient?_total=accurate`).set('Authorization', auth())).body.total,
    ).toBe(1);
  });

  it('rejects bad bundles', async () => {
    const post = (body: unknown) =>
      request(t.app)
        .post(BASE)
        .set('Authorization', auth())
        .send(body as object);
    expectOperationOutcome(await post({ resourceType: 'Bundle', type: 'collection', entry: [] }), 400);
    expectOperationOutcome(await post(patient()), 400);
    expectOperationOutcome(await post({ resourceType: 'Bundle', type: 'batch', entry: {} }), 400);
    const small = await createTestApp({ maxBundleEntries: 2 });
    const many = await request(small.app)
      .post(BASE)
      .set('Authorization', auth())
      .send(
        transaction(
          [1, 2, 3].map(() => ({ resource: patient(), request: { method: 'POST', url: 'Patient' } })),
        ),
      );
    expectOperationOutcome(many, 413);
    await small.storage.close();
  });

  it('checks access per entry', async () => {
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth('p1', ['system/Patient.*']))
      .send(
        transaction([
          { resource: patient(), request: { method: 'POST', url: 'Patient' } },
          {
            resource: { resourceType: 'Observation', status: 'final', code: {} },
            request: { method: 'POST', url: 'Observation' },
          },
        ]),
      );
    expectOperationOutcome(res, 403, 'forbidden');
  });
});

describe('NDJSON upload', () => {
  it('streams files, loads good lines and reports bad ones by file and line', async () => {
    const good = [patient({ id: 'u1' }), patient({ id: 'u2' }), patient()].map((r) => JSON.stringify(r));
    const fileA =
      [good[0], '{not json', '', good[1], JSON.stringify({ resourceType: 'Nope' })].join('\n') + '\n';
    const fileB = [good[2], JSON.stringify({ resourceType: 'Observation', status: 'final', code: {} })].join(
      '\r\n',
    );
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth())
      .attach('file', Buffer.from(fileA), { filename: 'a.ndjson', contentType: 'application/fhir+ndjson' })
      .attach('file', Buffer.from(fileB), { filename: 'b.ndjson', contentType: 'application/x-ndjson' });
    expect(res.status).toBe(200);
    expect(res.body.resourceType).toBe('OperationOutcome');
    const errors = res.body.issue.filter((i: { severity: string }) => i.severity === 'error');
    expect(errors.map((i: { location: string[] }) => i.location[0])).toEqual(['a.ndjson:2', 'a.ndjson:5']);
    expect((await request(t.app).get(`${BASE}/Patient/u1`).set('Authorization', auth())).status).toBe(200);
    expect(
      (await request(t.app).get(`${BASE}/Patient?_total=accurate`).set('Authorization', auth())).body.total,
    ).toBe(3);
    expect(
      (await request(t.app).get(`${BASE}/Observation?_total=accurate`).set('Authorization', auth())).body
        .total,
    ).toBe(1);
  });

  it('reports forbidden types per line and rejects uploads without files or over limits', async () => {
    const res = await request(t.app)
      .post(BASE)
      .set('Authorization', auth('p1', ['system/Patient.*']))
      .attach(
        'f',
        Buffer.from(`${JSON.stringify(patient())}\n${JSON.stringify({ resourceType: 'Observation' })}\n`),
        'x.ndjson',
      );
    const errors = res.body.issue.filter((i: { severity: string }) => i.severity === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0].code).toBe('forbidden');
    expect(errors[0].location).toEqual(['x.ndjson:2']);

    expectOperationOutcome(await request(t.app).post(BASE).set('Authorization', auth()).field('a', 'b'), 400);
    const small = await createTestApp({ upload: { maxFileSize: 100 } });
    const big = await request(small.app)
      .post(BASE)
      .set('Authorization', auth())
      .attach('f', Buffer.from(`${JSON.stringify(patient())}\n`.repeat(20)), 'big.ndjson');
    expectOperationOutcome(big, 413);
    await small.storage.close();
  });

  it('reports lines longer than the limit and goes on', async () => {
    const small = await createTestApp({ upload: { maxLineLength: 200 } });
    const long = JSON.stringify(patient({ text: { status: 'generated', div: 'y'.repeat(100_000) } }));
    const res = await request(small.app)
      .post(BASE)
      .set('Authorization', auth())
      .attach('f', Buffer.from(`${long}\n${JSON.stringify(patient())}\n`), 'long.ndjson');
    expect(res.status).toBe(200);
    const errors = res.body.issue.filter((i: { severity: string }) => i.severity === 'error');
    expect(errors.map((i: { location: string[] }) => i.location[0])).toEqual(['long.ndjson:1']);
    expect(
      (await request(small.app).get(`${BASE}/Patient?_total=accurate`).set('Authorization', auth())).body
        .total,
    ).toBe(1);
    await small.storage.close();
  });
});

describe('strict mode', () => {
  it('validates writes against the R4 structure definitions in strict projects only', async () => {
    await t.storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
    const strict = auth('strict');
    const bad = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', strict)
      .send(patient({ birthDate: 'yesterday', foo: 1 }));
    expectOperationOutcome(bad, 400);
    expect(bad.body.issue.length).toBeGreaterThanOrEqual(2);
    const ok = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', strict)
      .send(patient({ birthDate: '2000-01-01' }));
    expect(ok.status).toBe(201);
    const missingCode = await request(t.app)
      .post(`${BASE}/Observation`)
      .set('Authorization', strict)
      .send({ resourceType: 'Observation', status: 'final' });
    expectOperationOutcome(missingCode, 400);
    // The same body is fine in a non-strict project.
    expect(
      (
        await request(t.app)
          .post(`${BASE}/Patient`)
          .set('Authorization', auth())
          .send(patient({ foo: 1 }))
      ).status,
    ).toBe(201);
  });

  it('in a strict project, stores clean resources and refuses inherited element names, in Bundles too', async () => {
    await t.storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
    const token = auth('strict');
    const clean = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', token)
      .send({ resourceType: 'Patient', name: [{ family: 'Ok' }], gender: 'female' });
    expect(clean.status).toBe(201);
    const inherited =
      '{"resourceType":"Patient","name":[{"family":"x","constructor":"y"}],"__proto__":{"a":1}}';
    const refused = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', token)
      .set('Content-Type', 'application/fhir+json')
      .send(inherited);
    expectOperationOutcome(refused, 400);
    const expressions = (refused.body.issue as { expression?: string[] }[]).map((i) => i.expression?.[0]);
    expect(expressions).toEqual(expect.arrayContaining(['Patient.__proto__', 'Patient.name[0].constructor']));
    const bundle = await request(t.app)
      .post(BASE)
      .set('Authorization', token)
      .set('Content-Type', 'application/fhir+json')
      .send(
        `{"resourceType":"Bundle","type":"transaction","entry":[` +
          `{"resource":{"resourceType":"Patient","gender":"male"},"request":{"method":"POST","url":"Patient"}},` +
          `{"resource":${inherited},"request":{"method":"POST","url":"Patient"}}]}`,
      );
    expectOperationOutcome(bundle, 400);
    // One OperationOutcome for the whole transaction: each issue names the entry it is about.
    expect(bundle.body.issue.map((i: { expression: string[] }) => i.expression)).toEqual([
      ['Bundle.entry[1].resource.__proto__'],
      ['Bundle.entry[1].resource.name[0].constructor'],
    ]);
    const stored = await request(t.app).get(`${BASE}/Patient?_total=accurate`).set('Authorization', token);
    expect(stored.body.total).toBe(1); // the clean one posted alone; nothing of the refused Bundle
  });

  it('in a strict project, names the failing entry of a transaction in each issue, and not in a batch entry', async () => {
    await t.storage.createProject({ id: 'strict-entries', name: 'Strict', strictMode: true });
    const token = auth('strict-entries');
    const entries = [
      { resource: { resourceType: 'Patient', gender: 'male' }, request: { method: 'POST', url: 'Patient' } },
      {
        resource: { resourceType: 'Patient', gender: 'female' },
        request: { method: 'POST', url: 'Patient' },
      },
      {
        resource: { resourceType: 'Patient', birthDate: '1990-13-45', name: [{ family: 'x', given: [7] }] },
        request: { method: 'POST', url: 'Patient' },
      },
    ];
    const single = await request(t.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', token)
      .send(entries[2]!.resource);
    expectOperationOutcome(single, 400);
    const own = (single.body.issue as { expression: string[] }[]).map((i) => i.expression);
    expect(own).toEqual(expect.arrayContaining([['Patient.birthDate'], ['Patient.name[0].given[0]']]));

    const txn = await request(t.app)
      .post(BASE)
      .set('Authorization', token)
      .send({ resourceType: 'Bundle', type: 'transaction', entry: entries });
    expectOperationOutcome(txn, 400);
    expect((txn.body.issue as { expression: string[] }[]).map((i) => i.expression)).toEqual(
      own.map((expression) => expression.map((e) => e.replace(/^Patient/, 'Bundle.entry[2].resource'))),
    );
    // Everything else about the issues is the validator's own.
    expect((txn.body.issue as Record<string, unknown>[]).map(({ expression: _, ...rest }) => rest)).toEqual(
      (single.body.issue as Record<string, unknown>[]).map(({ expression: _, ...rest }) => rest),
    );

    const batch = await request(t.app)
      .post(BASE)
      .set('Authorization', token)
      .send({ resourceType: 'Bundle', type: 'batch', entry: entries });
    expect(batch.status).toBe(200);
    const failed = batch.body.entry[2].response as {
      status: string;
      outcome: { issue: { expression: string[] }[] };
    };
    expect(failed.status).toBe('400');
    expect(failed.outcome.issue.map((i) => i.expression)).toEqual(own);
  });

  it('uses a custom validator when given, and never for non-strict projects', async () => {
    let calls = 0;
    const custom = await createTestApp({
      validator: () => {
        calls++;
        return [
          {
            severity: 'error',
            code: 'business-rule',
            details: { text: 'no' },
            expression: ['name[0]', 'Patient.gender'],
          },
        ];
      },
    });
    await custom.storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
    const single = await request(custom.app)
      .post(`${BASE}/Patient`)
      .set('Authorization', auth('strict'))
      .send(patient());
    expectOperationOutcome(single, 400, 'business-rule');
    expect(single.body.issue[0].expression).toEqual(['name[0]', 'Patient.gender']);
    // In a transaction both expressions name the entry, whether or not they start with the type.
    const txn = await request(custom.app)
      .post(BASE)
      .set('Authorization', auth('strict'))
      .send({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [{ resource: patient(), request: { method: 'POST', url: 'Patient' } }],
      });
    expectOperationOutcome(txn, 400, 'business-rule');
    expect(txn.body.issue[0].expression).toEqual([
      'Bundle.entry[0].resource.name[0]',
      'Bundle.entry[0].resource.gender',
    ]);
    expect(
      (await request(custom.app).post(`${BASE}/Patient`).set('Authorization', auth()).send(patient())).status,
    ).toBe(201);
    expect(calls).toBe(2);
    await custom.storage.close();
  });
});

describe('fallthrough', () => {
  it('passes unknown paths on when asked to', async () => {
    const storage = memoryStorage();
    const app = express();
    app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, fallthrough: true }));
    app.get(`${BASE}/$export`, (_req, res) => {
      res.status(202).end();
    });
    app.get(`${BASE}/Patient/$export`, (_req, res) => {
      res.status(202).end();
    });
    expect((await request(app).get(`${BASE}/$export`)).status).toBe(202);
    expect((await request(app).get(`${BASE}/Patient/$export`)).status).toBe(202);
    await storage.close();
  });
});

describe('storage errors', () => {
  it('renders a storage conflict as 409 and an invalid record as 400', async () => {
    const { ConflictError, InvalidRecordError } = await import('../../src/storage/errors.js');
    const storage = memoryStorage();
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    const failing = new Proxy(storage, {
      get(target, prop, receiver) {
        if (prop === 'updateResource') return () => Promise.reject(new ConflictError('version conflict'));
        if (prop === 'createResource') return () => Promise.reject(new InvalidRecordError('bad record'));
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    const app = express();
    app.use(BASE, fhirRouter({ storage: failing, authenticate: testAuthenticate, onError: silent }));
    expectOperationOutcome(
      await request(app)
        .put(`${BASE}/Patient/x`)
        .set('Authorization', auth())
        .send(patient({ id: 'x' })),
      409,
      'conflict',
    );
    expectOperationOutcome(
      await request(app).post(`${BASE}/Patient`).set('Authorization', auth()).send(patient()),
      400,
    );
    await storage.close();
  });
});
