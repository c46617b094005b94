import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// PATCH (JSON Patch and FHIRPath Patch), conditional update, delete and read, and Prefer: return,
// over HTTP and as batch and transaction entries, on each store.
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const FHIR_JSON = 'application/fhir+json';
const JSON_PATCH = 'application/json-patch+json';

interface App {
  app: express.Express;
  storage: Storage;
}

type Open = () => Storage | Promise<Storage>;

async function appOver(open: Open, options: Partial<FhirRouterOptions> = {}): Promise<App> {
  const storage = await open();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
  afterTest(() => storage.close());
  const app = express();
  app.use(
    BASE,
    fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  return { app, storage };
}

const patient = (value: string, extra: Record<string, unknown> = {}) => ({
  resourceType: 'Patient',
  identifier: [{ system: 'urn:test', value }],
  name: [{ family: 'Smith', given: ['Ann'] }],
  ...extra,
});

async function create(app: express.Express, resource: Record<string, unknown>, token = auth) {
  const res = await request(app)
    .post(`${BASE}/${String(resource.resourceType)}`)
    .set('Authorization', token)
    .type(FHIR_JSON)
    .send(JSON.stringify(resource));
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { id: string; meta: { versionId: string } } & Record<string, unknown>;
}

function patch(app: express.Express, url: string, body: unknown, type = JSON_PATCH, token = auth) {
  return request(app)
    .patch(`${BASE}/${url}`)
    .set('Authorization', token)
    .type(type)
    .send(JSON.stringify(body));
}

function put(app: express.Express, url: string, body: unknown) {
  return request(app)
    .put(`${BASE}/${url}`)
    .set('Authorization', auth)
    .type(FHIR_JSON)
    .send(JSON.stringify(body));
}

const read = (app: express.Express, url: string) =>
  request(app).get(`${BASE}/${url}`).set('Authorization', auth);

function bundle(type: 'batch' | 'transaction', entry: unknown[]) {
  return { resourceType: 'Bundle', type, entry };
}

function postBundle(app: express.Express, body: unknown) {
  return request(app).post(BASE).set('Authorization', auth).type(FHIR_JSON).send(JSON.stringify(body));
}

const binary = (ops: unknown[]) => ({
  resourceType: 'Binary',
  contentType: JSON_PATCH,
  data: Buffer.from(JSON.stringify(ops)).toString('base64'),
});

const operation = (...parts: Record<string, unknown>[]) => ({ name: 'operation', part: parts });
const parameters = (...operations: Record<string, unknown>[]) => ({
  resourceType: 'Parameters',
  parameter: operations,
});

function expectIssue(res: request.Response, status: number, code?: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.resourceType).toBe('OperationOutcome');
  if (code) expect(res.body.issue[0].code).toBe(code);
}

async function countOf(app: express.Express, query: string): Promise<number> {
  const res = await read(app, `${query}${query.includes('?') ? '&' : '?'}_summary=count`);
  expect(res.status).toBe(200);
  return res.body.total as number;
}

function suite(name: string, open: Open): void {
  describe(`PATCH and conditional interactions: ${name}`, () => {
    it('applies a JSON Patch, honours If-Match and Prefer: return, and changes nothing when it fails', async () => {
      const { app } = await appOver(open);
      const p = await create(app, patient('jp'));
      const ok = await patch(app, `Patient/${p.id}`, [
        { op: 'replace', path: '/name/0/family', value: 'Jones' },
        { op: 'add', path: '/active', value: true },
        { op: 'test', path: '/identifier/0/value', value: 'jp' },
      ]);
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(ok.headers.etag).toBe('W/"2"');
      expect(ok.body).toMatchObject({ id: p.id, active: true, meta: { versionId: '2' } });
      expect(ok.body.name[0].family).toBe('Jones');

      // If-Match: a stale version is a 412, the current one applies.
      const stale = await patch(app, `Patient/${p.id}`, [
        { op: 'add', path: '/gender', value: 'female' },
      ]).set('If-Match', 'W/"1"');
      expectIssue(stale, 412);
      const current = await patch(app, `Patient/${p.id}`, [{ op: 'add', path: '/gender', value: 'female' }])
        .set('If-Match', 'W/"2"')
        .set('Prefer', 'return=minimal');
      expect(current.status).toBe(200);
      expect(current.text).toBe('');
      expect(current.headers.etag).toBe('W/"3"');
      const outcome = await patch(app, `Patient/${p.id}`, [{ op: 'remove', path: '/gender' }]).set(
        'Prefer',
        'return=OperationOutcome',
      );
      expect(outcome.status).toBe(200);
      expect(outcome.body.resourceType).toBe('OperationOutcome');

      // Failures: nothing written.
      expectIssue(await patch(app, `Patient/${p.id}`, [{ op: 'replace', path: '/id', value: 'other' }]), 422);
      expectIssue(
        await patch(app, `Patient/${p.id}`, [{ op: 'replace', path: '/resourceType', value: 'Group' }]),
        422,
      );
      expectIssue(await patch(app, `Patient/${p.id}`, [{ op: 'test', path: '/active', value: false }]), 422);
      expectIssue(await patch(app, `Patient/${p.id}`, [{ op: 'remove', path: '/birthDate' }]), 422);
      expectIssue(await patch(app, `Patient/${p.id}`, { op: 'remove', path: '/active' }), 400);
      expectIssue(await patch(app, `Patient/${p.id}`, [{ op: 'jump', path: '/active' }]), 400);
      expectIssue(
        await patch(app, `Patient/${p.id}`, [{ op: 'add', path: '/__proto__/polluted', value: 1 }]),
        400,
      );
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expectIssue(await patch(app, `Patient/${p.id}`, [], 'text/plain'), 415);
      expectIssue(await patch(app, 'Patient/missing', []), 404);
      const after = await read(app, `Patient/${p.id}`);
      expect(after.body.meta.versionId).toBe('4');
      expect(after.body.active).toBe(true);
    });

    it('applies a FHIRPath Patch: add, insert, delete, replace, move', async () => {
      const { app } = await appOver(open);
      const p = await create(
        app,
        patient('fp', {
          telecom: [
            { system: 'phone', value: '555' },
            { system: 'email', value: 'a@example.org' },
          ],
          deceasedBoolean: false,
          birthDate: '1970-01-01',
        }),
      );
      const res = await patch(
        app,
        `Patient/${p.id}`,
        parameters(
          operation(
            { name: 'type', valueCode: 'add' },
            { name: 'path', valueString: 'Patient' },
            { name: 'name', valueString: 'identifier' },
            { name: 'value', valueIdentifier: { system: 'urn:other', value: 'x' } },
          ),
          operation(
            { name: 'type', valueCode: 'add' },
            { name: 'path', valueString: 'Patient' },
            { name: 'name', valueString: 'gender' },
            { name: 'value', valueCode: 'female' },
          ),
          operation(
            { name: 'type', valueCode: 'insert' },
            { name: 'path', valueString: 'Patient.name[0].given' },
            { name: 'index', valueInteger: 0 },
            { name: 'value', valueString: 'Zoe' },
          ),
          operation(
            { name: 'type', valueCode: 'delete' },
            { name: 'path', valueString: "Patient.telecom.where(system = 'phone')" },
          ),
          operation({ name: 'type', valueCode: 'delete' }, { name: 'path', valueString: 'Patient.photo' }),
          operation(
            { name: 'type', valueCode: 'replace' },
            { name: 'path', valueString: 'Patient.birthDate' },
            { name: 'value', valueDate: '1971-02-03' },
          ),
          operation(
            { name: 'type', valueCode: 'replace' },
            { name: 'path', valueString: 'Patient.deceased' },
            { name: 'value', valueDateTime: '2020-01-01' },
          ),
          operation(
            { name: 'type', valueCode: 'move' },
            { name: 'path', valueString: 'Patient.identifier' },
            { name: 'source', valueInteger: 1 },
            { name: 'destination', valueInteger: 0 },
          ),
          operation(
            { name: 'type', valueCode: 'add' },
            { name: 'path', valueString: 'Patient' },
            { name: 'name', valueString: 'contact' },
            {
              name: 'value',
              part: [
                { name: 'gender', valueCode: 'male' },
                { name: 'name', valueHumanName: { family: 'Kin' } },
              ],
            },
          ),
        ),
        FHIR_JSON,
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.identifier).toEqual([
        { system: 'urn:other', value: 'x' },
        { system: 'urn:test', value: 'fp' },
      ]);
      expect(res.body.gender).toBe('female');
      expect(res.body.name[0].given).toEqual(['Zoe', 'Ann']);
      expect(res.body.telecom).toEqual([{ system: 'email', value: 'a@example.org' }]);
      expect(res.body.birthDate).toBe('1971-02-03');
      expect(res.body.deceasedBoolean).toBeUndefined();
      expect(res.body.deceasedDateTime).toBe('2020-01-01');
      expect(res.body.contact).toEqual([{ gender: 'male', name: { family: 'Kin' } }]);

      // An operation that cannot apply, or a malformed one: 422 / 400, nothing written.
      const several = parameters(
        operation(
          { name: 'type', valueCode: 'replace' },
          { name: 'path', valueString: 'Patient.identifier' },
          { name: 'value', valueIdentifier: { value: 'y' } },
        ),
      );
      expectIssue(await patch(app, `Patient/${p.id}`, several, FHIR_JSON), 422, 'invalid');
      const changeId = parameters(
        operation(
          { name: 'type', valueCode: 'replace' },
          { name: 'path', valueString: 'Patient.id' },
          { name: 'value', valueId: 'other' },
        ),
      );
      expectIssue(await patch(app, `Patient/${p.id}`, changeId, FHIR_JSON), 422);
      expectIssue(
        await patch(
          app,
          `Patient/${p.id}`,
          parameters(operation({ name: 'type', valueCode: 'add' })),
          FHIR_JSON,
        ),
        400,
      );
      const proto = parameters(
        operation(
          { name: 'type', valueCode: 'add' },
          { name: 'path', valueString: 'Patient' },
          { name: 'name', valueString: 'constructor' },
          { name: 'value', valueString: 'x' },
        ),
      );
      expectIssue(await patch(app, `Patient/${p.id}`, proto, FHIR_JSON), 400);
      expectIssue(await patch(app, `Patient/${p.id}`, patient('not-a-patch'), FHIR_JSON), 400);
      expect((await read(app, `Patient/${p.id}`)).body.meta.versionId).toBe('2');
    });

    it('validates the patched resource in a strict project, and needs the update right', async () => {
      const { app } = await appOver(open);
      const strictAuth = testToken({ projectId: 'strict', scopes: ['system/*.*'] });
      const p = await create(app, patient('strict'), strictAuth);
      const bad = await patch(
        app,
        `Patient/${p.id}`,
        [{ op: 'add', path: '/birthDate', value: 'yesterday' }],
        JSON_PATCH,
        strictAuth,
      );
      expectIssue(bad, 400);
      const unknown = await patch(
        app,
        `Patient/${p.id}`,
        [{ op: 'add', path: '/colour', value: 'x' }],
        JSON_PATCH,
        strictAuth,
      );
      expectIssue(unknown, 400);
      const good = await patch(
        app,
        `Patient/${p.id}`,
        [{ op: 'add', path: '/gender', value: 'other' }],
        JSON_PATCH,
        strictAuth,
      );
      expect(good.status).toBe(200);
      expect(good.body.meta.versionId).toBe('2');

      const q = await create(app, patient('rights'));
      const readOnly = testToken({ projectId: 'p1', scopes: ['system/Patient.rs'] });
      expectIssue(await patch(app, `Patient/${q.id}`, [], JSON_PATCH, readOnly), 403, 'forbidden');
      const updateOnly = testToken({ projectId: 'p1', scopes: ['system/Patient.u'] });
      expect((await patch(app, `Patient/${q.id}`, [], JSON_PATCH, updateOnly)).status).toBe(200);
    });

    it('conditional update: creates, updates its single match, refuses several and a wrong id', async () => {
      const { app } = await appOver(open);
      const created = await put(app, 'Patient?identifier=urn:test|cu', patient('cu'));
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const id = created.body.id as string;
      const updated = await put(app, 'Patient?identifier=urn:test|cu', patient('cu', { active: true }));
      expect(updated.status).toBe(200);
      expect(updated.body).toMatchObject({ id, active: true, meta: { versionId: '2' } });
      expect(updated.headers.location).toContain(`Patient/${id}/_history/2`);
      // A body id: must be the match's; with no match it is used when free, a 409 when taken.
      expectIssue(await put(app, 'Patient?identifier=urn:test|cu', { ...patient('cu'), id: 'other' }), 400);
      expect((await put(app, 'Patient?identifier=urn:test|cu', { ...patient('cu'), id })).status).toBe(200);
      const own = await put(app, 'Patient?identifier=urn:test|own', { ...patient('own'), id: 'chosen-id' });
      expect(own.status).toBe(201);
      expect(own.body.id).toBe('chosen-id');
      expectIssue(await put(app, 'Patient?identifier=urn:test|none', { ...patient('none'), id }), 409);
      // If-Match on the match.
      const stale = await put(app, 'Patient?identifier=urn:test|cu', patient('cu')).set('If-Match', 'W/"1"');
      expectIssue(stale, 412);
      // Several matches.
      await create(app, patient('twice'));
      await create(app, patient('twice'));
      expectIssue(await put(app, 'Patient?identifier=urn:test|twice', patient('twice')), 412, 'duplicate');
      // Criteria that are not search parameters, or none at all.
      expectIssue(await put(app, 'Patient?colour=blue', patient('x')), 400);
      expectIssue(await put(app, 'Patient?_count=1', patient('x')), 412);
      expectIssue(await put(app, 'Patient', patient('x')), 405);
      expect(await countOf(app, 'Patient?identifier=urn:test|cu')).toBe(1);
    });

    it('conditional delete: single by default, multiple or off by option', async () => {
      const { app } = await appOver(open);
      await create(app, patient('one'));
      await create(app, patient('two'));
      await create(app, patient('two'));
      const del = (a: express.Express, q: string) =>
        request(a).delete(`${BASE}/${q}`).set('Authorization', auth);
      expect((await del(app, 'Patient?identifier=urn:test|one')).status).toBe(204);
      expect(await countOf(app, 'Patient?identifier=urn:test|one')).toBe(0);
      expect((await del(app, 'Patient?identifier=urn:test|none')).status).toBe(204);
      expectIssue(await del(app, 'Patient?identifier=urn:test|two'), 412, 'duplicate');
      expect(await countOf(app, 'Patient?identifier=urn:test|two')).toBe(2);
      expectIssue(await del(app, 'Patient'), 405);

      const multiple = await appOver(open, { conditionalDelete: 'multiple' });
      await create(multiple.app, patient('many'));
      await create(multiple.app, patient('many'));
      await create(multiple.app, patient('kept'));
      expect((await del(multiple.app, 'Patient?identifier=urn:test|many')).status).toBe(204);
      expect(await countOf(multiple.app, 'Patient?identifier=urn:test|many')).toBe(0);
      expect(await countOf(multiple.app, 'Patient')).toBe(1);
      const caps = await request(multiple.app).get(`${BASE}/metadata`);
      expect(caps.body.rest[0].resource[0].conditionalDelete).toBe('multiple');

      const off = await appOver(open, { conditionalDelete: 'off' });
      await create(off.app, patient('off'));
      expectIssue(await del(off.app, 'Patient?identifier=urn:test|off'), 405, 'not-supported');
      expect(await countOf(off.app, 'Patient')).toBe(1);
    });

    it('conditional read: If-None-Match and If-Modified-Since answer 304 when current', async () => {
      const { app } = await appOver(open);
      const p = await create(app, patient('cr'));
      const same = await read(app, `Patient/${p.id}`).set('If-None-Match', 'W/"1"');
      expect(same.status).toBe(304);
      expect(same.headers.etag).toBe('W/"1"');
      expect(same.text).toBe('');
      expect((await read(app, `Patient/${p.id}`).set('If-None-Match', 'W/"0"')).status).toBe(200);
      const future = new Date(Date.now() + 60_000).toUTCString();
      const past = new Date(Date.now() - 3_600_000).toUTCString();
      expect((await read(app, `Patient/${p.id}`).set('If-Modified-Since', future)).status).toBe(304);
      const changed = await read(app, `Patient/${p.id}`).set('If-Modified-Since', past);
      expect(changed.status).toBe(200);
      expect(changed.body.id).toBe(p.id);
      expect((await read(app, `Patient/${p.id}`).set('If-Modified-Since', 'not a date')).status).toBe(200);

      // As batch entries: request.ifNoneMatch and request.ifModifiedSince.
      const res = await postBundle(
        app,
        bundle('batch', [
          { request: { method: 'GET', url: `Patient/${p.id}`, ifNoneMatch: 'W/"1"' } },
          { request: { method: 'GET', url: `Patient/${p.id}`, ifNoneMatch: 'W/"0"' } },
          { request: { method: 'GET', url: `Patient/${p.id}`, ifModifiedSince: future } },
        ]),
      );
      expect(
        res.body.entry.map((e: { response: { status: string } }) => e.response.status.slice(0, 3)),
      ).toEqual(['304', '200', '304']);
      expect(res.body.entry[0].resource).toBeUndefined();
      expect(res.body.entry[0].response.etag).toBe('W/"1"');
    });

    it('Prefer: return on create, update and patch, plain and in Bundles', async () => {
      const { app } = await appOver(open);
      const minimal = await request(app)
        .post(`${BASE}/Patient`)
        .set('Authorization', auth)
        .set('Prefer', 'return=minimal')
        .type(FHIR_JSON)
        .send(JSON.stringify(patient('pr')));
      expect(minimal.status).toBe(201);
      expect(minimal.text).toBe('');
      const id = /Patient\/([^/]+)\/_history/.exec(minimal.headers.location as string)![1]!;
      const outcome = await put(app, `Patient/${id}`, { ...patient('pr'), id }).set(
        'Prefer',
        'return=OperationOutcome',
      );
      expect(outcome.status).toBe(200);
      expect(outcome.body.resourceType).toBe('OperationOutcome');
      const representation = await put(app, 'Patient?identifier=urn:test|pr', patient('pr')).set(
        'Prefer',
        'return=representation',
      );
      expect(representation.body).toMatchObject({ id, meta: { versionId: '3' } });

      // In a Bundle: each write entry's response carries the outcome instead of the resource.
      for (const type of ['transaction', 'batch'] as const) {
        const res = await postBundle(
          app,
          bundle(type, [
            { resource: patient(`${type}-o`), request: { method: 'POST', url: 'Patient' } },
            {
              resource: binary([{ op: 'add', path: '/active', value: true }]),
              request: { method: 'PATCH', url: `Patient/${id}` },
            },
          ]),
        ).set('Prefer', 'return=OperationOutcome');
        expect(res.status).toBe(200);
        for (const entry of res.body.entry as Record<string, { outcome?: { resourceType: string } }>[]) {
          expect(entry.resource).toBeUndefined();
          expect(entry.response!.outcome!.resourceType).toBe('OperationOutcome');
        }
      }
    });

    it('batch and transaction entries: PATCH (Binary and Parameters), conditional PUT and DELETE', async () => {
      const { app } = await appOver(open);
      const a = await create(app, patient('a'));
      const b = await create(app, patient('b'));
      await create(app, patient('gone'));
      const tx = await postBundle(
        app,
        bundle('transaction', [
          {
            fullUrl: 'urn:uuid:1b6b6d3e-0000-4000-8000-000000000001',
            resource: { resourceType: 'Organization', name: 'Org' },
            request: { method: 'POST', url: 'Organization' },
          },
          {
            resource: binary([
              {
                op: 'add',
                path: '/managingOrganization',
                value: { reference: 'urn:uuid:1b6b6d3e-0000-4000-8000-000000000001' },
              },
            ]),
            request: { method: 'PATCH', url: `Patient/${a.id}` },
          },
          {
            resource: parameters(
              operation(
                { name: 'type', valueCode: 'add' },
                { name: 'path', valueString: 'Patient' },
                { name: 'name', valueString: 'active' },
                { name: 'value', valueBoolean: true },
              ),
            ),
            request: { method: 'PATCH', url: `Patient/${b.id}`, ifMatch: 'W/"1"' },
          },
          { resource: patient('c'), request: { method: 'PUT', url: 'Patient?identifier=urn:test|c' } },
          { request: { method: 'DELETE', url: 'Patient?identifier=urn:test|gone' } },
        ]),
      );
      expect(tx.status, JSON.stringify(tx.body)).toBe(200);
      const statuses = tx.body.entry.map((e: { response: { status: string } }) =>
        e.response.status.slice(0, 3),
      );
      expect(statuses).toEqual(['201', '200', '200', '201', '204']);
      const orgId = tx.body.entry[0].resource.id as string;
      expect((await read(app, `Patient/${a.id}`)).body.managingOrganization).toEqual({
        reference: `Organization/${orgId}`,
      });
      expect((await read(app, `Patient/${b.id}`)).body.active).toBe(true);
      expect(await countOf(app, 'Patient?identifier=urn:test|c')).toBe(1);
      expect(await countOf(app, 'Patient?identifier=urn:test|gone')).toBe(0);

      // A failing PATCH fails the whole transaction: nothing written.
      const failed = await postBundle(
        app,
        bundle('transaction', [
          { resource: patient('d'), request: { method: 'PUT', url: 'Patient?identifier=urn:test|d' } },
          {
            resource: binary([{ op: 'test', path: '/active', value: false }]),
            request: { method: 'PATCH', url: `Patient/${b.id}` },
          },
        ]),
      );
      expectIssue(failed, 422);
      expect(failed.body.issue[0].expression).toEqual(['Bundle.entry[1]']);
      expect(await countOf(app, 'Patient?identifier=urn:test|d')).toBe(0);
      // A conditional update and another entry on the same resource.
      const twice = await postBundle(
        app,
        bundle('transaction', [
          { resource: patient('c'), request: { method: 'PUT', url: 'Patient?identifier=urn:test|c' } },
          { request: { method: 'DELETE', url: 'Patient?identifier=urn:test|c' } },
        ]),
      );
      expectIssue(twice, 400);

      const batch = await postBundle(
        app,
        bundle('batch', [
          {
            resource: binary([{ op: 'replace', path: '/name/0/family', value: 'Batch' }]),
            request: { method: 'PATCH', url: `Patient/${a.id}` },
          },
          { resource: patient('e'), request: { method: 'PUT', url: 'Patient?identifier=urn:test|e' } },
          { resource: patient('e'), request: { method: 'PUT', url: 'Patient?identifier=urn:test|e' } },
          { request: { method: 'DELETE', url: 'Patient?identifier=urn:test|c' } },
          { resource: { resourceType: 'Patient' }, request: { method: 'PATCH', url: `Patient/${a.id}` } },
          { resource: binary([]), request: { method: 'PATCH', url: 'Patient?identifier=urn:test|a' } },
          {
            resource: binary([{ op: 'test', path: '/active', value: false }]),
            request: { method: 'PATCH', url: `Patient/${b.id}` },
          },
        ]),
      );
      expect(batch.status).toBe(200);
      const batchStatuses = batch.body.entry.map((e: { response: { status: string } }) =>
        e.response.status.slice(0, 3),
      );
      expect(batchStatuses).toEqual(['200', '201', '200', '204', '400', '400', '422']);
      expect((await read(app, `Patient/${a.id}`)).body.name[0].family).toBe('Batch');
      expect(await countOf(app, 'Patient?identifier=urn:test|c')).toBe(0);
      expect(await countOf(app, 'Patient?identifier=urn:test|e')).toBe(1);
    });

    it('resolves conditional references of batch and transaction entries to their single match', async () => {
      const { app } = await appOver(open);
      const org = await create(app, {
        resourceType: 'Organization',
        identifier: [{ system: 'urn:org', value: 'o1' }],
      });
      await create(app, {
        resourceType: 'Organization',
        identifier: [{ system: 'urn:org', value: 'twice' }],
      });
      await create(app, {
        resourceType: 'Organization',
        identifier: [{ system: 'urn:org', value: 'twice' }],
      });
      const withOrg = (value: string, org: string) =>
        patient(value, { managingOrganization: { reference: `Organization?identifier=urn:org|${org}` } });
      const tx = await postBundle(
        app,
        bundle('transaction', [
          { resource: withOrg('r1', 'o1'), request: { method: 'POST', url: 'Patient' } },
          {
            resource: withOrg('r2', 'o1'),
            request: { method: 'PUT', url: 'Patient?identifier=urn:test|r2' },
          },
        ]),
      );
      expect(tx.status, JSON.stringify(tx.body)).toBe(200);
      for (const entry of tx.body.entry as { resource: { managingOrganization: unknown } }[]) {
        expect(entry.resource.managingOrganization).toEqual({ reference: `Organization/${org.id}` });
      }
      for (const [org, status] of [
        ['none', 404],
        ['twice', 412],
      ] as const) {
        const failed = await postBundle(
          app,
          bundle('transaction', [
            { resource: patient('ok'), request: { method: 'POST', url: 'Patient' } },
            { resource: withOrg('bad', org), request: { method: 'POST', url: 'Patient' } },
          ]),
        );
        expectIssue(failed, status);
        expect(failed.body.issue[0].expression).toEqual(['Bundle.entry[1]']);
      }
      expect(await countOf(app, 'Patient?identifier=urn:test|ok')).toBe(0);
      const batch = await postBundle(
        app,
        bundle('batch', [
          { resource: withOrg('b1', 'o1'), request: { method: 'POST', url: 'Patient' } },
          { resource: withOrg('b2', 'twice'), request: { method: 'POST', url: 'Patient' } },
        ]),
      );
      expect(
        batch.body.entry.map((e: { response: { status: string } }) => e.response.status.slice(0, 3)),
      ).toEqual(['201', '412']);
      expect(batch.body.entry[0].resource.managingOrganization).toEqual({
        reference: `Organization/${org.id}`,
      });
    });

    it('patches the one match of PATCH [type]?criteria: 404 for none, 412 for several, If-Match honoured', async () => {
      const { app } = await appOver(open);
      const one = await create(app, patient('cp1'));
      await create(app, patient('cp2'));
      await create(app, patient('cp2'));
      const ok = await patch(app, 'Patient?identifier=urn:test|cp1', [
        { op: 'replace', path: '/name/0/family', value: 'Patched' },
      ]);
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(ok.body).toMatchObject({ id: one.id, meta: { versionId: '2' } });
      expect(ok.body.name[0].family).toBe('Patched');
      const fhirPath = await patch(
        app,
        'Patient?identifier=urn:test|cp1',
        parameters(
          operation(
            { name: 'type', valueCode: 'add' },
            { name: 'path', valueString: 'Patient' },
            { name: 'name', valueString: 'active' },
            { name: 'value', valueBoolean: true },
          ),
        ),
        'application/fhir+json',
      ).set('If-Match', 'W/"2"');
      expect(fhirPath.status, JSON.stringify(fhirPath.body)).toBe(200);
      expect(fhirPath.body).toMatchObject({ id: one.id, active: true, meta: { versionId: '3' } });
      const stale = await patch(app, 'Patient?identifier=urn:test|cp1', [
        { op: 'add', path: '/gender', value: 'female' },
      ]).set('If-Match', 'W/"2"');
      expectIssue(stale, 412);
      expectIssue(
        await patch(app, 'Patient?identifier=urn:test|none', [{ op: 'remove', path: '/active' }]),
        404,
      );
      expectIssue(
        await patch(app, 'Patient?identifier=urn:test|cp2', [{ op: 'remove', path: '/name' }]),
        412,
        'duplicate',
      );
      // Criteria naming no parameter would patch any resource: refused.
      expectIssue(await patch(app, 'Patient?_count=1', [{ op: 'remove', path: '/name' }]), 412, 'invalid');
      const unchanged = await read(app, 'Patient?identifier=urn:test|cp2');
      expect(unchanged.body.entry.map((e: { resource: { name?: unknown } }) => e.resource.name)).toEqual([
        [{ family: 'Smith', given: ['Ann'] }],
        [{ family: 'Smith', given: ['Ann'] }],
      ]);
    });
  });
}

forEachStore('PATCH and conditional interactions', suite);
