// Parallel requests over HTTP on every store: transactions and batches of every entry kind, more
// of them than the PostgreSQL pool has connections, never wedge the server; conditional creates
// and conditional updates racing on the same criteria make one resource; parallel PATCHes of one
// resource lose none of their changes.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { tempDir } from '../helpers/temp-dir.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/** Connections of the PostgreSQL pool: every burst below sends four times as many requests. */
const POOL = 4;
const BURST = 4 * POOL;
/** A request still unanswered after this long counts as wedged. */
const ANSWER_WITHIN_MS = 15_000;

const stores: [string, () => Promise<Storage> | Storage][] = [
  ['memory', () => memoryStorage()],
  ['file', () => fileStorage({ dir: tempDir('fpk-concurrency-') })],
];
if (postgresTestUrl('parallel requests on the postgres store')) {
  const newSchema = schemaFactory(POSTGRES_URL!);
  stores.push([
    'postgres',
    () => postgresStorage({ connectionString: POSTGRES_URL, schema: newSchema(), maxConnections: POOL }),
  ]);
}

const patient = (value: string) => ({
  resourceType: 'Patient',
  identifier: [{ system: 'urn:race', value }],
});
const observation = { resourceType: 'Observation', status: 'final', code: { text: 'race' } };

describe.each(stores)('parallel requests on the %s store', (_name, open) => {
  let t: PlatformTestApp;
  let server: Server;
  let auth: string;

  beforeAll(async () => {
    t = await createPlatformApp({}, await open());
    server = t.app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const project = await t.initProject('race');
    const client = await t.newClient(project, { name: 'loader', scope: 'system/*.*' });
    auth = await t.bearer(client.id, client.secret);
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    await t?.close();
  });

  const http = () => request(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);

  async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
    const req = http().post(path).set('Authorization', auth).type(FHIR_JSON).timeout(ANSWER_WITHIN_MS);
    for (const [name, value] of Object.entries(headers)) req.set(name, value);
    return req.send(JSON.stringify(body));
  }

  async function createPatients(n: number, tag: string): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const res = await post('/fhir/R4/Patient', patient(`${tag}-${i}`));
      expect(res.status).toBe(201);
      ids.push(res.body.id as string);
    }
    return ids;
  }

  async function countMatches(value: string): Promise<number> {
    const res = await http()
      .get(`/fhir/R4/Patient?identifier=${encodeURIComponent(`urn:race|${value}`)}`)
      .set('Authorization', auth)
      .timeout(ANSWER_WITHIN_MS);
    expect(res.status).toBe(200);
    return (res.body.entry ?? []).length as number;
  }

  /** One Bundle entry of each kind a probe sent, `i` choosing the kind and its target. */
  function entryOfKind(i: number, ids: string[], tag: string): Record<string, unknown> {
    const id = ids[i]!;
    switch (i % 8) {
      case 0:
        return { request: { method: 'DELETE', url: `Patient/${id}` } };
      case 1:
        return {
          fullUrl: 'urn:uuid:6d1ad1a2-0000-4000-8000-000000000001',
          resource: patient(`${tag}-shared`),
          request: { method: 'POST', url: 'Patient', ifNoneExist: `identifier=urn:race|${tag}-shared` },
        };
      case 2:
        return {
          resource: { ...patient(`${tag}-${i}`), id, active: true },
          request: { method: 'PUT', url: `Patient/${id}` },
        };
      case 3:
        return { request: { method: 'GET', url: `Patient/${id}` } };
      case 4:
        return { request: { method: 'GET', url: `Patient?identifier=urn:race|${tag}-${i}` } };
      case 6:
        return {
          resource: {
            resourceType: 'Binary',
            contentType: 'application/json-patch+json',
            data: Buffer.from(JSON.stringify([{ op: 'add', path: '/active', value: true }])).toString(
              'base64',
            ),
          },
          request: { method: 'PATCH', url: `Patient/${id}` },
        };
      case 7:
        return {
          resource: patient(`${tag}-upserted`),
          request: { method: 'PUT', url: `Patient?identifier=urn:race|${tag}-upserted` },
        };
      default:
        return { resource: patient(`${tag}-new-${i}`), request: { method: 'POST', url: 'Patient' } };
    }
  }

  async function expectResponsive(): Promise<void> {
    expect(await countMatches('none')).toBe(0);
    const token = await t.tokenResponse('nobody', 'wrong');
    expect(token.status).toBe(401);
    const ready = await http().get('/readyz').timeout(ANSWER_WITHIN_MS);
    expect(ready.status).toBe(200);
  }

  it.each(['transaction', 'batch'] as const)(
    'answers %s Bundles of every entry kind, more of them than the pool has connections',
    async (type) => {
      const tag = `${type}-kinds`;
      const ids = await createPatients(BURST, tag);
      const answers = await Promise.all(
        ids.map((_, i) =>
          post('/fhir/R4', {
            resourceType: 'Bundle',
            type,
            entry: [
              entryOfKind(i, ids, tag),
              { resource: observation, request: { method: 'POST', url: 'Observation' } },
            ],
          }),
        ),
      );
      for (const [i, res] of answers.entries()) {
        expect(res.status, `Bundle ${i}: ${JSON.stringify(res.body)}`).toBe(200);
        for (const entry of res.body.entry as { response: { status: string } }[]) {
          expect(entry.response.status, `Bundle ${i}`).toMatch(/^(200|201|204)/);
        }
      }
      // The conditional entries made one Patient between them.
      expect(await countMatches(`${tag}-shared`)).toBe(1);
      expect(await countMatches(`${tag}-upserted`)).toBe(1);
      await expectResponsive();
    },
  );

  it('makes one resource of parallel conditional creates, round after round', async () => {
    for (let round = 0; round < 5; round++) {
      const value = `create-${round}`;
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          post('/fhir/R4/Patient', patient(value), { 'If-None-Exist': `identifier=urn:race|${value}` }),
        ),
      );
      const statuses = answers.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
      expect(new Set(answers.map((r) => r.body.id as string)).size).toBe(1);
      expect(await countMatches(value)).toBe(1);
    }
  });

  it('makes one resource of parallel conditional updates, round after round', async () => {
    for (let round = 0; round < 5; round++) {
      const value = `update-${round}`;
      const answers = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          http()
            .put(`/fhir/R4/Patient?identifier=${encodeURIComponent(`urn:race|${value}`)}`)
            .set('Authorization', auth)
            .type(FHIR_JSON)
            .timeout(ANSWER_WITHIN_MS)
            .send(
              JSON.stringify({ ...patient(value), birthDate: `2000-01-${String(i + 1).padStart(2, '0')}` }),
            ),
        ),
      );
      const statuses = answers.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
      expect(new Set(answers.map((r) => r.body.id as string)).size).toBe(1);
      // Each wrote its own version of the one resource.
      expect(new Set(answers.map((r) => r.body.meta.versionId as string)).size).toBe(10);
      expect(await countMatches(value)).toBe(1);
    }
  });

  it('keeps every change of parallel PATCHes of one resource', async () => {
    const [id] = await createPatients(1, 'patched');
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        http()
          .patch(`/fhir/R4/Patient/${id}`)
          .set('Authorization', auth)
          .type('application/json-patch+json')
          .timeout(ANSWER_WITHIN_MS)
          .send(
            JSON.stringify([
              { op: 'add', path: '/identifier/-', value: { system: 'urn:patch', value: `${i}` } },
            ]),
          ),
      ),
    );
    expect(answers.map((r) => r.status)).toEqual(Array.from({ length: 10 }, () => 200));
    const res = await http()
      .get(`/fhir/R4/Patient/${id}`)
      .set('Authorization', auth)
      .timeout(ANSWER_WITHIN_MS);
    expect(res.body.meta.versionId).toBe('11');
    const values = (res.body.identifier as { system: string; value: string }[])
      .filter((i) => i.system === 'urn:patch')
      .map((i) => i.value)
      .sort();
    expect(values).toEqual(['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
  });

  it('makes one resource of parallel batch entries with the same conditional update', async () => {
    for (let round = 0; round < 3; round++) {
      const value = `batch-update-${round}`;
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          post('/fhir/R4', {
            resourceType: 'Bundle',
            type: 'batch',
            entry: [
              {
                resource: patient(value),
                request: { method: 'PUT', url: `Patient?identifier=urn:race|${value}` },
              },
            ],
          }),
        ),
      );
      const statuses = answers.map((r) => (r.body.entry[0].response.status as string).slice(0, 3)).sort();
      expect(statuses).toEqual(['200', '200', '200', '200', '200', '200', '200', '200', '200', '201']);
      expect(await countMatches(value)).toBe(1);
    }
  });

  it('makes one resource of parallel batch entries with the same ifNoneExist', async () => {
    for (let round = 0; round < 3; round++) {
      const value = `batch-${round}`;
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          post('/fhir/R4', {
            resourceType: 'Bundle',
            type: 'batch',
            entry: [
              {
                resource: patient(value),
                request: { method: 'POST', url: 'Patient', ifNoneExist: `identifier=urn:race|${value}` },
              },
            ],
          }),
        ),
      );
      const statuses = answers.map((r) => (r.body.entry[0].response.status as string).slice(0, 3)).sort();
      expect(statuses).toEqual(['200', '200', '200', '200', '200', '200', '200', '200', '200', '201']);
      expect(await countMatches(value)).toBe(1);
    }
  });
});
