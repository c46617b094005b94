import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// The bounds of a patch (`maxPatchOperations`, `maxPatchedResourceSize`) over HTTP on each store:
// the doubling JSON Patch of issue 43 (copies of /extension into itself), too many operations, a
// FHIRPath Patch that grows the resource too far, and PATCH entries of batches and transactions.
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const FHIR_JSON = 'application/fhir+json';
const JSON_PATCH = 'application/json-patch+json';
const MIB = 1024 * 1024;

type Open = () => Storage | Promise<Storage>;

async function appOver(open: Open, options: Partial<FhirRouterOptions> = {}): Promise<express.Express> {
  const storage = await open();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(
    BASE,
    fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  return app;
}

/** A Patient with one extension whose text is `size` characters: what the attack doubles. */
async function patientWithExtension(app: express.Express, size: number) {
  const res = await request(app)
    .post(`${BASE}/Patient`)
    .set('Authorization', auth)
    .type(FHIR_JSON)
    .send(
      JSON.stringify({
        resourceType: 'Patient',
        extension: [{ url: 'http://example.org/x', valueString: 'x'.repeat(size) }],
      }),
    );
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { id: string; extension: unknown[] } & Record<string, unknown>;
}

function patch(app: express.Express, url: string, body: unknown, type = JSON_PATCH) {
  return request(app)
    .patch(`${BASE}/${url}`)
    .set('Authorization', auth)
    .type(type)
    .send(JSON.stringify(body));
}

const copies = (n: number) =>
  Array.from({ length: n }, () => ({ op: 'copy', from: '/extension', path: '/extension/-' }));

/**
 * The operation at which `copies(n)` first leaves `resource` over `limit` bytes of JSON, computed
 * from the JSON lengths without building anything: each copy appends the whole list to itself, so
 * the list's text goes from `a` to `2a + 1` (a comma).
 */
function crossingOperation(resource: Record<string, unknown>, limit: number): number {
  let list = JSON.stringify(resource.extension).length;
  const rest = JSON.stringify(resource).length - list;
  for (let operation = 0; ; operation++) {
    list = 2 * list + 1;
    if (rest + list > limit) return operation;
  }
}

interface Outcome {
  resourceType: string;
  issue: { code: string; details?: { text?: string }; expression?: string[] }[];
}

function expectTooCostly(res: request.Response, mentions: string): Outcome {
  expect(res.status, JSON.stringify(res.body).slice(0, 500)).toBe(413);
  const outcome = res.body as Outcome;
  expect(outcome.resourceType).toBe('OperationOutcome');
  expect(outcome.issue[0]!.code).toBe('too-costly');
  expect(outcome.issue[0]!.details?.text).toContain(mentions);
  return outcome;
}

const fhirPathOperation = (type: string, path: string, name: string, value: Record<string, unknown>) => ({
  name: 'operation',
  part: [
    { name: 'type', valueCode: type },
    { name: 'path', valueString: path },
    { name: 'name', valueString: name },
    { name: 'value', ...value },
  ],
});

const binary = (operations: unknown[]) => ({
  resourceType: 'Binary',
  contentType: JSON_PATCH,
  data: Buffer.from(JSON.stringify(operations)).toString('base64'),
});

function postBundle(app: express.Express, type: 'batch' | 'transaction', entry: unknown[]) {
  return request(app)
    .post(BASE)
    .set('Authorization', auth)
    .type(FHIR_JSON)
    .send(JSON.stringify({ resourceType: 'Bundle', type, entry }));
}

function suite(name: string, open: Open): void {
  describe(`PATCH limits: ${name}`, () => {
    it('refuses the doubling JSON Patch (20 and 30 copies of /extension) at the copy that crosses the default limit, writing nothing', async () => {
      const app = await appOver(open);
      const p = await patientWithExtension(app, 100);
      // The default: twice the default bodyLimit of 16 MiB.
      const expected = crossingOperation(p, 32 * MIB);
      expect(expected).toBeLessThan(20);
      for (const n of [20, 30]) {
        const res = await patch(app, `Patient/${p.id}`, copies(n));
        const outcome = expectTooCostly(res, 'maxPatchedResourceSize');
        expect(outcome.issue[0]!.details?.text).toContain(`JSON Patch (operation ${expected})`);
      }
      const after = await request(app).get(`${BASE}/Patient/${p.id}`).set('Authorization', auth);
      expect(after.body.meta.versionId).toBe('1');
      expect(after.body.extension).toHaveLength(1);
    });

    it('refuses at the copy that crosses a configured limit, and applies the copies before it', async () => {
      const limit = 64 * 1024;
      const app = await appOver(open, { maxPatchedResourceSize: '64kb' });
      const p = await patientWithExtension(app, 500);
      const crossing = crossingOperation(p, limit);
      const refused = await patch(app, `Patient/${p.id}`, copies(crossing + 1));
      expect(expectTooCostly(refused, 'maxPatchedResourceSize').issue[0]!.details?.text).toContain(
        `(operation ${crossing})`,
      );
      // One copy fewer fits, and is applied whole.
      const applied = await patch(app, `Patient/${p.id}`, copies(crossing));
      expect(applied.status, JSON.stringify(applied.body).slice(0, 300)).toBe(200);
      expect(JSON.stringify(applied.body).length).toBeLessThanOrEqual(limit);
      // Each copy appends the whole list as one more item.
      expect(applied.body.extension).toHaveLength(1 + crossing);
    });

    it('refuses more operations than maxPatchOperations before applying any, JSON Patch and FHIRPath Patch', async () => {
      const app = await appOver(open, { maxPatchOperations: 5 });
      const p = await patientWithExtension(app, 10);
      const tests = (n: number) =>
        Array.from({ length: n }, () => ({ op: 'test', path: '/resourceType', value: 'Patient' }));
      expect((await patch(app, `Patient/${p.id}`, tests(5))).status).toBe(200);
      // The sixth operation would fail (422) if it were applied: the count is checked first.
      const json = await patch(app, `Patient/${p.id}`, [
        ...tests(5),
        { op: 'test', path: '/id', value: 'other' },
      ]);
      expectTooCostly(json, 'maxPatchOperations');
      // A conditional patch too.
      const conditional = await patch(app, `Patient?_id=${p.id}`, [
        ...tests(5),
        { op: 'test', path: '/id', value: 'x' },
      ]);
      expectTooCostly(conditional, 'maxPatchOperations');

      const add = (i: number) =>
        fhirPathOperation('add', 'Patient', 'identifier', { valueIdentifier: { value: String(i) } });
      const fhirPath = (n: number) => ({
        resourceType: 'Parameters',
        parameter: Array.from({ length: n }, (_, i) => add(i)),
      });
      expect((await patch(app, `Patient/${p.id}`, fhirPath(5), FHIR_JSON)).status).toBe(200);
      const tooMany = await patch(app, `Patient/${p.id}`, fhirPath(6), FHIR_JSON);
      expect(expectTooCostly(tooMany, 'maxPatchOperations').issue[0]!.expression).toEqual([
        'Parameters.parameter',
      ]);
      const after = await request(app).get(`${BASE}/Patient/${p.id}`).set('Authorization', auth);
      expect(after.body.identifier).toHaveLength(5);
    });

    it('admits a real client patch at the defaults: hundreds of operations', async () => {
      const app = await appOver(open);
      const p = await patientWithExtension(app, 10);
      const operations = Array.from({ length: 500 }, (_, i) => ({
        op: 'add',
        path: '/identifier/-',
        value: { system: 'urn:test', value: `id-${i}` },
      }));
      const res = await patch(app, `Patient/${p.id}`, [
        { op: 'add', path: '/identifier', value: [] },
        ...operations,
      ]);
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
      expect(res.body.identifier).toHaveLength(500);
    });

    it('refuses a FHIRPath Patch that would grow the resource past the limit, naming the operation', async () => {
      const app = await appOver(open, { maxPatchedResourceSize: 4096 });
      const p = await patientWithExtension(app, 10);
      const small = fhirPathOperation('add', 'Patient', 'gender', { valueCode: 'female' });
      const big = fhirPathOperation('add', 'Patient', 'identifier', {
        valueIdentifier: { value: 'v'.repeat(3000) },
      });
      const res = await patch(
        app,
        `Patient/${p.id}`,
        { resourceType: 'Parameters', parameter: [small, big, big] },
        FHIR_JSON,
      );
      expect(expectTooCostly(res, 'maxPatchedResourceSize').issue[0]!.expression).toEqual([
        'Parameters.parameter[2]',
      ]);
      const after = await request(app).get(`${BASE}/Patient/${p.id}`).set('Authorization', auth);
      expect(after.body.meta.versionId).toBe('1');
      expect(after.body.identifier).toBeUndefined();
    });

    it('bounds the PATCH entries of batches and transactions alike', async () => {
      const app = await appOver(open, { maxPatchOperations: 40 });
      const p = await patientWithExtension(app, 1000);
      const ok = { op: 'add', path: '/active', value: true };

      const batch = await postBundle(app, 'batch', [
        { resource: binary(copies(30)), request: { method: 'PATCH', url: `Patient/${p.id}` } },
        { resource: binary(copies(41)), request: { method: 'PATCH', url: `Patient/${p.id}` } },
        { resource: binary([ok]), request: { method: 'PATCH', url: `Patient/${p.id}` } },
      ]);
      expect(batch.status).toBe(200);
      const entries = batch.body.entry as { response: { status: string; outcome?: Outcome } }[];
      expect(entries.map((e) => e.response.status.slice(0, 3))).toEqual(['413', '413', '200']);
      const crossing = crossingOperation(p, 32 * MIB);
      expect(entries[0]!.response.outcome!.issue[0]!.details?.text).toContain(
        `JSON Patch (operation ${crossing})`,
      );
      expect(entries[1]!.response.outcome!.issue[0]!.details?.text).toContain('maxPatchOperations');

      // A transaction fails whole: the other entry's patch is not written either.
      const other = await patientWithExtension(app, 1000);
      const gender = [{ op: 'add', path: '/gender', value: 'female' }];
      const transaction = await postBundle(app, 'transaction', [
        { resource: binary(gender), request: { method: 'PATCH', url: `Patient/${other.id}` } },
        { resource: binary(copies(20)), request: { method: 'PATCH', url: `Patient/${p.id}` } },
      ]);
      expectTooCostly(transaction, 'maxPatchedResourceSize');
      const tooMany = await postBundle(app, 'transaction', [
        { resource: binary(gender), request: { method: 'PATCH', url: `Patient/${other.id}` } },
        { resource: binary(copies(41)), request: { method: 'PATCH', url: `Patient/${p.id}` } },
      ]);
      expect(expectTooCostly(tooMany, 'maxPatchOperations').issue[0]!.expression).toEqual([
        'Bundle.entry[1]',
      ]);
      const after = await request(app).get(`${BASE}/Patient/${other.id}`).set('Authorization', auth);
      expect(after.body.gender).toBeUndefined();
      expect(after.body.meta.versionId).toBe('1');
    });
  });
}

forEachStore('PATCH limits', suite);

describe('PATCH limit options', () => {
  it('are checked when the router is made', () => {
    const storage = memoryStorage();
    const make = (options: Partial<FhirRouterOptions>) => () =>
      fhirRouter({ storage, authenticate: testAuthenticate, ...options });
    expect(make({ maxPatchOperations: 0 })).toThrow(/maxPatchOperations/);
    expect(make({ maxPatchOperations: 1.5 })).toThrow(/maxPatchOperations/);
    expect(make({ maxPatchedResourceSize: 'big' })).toThrow(/maxPatchedResourceSize/);
    expect(make({ maxPatchedResourceSize: -1 })).toThrow(/maxPatchedResourceSize/);
  });
});
