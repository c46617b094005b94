import express from 'express';
import pg from 'pg';
import request from 'supertest';
import { describe, expect, it, vi } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import type { Storage } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

/*
 * `_total` over HTTP on each store: a searchset has no `total` unless the request asks for one
 * (`_total=accurate` or `estimate`, `_summary=count`, `_count=0`); an exact one is refused past
 * `maxAccurateTotal`. On PostgreSQL a search that asks no total runs no count.
 */
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });

interface Bundle {
  total?: number;
  link: { relation: string; url: string }[];
  entry: {
    resource: { id: string; issue?: unknown[] };
    search?: { mode: string };
    response?: { status: string };
  }[];
}

/** A router over `storage` with nine male and three female Patients (`m1`…`m9`, `f1`…`f3`). */
async function seeded(
  open: () => Storage | Promise<Storage>,
  options: Partial<FhirRouterOptions> = {},
): Promise<express.Express> {
  const storage = await open();
  afterTest(() => storage.close());
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  const patient = (id: string, gender: string) => ({
    op: 'create' as const,
    resource: { resourceType: 'Patient', id, gender },
  });
  await storage.writeResources('p1', [
    ...Array.from({ length: 9 }, (_, i) => patient(`m${i + 1}`, 'male')),
    ...Array.from({ length: 3 }, (_, i) => patient(`f${i + 1}`, 'female')),
  ]);
  const app = express();
  app.use(
    BASE,
    fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  return app;
}

const get = (app: express.Express, path: string) =>
  request(app)
    .get(path.startsWith(BASE) ? path : `${BASE}/${path}`)
    .set('Authorization', auth);

async function search(app: express.Express, query: string): Promise<Bundle> {
  const res = await get(app, query);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as Bundle;
}

const matches = (bundle: Bundle): string[] =>
  bundle.entry.filter((e) => e.search?.mode === 'match').map((e) => e.resource.id);
const next = (bundle: Bundle): string | undefined => {
  const url = bundle.link.find((l) => l.relation === 'next')?.url;
  return url === undefined ? undefined : new URL(url).pathname + new URL(url).search;
};

/** Expects a 400 `too-costly` OperationOutcome naming `_total` and the bound. */
function expectTooCostly(res: request.Response, bound: number): void {
  expect(res.status, JSON.stringify(res.body)).toBe(400);
  expect(res.body.resourceType).toBe('OperationOutcome');
  const [issue] = res.body.issue as { code: string; expression?: string[]; diagnostics?: string }[];
  expect(issue).toMatchObject({ code: 'too-costly', expression: ['_total'] });
  expect(JSON.stringify(res.body)).toContain(String(bound));
  expect(JSON.stringify(res.body)).toContain('_total=estimate');
}

/** The SQL text of each statement the store sends while `run` runs. */
async function statementsOf(run: () => Promise<unknown>): Promise<string[]> {
  const query = vi.spyOn(pg.Client.prototype, 'query');
  try {
    await run();
    return query.mock.calls
      .map(([arg]) => (typeof arg === 'string' ? arg : (arg as { text: string }).text))
      .filter((text) => !/pg_stat_user_tables|^ANALYZE /.test(text));
  } finally {
    query.mockRestore();
  }
}

forEachStore('search totals over HTTP', (store, open) => {
  describe(`_total over HTTP: ${store}`, () => {
    it('gives no total unless asked, and pages without one', async () => {
      const app = await seeded(open);
      let page = await search(app, 'Patient?gender=male&_count=4');
      expect(page).not.toHaveProperty('total');
      const walked = matches(page);
      for (let url = next(page); url !== undefined; url = next(page)) {
        page = await search(app, url);
        expect(page).not.toHaveProperty('total');
        walked.push(...matches(page));
      }
      expect(walked.sort()).toEqual(['m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7', 'm8', 'm9']);
      expect(await search(app, 'Patient?gender=male&_total=none')).not.toHaveProperty('total');
      expect(await search(app, 'Patient')).not.toHaveProperty('total');
    });

    it('counts exactly when asked: _total=accurate, _summary=count, _count=0', async () => {
      const app = await seeded(open);
      const accurate = await search(app, 'Patient?gender=male&_count=4&_total=accurate');
      expect(accurate.total).toBe(9);
      expect(matches(accurate)).toHaveLength(4);
      // The links repeat `_total`: every page counts.
      expect((await search(app, next(accurate)!)).total).toBe(9);
      const summary = await search(app, 'Patient?gender=male&_summary=count');
      expect(summary).toMatchObject({ total: 9, entry: [] });
      expect((await search(app, 'Patient?gender=male&_count=0')).total).toBe(9);
      expect((await search(app, 'Patient?_summary=count&_total=none')).total).toBe(12);
      expect((await search(app, 'Patient?_total=accurate&_sort=-_id&_count=2')).total).toBe(12);
      expect((await search(app, 'Patient?gender=other&_total=accurate')).total).toBe(0);
    });

    it('estimates when asked: a whole number, exact on the embedded stores', async () => {
      const app = await seeded(open);
      for (const query of ['Patient?gender=male&_count=4', 'Patient?_count=2', 'Patient?gender=male']) {
        const { total } = await search(app, `${query}&_total=estimate`);
        expect(Number.isSafeInteger(total), query).toBe(true);
        if (store === 'PostgreSQL') {
          // The planner's estimate, never below what the page itself shows.
          expect(total, query).toBeGreaterThanOrEqual(query.includes('_count') ? 3 : 9);
        } else expect(total, query).toBe(query.includes('gender') ? 9 : 12);
      }
      // A page that ends before `_count` shows the number itself.
      expect((await search(app, 'Patient?gender=female&_total=estimate')).total).toBe(3);
      expect((await search(app, 'Patient?gender=male&_summary=count&_total=estimate')).total).toEqual(
        expect.any(Number),
      );
    });

    it('refuses an exact total past maxAccurateTotal with 400 too-costly, and answers up to it', async () => {
      const app = await seeded(open, { searchLimits: { maxAccurateTotal: 5 } });
      for (const query of [
        'Patient?gender=male&_total=accurate',
        'Patient?gender=male&_summary=count',
        'Patient?gender=male&_count=0',
        'Patient?_total=accurate&_count=2&_sort=_id',
        'Patient?_summary=count&_total=none',
      ]) {
        expectTooCostly(await get(app, query), 5);
      }
      expect((await search(app, 'Patient?gender=female&_total=accurate')).total).toBe(3);
      expect((await search(app, 'Patient?gender=female&_summary=count')).total).toBe(3);
      expect((await search(app, 'Patient?_id=m1,m2,m3,m4,m5&_total=accurate')).total).toBe(5);
      // No total, or an estimate: never refused.
      expect(matches(await search(app, 'Patient?gender=male'))).toHaveLength(9);
      expect((await search(app, 'Patient?gender=male&_total=estimate')).total).toEqual(expect.any(Number));
      // A batch GET entry answers the same.
      const batch = await request(app)
        .post(BASE)
        .set('Authorization', auth)
        .send({
          resourceType: 'Bundle',
          type: 'batch',
          entry: [
            { request: { method: 'GET', url: 'Patient?gender=male&_summary=count' } },
            { request: { method: 'GET', url: 'Patient?gender=female&_summary=count' } },
          ],
        });
      expect(batch.status).toBe(200);
      const [over, under] = (batch.body as Bundle).entry;
      expect(over!.response!.status).toMatch(/^400/);
      expect(JSON.stringify(over)).toContain('too-costly');
      expect(under!.response!.status).toMatch(/^200/);
      expect((under!.resource as unknown as Bundle).total).toBe(3);
    });

    if (store === 'PostgreSQL') {
      it('runs no count for a search that asks no total, and a bounded one when asked', async () => {
        const app = await seeded(open, { searchLimits: { maxAccurateTotal: 50 } });
        await search(app, 'Patient?gender=male&_count=2'); // warmed: the type's search tables exist
        const plain = await statementsOf(() => search(app, 'Patient?gender=male&_count=2'));
        expect(plain.length).toBeGreaterThan(0);
        for (const text of plain) expect(text).not.toMatch(/count\(/i);
        const counted = await statementsOf(() => search(app, 'Patient?gender=male&_count=2&_total=accurate'));
        const counts = counted.filter((text) => /count\(\*\)/i.test(text));
        expect(counts).toHaveLength(1);
        expect(counts[0]).toMatch(/LIMIT \$\d+\) c\) t/);
        const estimated = await statementsOf(() =>
          search(app, 'Patient?gender=male&_count=2&_total=estimate'),
        );
        expect(estimated.some((text) => /^EXPLAIN \(FORMAT JSON\)/.test(text))).toBe(true);
        for (const text of estimated) expect(text).not.toMatch(/count\(/i);
      });
    }
  });
});

describe('searchLimits.maxAccurateTotal', () => {
  it('is checked when the router is made: a positive integer or Infinity', () => {
    const storage = memoryStorage();
    const make = (maxAccurateTotal: unknown) => () =>
      fhirRouter({ storage, authenticate: testAuthenticate, searchLimits: { maxAccurateTotal } as never });
    for (const bad of [0, -1, 1.5, Number.NaN, '10'])
      expect(make(bad), String(bad)).toThrow(
        expect.objectContaining({
          code: 'ERR_INVALID_OPTION',
          message: expect.stringMatching(/maxAccurateTotal/),
        }),
      );
    for (const good of [1, 100_000, Infinity]) expect(make(good), String(good)).not.toThrow();
  });
});
