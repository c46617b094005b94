import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// FHIR search over HTTP through the search module, on each store: the same answers everywhere.
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });

async function appOver(storage: Storage): Promise<express.Express> {
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return app;
}

async function post(app: express.Express, resource: Record<string, unknown>): Promise<string> {
  const res = await request(app)
    .post(`${BASE}/${String(resource.resourceType)}`)
    .set('Authorization', auth)
    .send(resource);
  expect(res.status).toBe(201);
  return res.body.id as string;
}

/** The ids a search answers, sorted. */
async function ids(app: express.Express, query: string, prefer?: string): Promise<string[]> {
  const req = request(app).get(`${BASE}/${query}`).set('Authorization', auth);
  const res = await (prefer ? req.set('Prefer', prefer) : req);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return (res.body.entry as { resource: { id: string }; search: { mode: string } }[])
    .filter((e) => e.search.mode === 'match')
    .map((e) => e.resource.id)
    .sort();
}

function searchSuite(name: string, open: () => Storage | Promise<Storage>): void {
  describe(`search over HTTP: ${name}`, () => {
    it('answers Patient?name=Smith with the Smiths only, and every parameter type alike', async () => {
      const app = await appOver(await open());
      const smith = await post(app, {
        resourceType: 'Patient',
        name: [{ family: 'Smith', given: ['Ann'] }],
        gender: 'female',
        birthDate: '2020-06-01',
      });
      const smyth = await post(app, {
        resourceType: 'Patient',
        name: [{ family: 'Smyth', given: ['Bob'] }],
        gender: 'male',
        birthDate: '1990-01-01',
      });
      const jones = await post(app, { resourceType: 'Patient', name: [{ family: 'Jones' }], gender: 'male' });
      const obs = await post(app, {
        resourceType: 'Observation',
        status: 'final',
        code: { coding: [{ system: 'http://loinc.org', code: '8480-6' }] },
        subject: { reference: `Patient/${smith}` },
        valueQuantity: { value: 120, system: 'http://unitsofmeasure.org', code: 'mm[Hg]' },
        effectiveDateTime: '2024-03-01T10:00:00Z',
      });
      await post(app, {
        resourceType: 'Observation',
        status: 'final',
        code: { coding: [{ system: 'http://loinc.org', code: '1234-5' }] },
        subject: { reference: `Patient/${jones}` },
      });

      expect(await ids(app, 'Patient?name=Smith')).toEqual([smith]);
      expect(await ids(app, 'Patient?name=sm')).toEqual([smith, smyth].sort());
      expect(await ids(app, 'Patient?gender=male')).toEqual([smyth, jones].sort());
      expect(await ids(app, 'Patient?birthdate=2020')).toEqual([smith]);
      expect(await ids(app, 'Patient?birthdate=lt2000&gender=male')).toEqual([smyth]);
      expect(await ids(app, 'Patient?birthdate:missing=true')).toEqual([jones]);
      expect(await ids(app, 'Observation?code=http://loinc.org|8480-6')).toEqual([obs]);
      expect(await ids(app, 'Observation?value-quantity=gt100|http://unitsofmeasure.org|mm[Hg]')).toEqual([
        obs,
      ]);
      expect(await ids(app, `Observation?patient=${smith}&date=2024-03`)).toEqual([obs]);
      expect(await ids(app, 'Observation?subject:Patient.name=smith')).toEqual([obs]);
      expect(await ids(app, 'Patient?_has:Observation:patient:code=1234-5')).toEqual([jones]);
      expect(await ids(app, `Patient?_id=${smith},${jones}&gender=female`)).toEqual([smith]);

      const counted = await request(app)
        .get(`${BASE}/Patient?gender=male&_summary=count`)
        .set('Authorization', auth);
      expect(counted.body.total).toBe(2);
      const paged = await request(app).get(`${BASE}/Patient?gender=male&_count=1`).set('Authorization', auth);
      expect(paged.body).not.toHaveProperty('total');
      expect(paged.body.entry).toHaveLength(1);
      expect(paged.body.link.find((l: { relation: string }) => l.relation === 'next').url).toContain(
        'gender=male',
      );
    });

    it('answers 400 naming an unknown parameter, and ignores it under handling=lenient', async () => {
      const app = await appOver(await open());
      await post(app, { resourceType: 'Patient', name: [{ family: 'Smith' }] });
      const res = await request(app).get(`${BASE}/Patient?nickname=x`).set('Authorization', auth);
      expect(res.status).toBe(400);
      expect(res.body.issue[0].expression).toEqual(['nickname']);
      expect(await ids(app, 'Patient?nickname=x&name=smith', 'handling=lenient')).toHaveLength(1);
      const unsupported = await request(app).get(`${BASE}/Patient?_content=smith`).set('Authorization', auth);
      expect(unsupported.status).toBe(400);
      expect(unsupported.body.issue[0].code).toBe('not-supported');
    });

    it('a conditional create searches with the same module', async () => {
      const app = await appOver(await open());
      const id = await post(app, { resourceType: 'Patient', name: [{ family: 'Smith' }], gender: 'female' });
      const again = await request(app)
        .post(`${BASE}/Patient`)
        .set('Authorization', auth)
        .set('If-None-Exist', 'name=smith&gender=female')
        .send({ resourceType: 'Patient', name: [{ family: 'Smith' }] });
      expect(again.status).toBe(200);
      expect(again.body.id).toBe(id);
      const other = await request(app)
        .post(`${BASE}/Patient`)
        .set('Authorization', auth)
        .set('If-None-Exist', 'name=smith&gender=male')
        .send({ resourceType: 'Patient', name: [{ family: 'Smith' }], gender: 'male' });
      expect(other.status).toBe(201);
    });
  });
}

forEachStore('search over HTTP', searchSuite);
