import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { memoryStorage } from '../../src/stores.js';
import type { ResourcePage, Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// What a search may cost: bounds refused before it runs (400 too-costly), on every store; a
// project's costly reads admitted a few at a time (429 beyond its queue), and others unaffected.
const BASE = '/api/fhir/R4';
const auth = (project = 'p1') => testToken({ projectId: project, scopes: ['system/*.*'] });

async function appOver(storage: Storage, options: Partial<FhirRouterOptions> = {}): Promise<express.Express> {
  for (const id of ['p1', 'p2']) await storage.createProject({ id, name: id, strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(
    BASE,
    fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  return app;
}

const get = (app: express.Express, url: string, project = 'p1') =>
  request(app).get(`${BASE}/${url}`).set('Authorization', auth(project));

function expectTooCostly(res: request.Response, expression: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(400);
  expect(res.body.issue[0].code).toBe('too-costly');
  expect(res.body.issue[0].expression).toEqual([expression]);
}

const repeated = (n: number) => Array.from({ length: n }, (_, i) => `name=n${i}`).join('&');
const sortKeys = (n: number) =>
  ['name', 'birthdate', 'gender', 'family', 'given', 'address', 'telecom'].slice(0, n).join(',');

forEachStore('search cost bounds over HTTP', (store, open) =>
  describe(`search cost bounds over HTTP (${store})`, () => {
    it('refuses, before running, what the bounds say is too costly, and answers up to them', async () => {
      const app = await appOver(await open());
      expect((await get(app, `Patient?_sort=${sortKeys(5)}`)).status).toBe(200);
      expectTooCostly(await get(app, `Patient?_sort=${sortKeys(6)}`), '_sort');
      expect((await get(app, `Patient?${repeated(30)}`)).status).toBe(200);
      expectTooCostly(await get(app, `Patient?${repeated(31)}`), 'Patient');
      const twoHas = 'Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final';
      expect((await get(app, twoHas)).status).toBe(200);
      expectTooCostly(
        await get(
          app,
          'Patient?_has:Observation:subject:_has:DiagnosticReport:result:_has:Provenance:target:agent=x',
        ),
        '_has',
      );
      expect((await get(app, 'Patient?_offset=10000')).status).toBe(200);
      expectTooCostly(await get(app, 'Patient?_offset=10001'), '_offset');
      // The same bounds hold for the criteria of a conditional write and for a Bundle's search.
      const put = await request(app)
        .put(
          `${BASE}/Patient?_has:Observation:subject:_has:DiagnosticReport:result:_has:Provenance:target:agent=x`,
        )
        .set('Authorization', auth())
        .send({ resourceType: 'Patient' });
      expectTooCostly(put, '_has');
      const batch = await request(app)
        .post(BASE)
        .set('Authorization', auth())
        .send({
          resourceType: 'Bundle',
          type: 'batch',
          entry: [{ request: { method: 'GET', url: `Patient?_sort=${sortKeys(6)}` } }],
        });
      expect(batch.body.entry[0].response.status).toMatch(/^400/);
      expect(batch.body.entry[0].response.outcome.issue[0].code).toBe('too-costly');
    });

    it('takes its bounds from the router options', async () => {
      const app = await appOver(await open(), {
        searchLimits: { maxSortKeys: 1, maxFilters: 2, maxHasDepth: 1, maxOffset: 5 },
      });
      expectTooCostly(await get(app, 'Patient?_sort=name,gender'), '_sort');
      expectTooCostly(await get(app, `Patient?${repeated(3)}`), 'Patient');
      expectTooCostly(
        await get(app, 'Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final'),
        '_has',
      );
      expectTooCostly(await get(app, 'Patient?_offset=6'), '_offset');
      expect((await get(app, `Patient?${repeated(2)}&_sort=name&_offset=5`)).status).toBe(200);
      // The CapabilityStatement says the bounds where a client reads about those parameters.
      const metadata = await request(app).get(`${BASE}/metadata`);
      const documentation = new Map(
        (metadata.body.rest[0].searchParam as { name: string; documentation: string }[]).map((p) => [
          p.name,
          p.documentation,
        ]),
      );
      expect(documentation.get('_sort')).toContain('at most 1 keys');
      expect(documentation.get('_offset')).toContain('at most 5');
      expect(documentation.get('_has')).toContain('at most 1 deep');
      expect(documentation.get('_count')).toContain('at most 2 parameters');
    });
  }),
);

describe('search admission over HTTP', () => {
  /** A memory store whose searches wait for `release` once `hold` is set: a search in progress. */
  function heldStore(): { storage: Storage; hold(): void; release(): void; started: Promise<void> } {
    const storage = memoryStorage();
    let holding = false;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const startedPromise = new Promise<void>((resolve) => (started = resolve));
    const search = storage.searchResources.bind(storage);
    storage.searchResources = async (...args): Promise<ResourcePage> => {
      if (holding && args[0] === 'p1') {
        started();
        await released;
      }
      return search(...args);
    };
    return { storage, hold: () => (holding = true), release, started: startedPromise };
  }

  /** p1's one turn taken by a held search and its one queue place by another: the project is full. */
  async function fullTurns() {
    const held = heldStore();
    const app = await appOver(held.storage, {
      searchAdmission: { maxConcurrent: 1, maxQueued: 1, maxWaitMs: 60_000 },
    });
    held.hold();
    const first = get(app, 'Patient?name=a').then((r) => r);
    await held.started;
    const queued = get(app, 'Patient?name=b').then((r) => r);
    return { app, held, first, queued };
  }

  it("answers 429 with Retry-After beyond a project's turns and queue; another project's searches run meanwhile", async () => {
    const { app, held, first, queued } = await fullTurns();
    const refused = await get(app, 'Patient?name=c');
    expect(refused.status).toBe(429);
    expect(refused.body.issue[0].code).toBe('throttled');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    // $everything and history listings take a turn too.
    expect((await get(app, 'Patient/$everything')).status).toBe(429);
    expect((await get(app, 'Patient/_history')).status).toBe(429);
    // Another project is not held back, and reads of this one are no costly reads.
    expect((await get(app, 'Patient?name=x', 'p2')).status).toBe(200);
    expect((await get(app, 'Patient/nope')).status).toBe(404);
    held.release();
    expect((await first).status).toBe(200);
    expect((await queued).status).toBe(200);
    expect((await get(app, 'Patient?name=d')).status).toBe(200);
  });

  it('refuses a search over the cost bounds at once, without waiting for a turn of the project', async () => {
    const { app, held, first, queued } = await fullTurns();
    // Turns and queue are full: an admissible search is refused with 429, a too-costly one is told
    // what to change (400), not made to wait or throttled. So is a Bundle's search entry.
    expect((await get(app, 'Patient?name=c')).status).toBe(429);
    expectTooCostly(await get(app, `Patient?${repeated(31)}`), 'Patient');
    expectTooCostly(await get(app, 'Patient?_offset=10001'), '_offset');
    const batch = await request(app)
      .post(BASE)
      .set('Authorization', auth())
      .set('Content-Type', 'application/fhir+json')
      .send({
        resourceType: 'Bundle',
        type: 'batch',
        entry: [{ request: { method: 'GET', url: 'Patient?_offset=10001' } }],
      });
    expect(batch.status).toBe(200);
    expect(batch.body.entry[0].response.status).toMatch(/^400/);
    held.release();
    expect((await first).status).toBe(200);
    expect((await queued).status).toBe(200);
  });
});
