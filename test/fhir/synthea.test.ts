import { compartmentSearch } from '../../src/storage/search-request.js';
import express from 'express';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { memoryStorage } from '../../src/stores.js';
import { patientCompartmentTypes } from '../../src/fhir/compartment.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// Optional realism check: runs only where the shared Synthea sample exists (never in a fresh clone).
const DIR = fileURLToPath(new URL('../../../shared/data/synthea-r4-100/', import.meta.url));
const exists = fs.existsSync(DIR);
const ALL = process.env.FPK_SYNTHEA_ALL === '1';
const BASE = '/api/fhir/R4';

interface Entry {
  fullUrl?: string;
  resource: Record<string, unknown> & { resourceType: string };
  request: { method: string; url: string };
}

function bundleFiles(): string[] {
  const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.json'));
  const shared = files.filter((f) => /^(hospital|practitioner)Information/.test(f));
  const patients = files.filter((f) => /_[0-9a-f]{8}-[0-9a-f]{4}-/.test(f)).sort();
  return [...shared, ...(ALL ? patients : patients.slice(0, 5))];
}

/** `value` with every `reference` found in `map` replaced, and `id` / `meta` dropped at the top. */
function expected(resource: Record<string, unknown>, map: Map<string, string>): unknown {
  const rewrite = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rewrite);
    if (v === null || typeof v !== 'object') return v;
    const out: Record<string, unknown> = {};
    for (const [k, child] of Object.entries(v)) {
      out[k] = k === 'reference' && typeof child === 'string' ? (map.get(child) ?? child) : rewrite(child);
    }
    return out;
  };
  const { id: _id, meta: _meta, ...rest } = rewrite(resource) as Record<string, unknown>;
  return rest;
}

describe.skipIf(!exists)(
  `Synthea sample (${exists ? 'present' : 'skipped: ../shared/data/synthea-r4-100 not found'}; FPK_SYNTHEA_ALL=1 loads every bundle)`,
  () => {
    let storage: Storage;
    let app: express.Express;
    const token = testToken({ projectId: 'synthea' });
    const strictToken = testToken({ projectId: 'synthea-strict' });

    beforeAll(async () => {
      storage = memoryStorage();
      await storage.createProject({ id: 'synthea', name: 'Synthea', strictMode: false });
      await storage.createProject({ id: 'synthea-strict', name: 'Synthea strict', strictMode: true });
      app = express();
      app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate }));
    });
    afterAll(async () => {
      await storage.close();
    });

    it(
      'loads every transaction bundle unchanged and every resource reads back',
      async () => {
        let total = 0;
        for (const file of bundleFiles()) {
          const text = fs.readFileSync(`${DIR}${file}`, 'utf8');
          const bundle = JSON.parse(text) as { type: string; entry: Entry[] };
          const res = await request(app)
            .post(BASE)
            .set('Authorization', token)
            .set('Content-Type', 'application/fhir+json')
            .set('Prefer', 'return=minimal')
            .send(text);
          expect(res.status, file).toBe(200);
          expect(res.body.type).toBe('transaction-response');
          expect(res.body.entry).toHaveLength(bundle.entry.length);
          const map = new Map<string, string>();
          bundle.entry.forEach((e, i) => {
            const location = res.body.entry[i].response.location as string;
            expect(res.body.entry[i].response.status).toMatch(/^201/);
            if (e.fullUrl) map.set(e.fullUrl, location.split('/_history/')[0]!);
          });
          for (const [i, e] of bundle.entry.entries()) {
            const location = (res.body.entry[i].response.location as string).split('/_history/')[0]!;
            const read = await request(app).get(`${BASE}/${location}`).set('Authorization', token);
            expect(read.status, `${file} ${location}`).toBe(200);
            const { id: _id, meta: _meta, ...actual } = read.body as Record<string, unknown>;
            expect(actual).toEqual(expected(e.resource, map));
          }
          total += bundle.entry.length;
        }
        expect(total).toBeGreaterThan(0);
      },
      ALL ? 30 * 60_000 : 120_000,
    );

    it('finds each patient compartment through the reference search parameters', async () => {
      const patients = await request(app).get(`${BASE}/Patient?_count=1`).set('Authorization', token);
      const id = patients.body.entry[0].resource.id as string;
      const obs = await request(app)
        .get(`${BASE}/Observation?patient=${id}&_count=0`)
        .set('Authorization', token);
      expect(obs.status).toBe(200);
      expect(obs.body.total).toBeGreaterThan(0);
    });

    it("$everything walks a patient's compartment and the practitioners and organizations it references", async () => {
      const patients = await request(app).get(`${BASE}/Patient?_count=1`).set('Authorization', token);
      const id = patients.body.entry[0].resource.id as string;
      const seen: { resourceType: string; id: string; mode: string; resource: Record<string, unknown> }[] =
        [];
      let next: string | undefined = `${BASE}/Patient/${id}/$everything?_count=250`;
      while (next) {
        const res: request.Response = await request(app).get(next).set('Authorization', token);
        expect(res.status, JSON.stringify(res.body).slice(0, 500)).toBe(200);
        for (const e of res.body.entry as {
          resource: { resourceType: string; id: string };
          search: { mode: string };
        }[]) {
          seen.push({ ...e.resource, mode: e.search.mode, resource: e.resource });
        }
        const link = (res.body.link as { relation: string; url: string }[]).find(
          (l) => l.relation === 'next',
        );
        next = link
          ? new URL(link.url).pathname.replace(/^.*\/R4/, BASE) + new URL(link.url).search
          : undefined;
      }
      const keys = seen.map((r) => `${r.resourceType}/${r.id}`);
      expect(new Set(keys).size).toBe(keys.length);
      expect(keys[0]).toBe(`Patient/${id}`);
      // Every compartment resource, by the compartment index of the store.
      let compartment = 0;
      for (const type of patientCompartmentTypes()) {
        compartment +=
          (
            await storage.searchResources('synthea', type, {
              search: compartmentSearch(type, [id]),
              count: 0,
            })
          ).total ?? NaN;
      }
      expect(seen.filter((r) => r.mode === 'match')).toHaveLength(compartment);
      // The sample's encounters and claims reference practitioners and organizations: each comes once.
      const included = new Set(seen.filter((r) => r.mode === 'include').map((r) => r.resourceType));
      expect([...included].sort()).toEqual(['Organization', 'Practitioner']);
    });

    it('loads a patient bundle into a strict project (the data is valid R4)', async () => {
      const file = bundleFiles().find((f) => f.includes('_'))!;
      const res = await request(app)
        .post(BASE)
        .set('Authorization', strictToken)
        .set('Content-Type', 'application/fhir+json')
        .set('Prefer', 'return=minimal')
        .send(fs.readFileSync(`${DIR}${file}`, 'utf8'));
      expect(res.status, JSON.stringify(res.body).slice(0, 2000)).toBe(200);
    });
  },
);
