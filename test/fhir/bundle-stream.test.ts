import { Readable } from 'node:stream';
import express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readBundleStream } from '../../src/fhir/bundle/bundle-stream.js';
import { fhirRouter } from '../../src/fhir/router.js';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { fileStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';
import { tempDir } from '../helpers/temp-dir.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

const BASE = '/api/fhir/R4';
const token = testToken({ projectId: 'p', scopes: ['system/*.*'] });
const LIMITS = { maxBytes: 1 << 30, maxDepth: 100, maxEntries: 10_000 };

/** `text` as a byte stream in small chunks (cutting through tokens and multi-byte characters). */
function chunked(text: string, size = 7): Readable {
  const bytes = Buffer.from(text, 'utf8');
  const parts: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += size) parts.push(bytes.subarray(i, i + size));
  return Readable.from(parts);
}

/** A Synthea-style transaction Bundle: patients with encounters and observations, linked by `urn:uuid:`. */
function syntheaLikeBundle(patients: number, observations: number): Record<string, unknown> {
  const entry: Record<string, unknown>[] = [];
  for (let p = 0; p < patients; p++) {
    const patientUrl = `urn:uuid:00000000-0000-4000-8000-${String(p).padStart(12, '0')}`;
    entry.push({
      fullUrl: patientUrl,
      resource: { resourceType: 'Patient', name: [{ family: `Family${p}`, given: ['Zoë'] }] },
      request: { method: 'POST', url: 'Patient' },
    });
    for (let o = 0; o < observations; o++) {
      entry.push({
        fullUrl: `urn:uuid:00000000-0000-4000-9000-${String(p * observations + o).padStart(12, '0')}`,
        resource: {
          resourceType: 'Observation',
          status: 'final',
          code: { coding: [{ system: 'http://loinc.org', code: '8302-2', display: 'Body Height' }] },
          subject: { reference: patientUrl },
          valueQuantity: { value: 150 + o / 10, unit: 'cm', system: 'http://unitsofmeasure.org' },
          note: [{ text: 'x'.repeat(200) }],
        },
        request: { method: 'POST', url: 'Observation' },
      });
    }
  }
  return { resourceType: 'Bundle', type: 'transaction', entry };
}

describe('readBundleStream', () => {
  it('gives what JSON.parse gives, whatever the chunking', async () => {
    const text = JSON.stringify({
      entry: [{ a: [1, -2.5e3, true, null, 'é日本\\"'] }, {}, []],
      resourceType: 'Bundle',
      nested: { deep: [[[{ x: 'y' }]]] },
      type: 'batch',
    });
    const twice = '{"entry":[1],"type":"x","entry":[{"b":2}],"type":"batch"}';
    for (const size of [1, 3, 7, 1000]) {
      expect(await readBundleStream(chunked(text, size), LIMITS)).toEqual(JSON.parse(text));
      expect(await readBundleStream(chunked(twice, size), LIMITS)).toEqual(JSON.parse(twice));
    }
  });

  it('refuses what is not one JSON object, too deep, too large or with too many entries', async () => {
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 'resolved',
        (e: { code?: string; status?: number }) => `${e.status} ${e.code}`,
      );
    expect(await code(readBundleStream(chunked('[1,2]'), LIMITS))).toBe('400 ERR_FHIR_INVALID');
    expect(await code(readBundleStream(chunked('"x"'), LIMITS))).toBe('400 ERR_FHIR_INVALID');
    expect(await code(readBundleStream(chunked('{"a":1'), LIMITS))).toBe('400 ERR_INVALID_JSON');
    expect(await code(readBundleStream(chunked('{"a":1}{}'), LIMITS))).toBe('400 ERR_INVALID_JSON');
    expect(await code(readBundleStream(chunked('{"a":nope}'), LIMITS))).toBe('400 ERR_INVALID_JSON');
    const deep = `{"entry":[${'['.repeat(200)}${']'.repeat(200)}]}`;
    expect(await code(readBundleStream(chunked(deep), LIMITS))).toBe('400 ERR_JSON_TOO_DEEP');
    const big = JSON.stringify({ entry: [{ text: 'x'.repeat(5000) }] });
    expect(await code(readBundleStream(chunked(big, 100), { ...LIMITS, maxBytes: 1000 }))).toBe(
      '413 ERR_BODY_TOO_LARGE',
    );
    const many = JSON.stringify({ entry: [{}, {}, {}] });
    expect(await code(readBundleStream(chunked(many), { ...LIMITS, maxEntries: 2 }))).toBe(
      '413 ERR_FHIR_TOO_COSTLY',
    );
  });
});

describe('a transaction Bundle over bodyLimit, on the file store', () => {
  let storage: Storage;
  let app: express.Express;
  const open = (options: Partial<FhirRouterOptions> = {}) => {
    app = express();
    app.use(
      BASE,
      fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
    );
  };
  beforeEach(async () => {
    storage = await fileStorage({ dir: tempDir('bundle-stream-') });
    await storage.createProject({ id: 'p', name: 'P', strictMode: false });
    open({ bodyLimit: '64kb' });
  });
  afterEach(async () => {
    await storage.close();
  });

  const post = (body: string, type = 'application/fhir+json') =>
    request(app).post(BASE).set('Authorization', token).set('Content-Type', type).send(body);

  it('is parsed as a stream and loads like a small one: ids, references, response', async () => {
    const bundle = syntheaLikeBundle(40, 60);
    const text = JSON.stringify(bundle);
    expect(text.length).toBeGreaterThan(1_000_000);
    const res = await post(text);
    expect(res.status).toBe(200);
    const entries = res.body.entry as { resource: Record<string, unknown>; response: { status: string } }[];
    expect(entries).toHaveLength(40 * 61);
    expect(entries.every((e) => e.response.status === '201 Created')).toBe(true);
    const patientId = entries[0]!.resource.id as string;
    const observation = entries[1]!.resource as { id: string; subject: { reference: string } };
    expect(observation.subject.reference).toBe(`Patient/${patientId}`);
    const stored = await storage.readResource('p', 'Observation', observation.id);
    expect(stored).toEqual(observation);
    expect((await storage.searchResources('p', 'Observation', { count: 0 })).total).toBe(40 * 60);
  });

  it('takes the Bundle type after the entries', async () => {
    const { entry } = syntheaLikeBundle(5, 100);
    const res = await post(JSON.stringify({ entry, resourceType: 'Bundle', type: 'batch' }));
    expect(res.status).toBe(200);
    expect(res.body.type).toBe('batch-response');
  });

  it('is all-or-nothing: a bad entry anywhere writes nothing', async () => {
    const bundle = syntheaLikeBundle(10, 100) as { entry: { request: { url: string } }[] };
    bundle.entry[900]!.request.url = 'Patient/not a valid id';
    const res = await post(JSON.stringify(bundle));
    expectOperationOutcome(res, 400);
    expect(res.body.issue[0].expression).toEqual(['Bundle.entry[900]']);
    expect((await storage.searchResources('p', 'Patient', { count: 0 })).total).toBe(0);
  });

  it('answers 413 over streamedBundleLimit, 400 when malformed or too deep', async () => {
    const text = JSON.stringify(syntheaLikeBundle(10, 100));
    open({ bodyLimit: '64kb', streamedBundleLimit: '100kb' });
    expectOperationOutcome(await post(text), 413, 'too-costly');
    open({ bodyLimit: '1kb', maxJsonDepth: 20 });
    expectOperationOutcome(await post(`${text.slice(0, -1)},"x":${'['.repeat(30)}${']'.repeat(30)}}`), 400);
    expectOperationOutcome(await post(text.slice(0, -10)), 400, 'invalid');
    expectOperationOutcome(await post(JSON.stringify([1, 'x'.repeat(2000)])), 400, 'invalid');
    open({ bodyLimit: '1kb', maxBundleEntries: 50 });
    expectOperationOutcome(await post(text), 413, 'too-costly');
    expect((await storage.searchResources('p', 'Patient', { count: 0 })).total).toBe(0);
  });

  it('keeps the 413 of bodyLimit for other routes and encodings', async () => {
    const big = JSON.stringify({ resourceType: 'Patient', text: { div: 'x'.repeat(100_000) } });
    const res = await request(app)
      .post(`${BASE}/Patient`)
      .set('Authorization', token)
      .set('Content-Type', 'application/fhir+json')
      .send(big);
    expectOperationOutcome(res, 413);
    const latin = await post(
      JSON.stringify(syntheaLikeBundle(10, 100)),
      'application/fhir+json; charset=latin1',
    );
    expectOperationOutcome(latin, 415);
  });
});

it('is rejected as an option when not a size', async () => {
  const storage = await fileStorage({ dir: tempDir('bundle-stream-') });
  try {
    expect(() =>
      fhirRouter({ storage, authenticate: testAuthenticate, streamedBundleLimit: 'lots' }),
    ).toThrow(/streamedBundleLimit/);
    expect(() => fhirRouter({ storage, authenticate: testAuthenticate, bodyLimit: -1 })).toThrow(/bodyLimit/);
  } finally {
    await storage.close();
  }
});
