import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { fileStorage } from '../../src/stores.js';
import type { FhirResource, ResourceWrite, Storage } from '../../src/storage/types.js';
import { createPlatformApp, type PlatformTestApp } from '../helpers/platform-app.js';
import { schemaFactory } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * No tenant slows or stops another (issue 44): one project runs 12 costly searches at once (the
 * shapes a black-box probe found, made as costly as the bounds allow), while another project reads,
 * searches, gets tokens and asks /readyz and /healthz. The other project's requests all answer, none
 * 5xx and none slower than 5 s; the costly ones answer, or are refused with a 4xx, within 30 s. On
 * the file store and on PostgreSQL (its default pool of 10 connections), through the platform at
 * its defaults.
 */

const PATIENTS = 500;
const OBSERVATIONS = 12_000;
const QUIET_BOUND_MS = 5000;
const COSTLY_BOUND_MS = 30_000;

/** The noisy project's data: Patients, and Observations with a coded text and a quantity. */
function noisyData(): FhirResource[] {
  const out: FhirResource[] = [];
  for (let p = 0; p < PATIENTS; p++) {
    out.push({ resourceType: 'Patient', id: `p${p}`, name: [{ family: `Family${p}` }], gender: 'female' });
  }
  for (let o = 0; o < OBSERVATIONS; o++) {
    out.push({
      resourceType: 'Observation',
      id: `o${o}`,
      status: 'final',
      code: { text: `code ${o % 37} reading`, coding: [{ system: 'urn:c', code: `c${o % 50}` }] },
      subject: { reference: `Patient/p${o % PATIENTS}` },
      effectiveDateTime: `2024-01-${String((o % 28) + 1).padStart(2, '0')}`,
      ...(o % 3 === 0 ? {} : { valueQuantity: { value: o % 997, unit: 'kg' } }),
    });
  }
  for (let d = 0; d < 400; d++) {
    out.push({
      resourceType: 'DiagnosticReport',
      id: `d${d}`,
      status: d % 2 ? 'final' : 'preliminary',
      code: { text: 'panel' },
      subject: { reference: `Patient/p${d % PATIENTS}` },
      result: [{ reference: `Observation/o${d * 7}` }],
    });
  }
  return out;
}

/** The costly searches: the probe's shapes, within the bounds a search may ask. */
const TEXT_FILTERS = Array.from({ length: 25 }, (_, i) => `code:text=code${i % 2 ? '' : ' '}`).join('&');
const COSTLY = [
  `Observation?${TEXT_FILTERS}&_total=accurate`,
  'Observation?_sort=status,code,date,subject,-value-quantity&_total=accurate',
  'Patient?_has:Observation:subject:value-quantity:missing=false&_total=accurate',
  'Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final&_total=accurate',
  'Patient/$everything?_count=500',
  'Observation?_offset=9995&_sort=value-quantity',
];

interface Sample {
  what: string;
  status: number;
  ms: number;
}

async function timed(what: string, run: () => Promise<Response>): Promise<Sample> {
  const start = performance.now();
  const res = await run();
  await res.arrayBuffer();
  return { what, status: res.status, ms: performance.now() - start };
}

function fairnessSuite(name: string, open: () => Storage | Promise<Storage>): void {
  describe(`tenant fairness (${name} store)`, () => {
    let t: PlatformTestApp;
    let server: Server;
    let base: string;
    let noisy: string;
    let quietRead: string;
    let quietClient: { id: string; secret: string };
    let quietToken: string;

    beforeAll(async () => {
      t = await createPlatformApp({}, await open());
      const noisyProject = await t.initProject('Noisy');
      const quietProject = await t.initProject('Quiet');
      const data = noisyData();
      for (let i = 0; i < data.length; i += 2000) {
        const writes: ResourceWrite[] = data
          .slice(i, i + 2000)
          .map((resource) => ({ op: 'update', resource: resource as FhirResource & { id: string } }));
        await t.storage.writeResources(noisyProject, writes);
      }
      await t.storage.writeResources(quietProject, [
        { op: 'update', resource: { resourceType: 'Patient', id: 'q1', name: [{ family: 'Quiet' }] } },
      ]);
      const noisyClient = await t.newClient(noisyProject, { name: 'noisy', scope: 'system/*.*' });
      noisy = await t.bearer(noisyClient.id, noisyClient.secret);
      quietClient = await t.newClient(quietProject, { name: 'quiet', scope: 'system/*.*' });
      quietToken = await t.bearer(quietClient.id, quietClient.secret);
      quietRead = 'Patient/q1';
      server = t.app.listen(0, '127.0.0.1');
      await new Promise<void>((resolve) => server.once('listening', resolve));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    }, 300_000);
    afterAll(async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await t.close();
    });

    const quietRequests: [string, () => Promise<Response>][] = [
      ['read', () => fetch(`${base}/fhir/R4/${quietRead}`, { headers: { Authorization: quietToken } })],
      [
        'search',
        () => fetch(`${base}/fhir/R4/Patient?name=quiet`, { headers: { Authorization: quietToken } }),
      ],
      [
        'token',
        () =>
          fetch(`${base}/oauth2/token`, {
            method: 'POST',
            headers: {
              'Content-Type': 'application/x-www-form-urlencoded',
              Authorization: `Basic ${Buffer.from(`${quietClient.id}:${quietClient.secret}`).toString('base64')}`,
            },
            body: 'grant_type=client_credentials',
          }),
      ],
      ['readyz', () => fetch(`${base}/readyz`)],
      ['healthz', () => fetch(`${base}/healthz`)],
    ];

    it("keeps another project's reads, searches, tokens and readiness answering while one runs 12 costly searches", async () => {
      const costly = Array.from({ length: 12 }, (_, i) => COSTLY[i % COSTLY.length]!).map((url) =>
        timed(url, () => fetch(`${base}/fhir/R4/${url}`, { headers: { Authorization: noisy } })),
      );
      let done = false;
      const all = Promise.all(costly).finally(() => (done = true));
      const quiet: Sample[] = [];
      // The other project's requests, one after another, for as long as the costly ones run.
      while (!done) {
        for (const [what, run] of quietRequests) quiet.push(await timed(what, run));
      }
      const answered = await all;
      for (const sample of answered) {
        expect([200, 400, 429], `${sample.what}: ${sample.status}`).toContain(sample.status);
        expect(sample.ms, sample.what).toBeLessThan(COSTLY_BOUND_MS);
      }
      expect(quiet.length).toBeGreaterThanOrEqual(quietRequests.length);
      const failed = quiet.filter((s) => s.status >= 500 || s.status === 429 || s.status === 401);
      expect(failed).toEqual([]);
      const slowest = quiet.reduce((a, b) => (b.ms > a.ms ? b : a));
      expect(slowest.ms, `${slowest.what} took ${Math.round(slowest.ms)} ms`).toBeLessThan(QUIET_BOUND_MS);
    });
  });
}

fairnessSuite('file', () => fileStorage({ dir: tempDir('fpk-fairness-'), durability: 'write' }));
const url = postgresTestUrl('tenant fairness: PostgreSQL');
if (url) {
  const schema = schemaFactory(url);
  fairnessSuite('PostgreSQL', () => postgresStorage({ connectionString: url, schema: schema() }));
}
