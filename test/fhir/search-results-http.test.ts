import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// The result parameters of FHIR search over HTTP (_include, _revinclude, _sort, _summary,
// _elements, _total, _count, paging links, POST _search), on each store: the same answers everywhere.
const BASE = '/api/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const SUBSETTED = { system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue', code: 'SUBSETTED' };

interface Entry {
  fullUrl?: string;
  resource: { resourceType: string; id: string; [key: string]: unknown };
  search: { mode: string };
}
interface Bundle {
  total?: number;
  link: { relation: string; url: string }[];
  entry: Entry[];
}

async function appOver(storage: Storage): Promise<express.Express> {
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return app;
}

async function put(app: express.Express, resource: Record<string, unknown>, token = auth): Promise<void> {
  const res = await request(app)
    .put(`${BASE}/${String(resource.resourceType)}/${String(resource.id)}`)
    .set('Authorization', token)
    .send(resource);
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
}

async function search(app: express.Express, query: string, token = auth): Promise<Bundle> {
  const res = await request(app).get(`${BASE}/${query}`).set('Authorization', token);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as Bundle;
}

const keys = (bundle: Bundle, mode: string): string[] =>
  bundle.entry
    .filter((e) => e.search.mode === mode)
    .map((e) => `${e.resource.resourceType}/${e.resource.id}`);
const ids = (bundle: Bundle): string[] =>
  bundle.entry.filter((e) => e.search.mode === 'match').map((e) => e.resource.id);
const linkOf = (bundle: Bundle, relation: string): string | undefined =>
  bundle.link.find((l) => l.relation === relation)?.url;
/** The issue codes of the outcome entry; undefined without one. */
const outcome = (bundle: Bundle): { issue: { code: string }[] } | undefined =>
  bundle.entry.find((e) => e.search.mode === 'outcome')?.resource as
    { issue: { code: string }[] } | undefined;

/** Follows a link of an answer (absolute URL) with the same token. */
async function follow(app: express.Express, url: string, token = auth): Promise<Bundle> {
  const u = new URL(url);
  const res = await request(app).get(`${u.pathname}${u.search}`).set('Authorization', token);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as Bundle;
}

/** Patients pa..pe, a practitioner, observations of pa, pb (twice) and of a Group. */
async function seed(app: express.Express): Promise<void> {
  await put(app, { resourceType: 'Practitioner', id: 'dr', name: [{ family: 'Who' }] });
  const patients: [string, string | undefined, string | undefined][] = [
    ['pa', 'Baker', '1980-05-01'],
    ['pb', 'adams', '1990-01-01'],
    ['pc', 'Baker', '1970-01-01'],
    ['pd', 'Älvarez', undefined],
    ['pe', undefined, '2000-01-01'],
  ];
  for (const [id, family, birthDate] of patients) {
    await put(app, {
      resourceType: 'Patient',
      id,
      text: { status: 'generated', div: '<div xmlns="http://www.w3.org/1999/xhtml">x</div>' },
      ...(family ? { name: [{ family, given: ['X'] }] } : {}),
      ...(birthDate ? { birthDate } : {}),
      gender: 'other',
      contact: [{ name: { text: 'Kin' } }],
      generalPractitioner: [{ reference: 'Practitioner/dr' }],
    });
  }
  await put(app, { resourceType: 'Group', id: 'g1', type: 'person', actual: true });
  const obs: [string, string, number][] = [
    ['oa', 'Patient/pa', 5],
    ['ob1', 'Patient/pb', 7],
    ['ob2', 'Patient/pb', 6],
    ['og', 'Group/g1', 9],
  ];
  for (const [id, subject, value] of obs) {
    await put(app, {
      resourceType: 'Observation',
      id,
      status: 'final',
      code: { coding: [{ system: 'http://loinc.org', code: '1234-5' }] },
      subject: { reference: subject },
      performer: [{ reference: 'Practitioner/dr' }],
      valueQuantity: { value, unit: 'mg' },
    });
  }
}

function resultsSuite(name: string, open: () => Storage | Promise<Storage>): void {
  describe(`search results over HTTP: ${name}`, () => {
    it('_include adds the referenced resources once, as include entries, with :Type, * and :iterate', async () => {
      const app = await appOver(await open());
      await seed(app);
      const subject = await search(app, 'Observation?_include=Observation:subject&_sort=_id&_total=accurate');
      expect(ids(subject)).toEqual(['oa', 'ob1', 'ob2', 'og']);
      expect(keys(subject, 'include').sort()).toEqual(['Group/g1', 'Patient/pa', 'Patient/pb']);
      expect(subject.total).toBe(4);
      expect(subject.entry.find((e) => e.search.mode === 'include')?.fullUrl).toMatch(
        /^http.*\/api\/fhir\/R4\//,
      );
      const typed = await search(app, 'Observation?_include=Observation:subject:Patient');
      expect(keys(typed, 'include').sort()).toEqual(['Patient/pa', 'Patient/pb']);
      const all = await search(app, 'Observation?_id=oa&_include=*');
      expect(keys(all, 'include').sort()).toEqual(['Patient/pa', 'Practitioner/dr']);
      const iterated = await search(
        app,
        'Observation?_id=oa&_include=Observation:subject&_include:iterate=Patient:general-practitioner',
      );
      expect(keys(iterated, 'include').sort()).toEqual(['Patient/pa', 'Practitioner/dr']);
      // Without :iterate, a Patient parameter applies to the matches only (Observations): nothing.
      const flat = await search(app, 'Patient?_id=pa&_include=Patient:general-practitioner');
      expect(keys(flat, 'include')).toEqual(['Practitioner/dr']);
      // The links repeat the include.
      expect(decodeURIComponent(linkOf(subject, 'self')!)).toContain('_include=Observation:subject');
    });

    it('_revinclude adds the resources referencing the page, of the page only', async () => {
      const app = await appOver(await open());
      await seed(app);
      const page = await search(app, 'Patient?_revinclude=Observation:subject&_sort=_id&_count=2');
      expect(ids(page)).toEqual(['pa', 'pb']);
      expect(keys(page, 'include').sort()).toEqual(['Observation/oa', 'Observation/ob1', 'Observation/ob2']);
      const next = await follow(app, linkOf(page, 'next')!);
      expect(ids(next)).toEqual(['pc', 'pd']);
      expect(keys(next, 'include')).toEqual([]);
      const performer = await search(app, 'Practitioner?_revinclude=Observation:performer');
      expect(keys(performer, 'include')).toHaveLength(4);
      const both = await search(
        app,
        'Practitioner?_revinclude=Patient:general-practitioner&_revinclude:iterate=Observation:subject',
      );
      expect(keys(both, 'include')).toHaveLength(5 + 3);
    });

    it(':iterate stops after 3 levels with a warning', async () => {
      const app = await appOver(await open());
      // l0 -> l1 -> l2 -> l3 -> l4 through Patient.link.
      for (let i = 4; i >= 0; i--) {
        await put(app, {
          resourceType: 'Patient',
          id: `l${i}`,
          ...(i < 4 ? { link: [{ other: { reference: `Patient/l${i + 1}` }, type: 'seealso' }] } : {}),
        });
      }
      const res = await search(app, 'Patient?_id=l0&_include:iterate=Patient:link');
      expect(keys(res, 'include')).toEqual(['Patient/l1', 'Patient/l2', 'Patient/l3']);
      const issue = outcome(res)!.issue;
      expect(issue.map((i) => i.code)).toEqual(['too-costly']);
      const short = await search(app, 'Patient?_id=l2&_include:iterate=Patient:link');
      expect(keys(short, 'include')).toEqual(['Patient/l3', 'Patient/l4']);
      expect(outcome(short)).toBeUndefined();
    });

    it('includes never leak: another project, a type the token may not read', async () => {
      const app = await appOver(await open());
      const other = testToken({ projectId: 'p2', scopes: ['system/*.*'] });
      await put(app, { resourceType: 'Patient', id: 'elsewhere', name: [{ family: 'Secret' }] }, other);
      await put(
        app,
        {
          resourceType: 'Observation',
          id: 'o1',
          status: 'final',
          code: { text: 'x' },
          subject: { reference: 'Patient/elsewhere' },
        },
        other,
      );
      await put(app, {
        resourceType: 'Observation',
        id: 'o1',
        status: 'final',
        code: { text: 'x' },
        subject: { reference: 'Patient/elsewhere' },
      });
      const cross = await search(app, 'Observation?_include=Observation:subject');
      expect(keys(cross, 'include')).toEqual([]);
      await put(app, { resourceType: 'Patient', id: 'mine' });
      await put(app, {
        resourceType: 'Observation',
        id: 'o2',
        status: 'final',
        code: { text: 'x' },
        subject: { reference: 'Patient/mine' },
      });
      const obsOnly = testToken({ projectId: 'p1', scopes: ['system/Observation.rs'] });
      const refused = await search(app, 'Observation?_include=Observation:subject', obsOnly);
      expect(keys(refused, 'include')).toEqual([]);
      expect(outcome(refused)!.issue.map((i) => i.code)).toEqual(['suppressed']);
      const patientOnly = testToken({ projectId: 'p1', scopes: ['system/Patient.rs'] });
      const rev = await search(app, 'Patient?_revinclude=Observation:subject', patientOnly);
      expect(ids(rev)).toEqual(['mine']);
      expect(keys(rev, 'include')).toEqual([]);
      // p2 sees its own Patient through the same include.
      expect(keys(await search(app, 'Observation?_include=Observation:subject', other), 'include')).toEqual([
        'Patient/elsewhere',
      ]);
    });

    it('_sort on several keys, each way, ties by id, missing values last', async () => {
      const app = await appOver(await open());
      await seed(app);
      // Family case- and accent-insensitive: adams, Älvarez, Baker (pa, pc), none (pe).
      expect(ids(await search(app, 'Patient?_sort=family'))).toEqual(['pb', 'pd', 'pa', 'pc', 'pe']);
      expect(ids(await search(app, 'Patient?_sort=-family'))).toEqual(['pa', 'pc', 'pd', 'pb', 'pe']);
      expect(ids(await search(app, 'Patient?_sort=family,-birthdate'))).toEqual([
        'pb',
        'pd',
        'pa',
        'pc',
        'pe',
      ]);
      expect(ids(await search(app, 'Patient?_sort=-family,birthdate'))).toEqual([
        'pc',
        'pa',
        'pd',
        'pb',
        'pe',
      ]);
      expect(ids(await search(app, 'Patient?_sort=-birthdate'))).toEqual(['pe', 'pb', 'pa', 'pc', 'pd']);
      expect(ids(await search(app, 'Observation?_sort=-value-quantity'))).toEqual(['og', 'ob1', 'ob2', 'oa']);
      expect(ids(await search(app, 'Observation?_sort=subject,_id'))).toEqual(['og', 'oa', 'ob1', 'ob2']);
      expect(ids(await search(app, 'Patient?_sort=-_id'))).toEqual(['pe', 'pd', 'pc', 'pb', 'pa']);

      // Paged, forwards then backwards: the same order, every match once.
      // `_total` goes along the links: every page counts.
      let page = await search(app, 'Patient?_sort=-family,birthdate&_count=2&_total=accurate');
      const walked = [...ids(page)];
      while (linkOf(page, 'next')) {
        page = await follow(app, linkOf(page, 'next')!);
        walked.push(...ids(page));
        expect(page.total).toBe(5);
      }
      expect(walked).toEqual(['pc', 'pa', 'pd', 'pb', 'pe']);
      const back = [...ids(page)];
      while (linkOf(page, 'previous')) {
        page = await follow(app, linkOf(page, 'previous')!);
        back.unshift(...ids(page));
      }
      expect(back).toEqual(walked);
      expect(linkOf(page, 'next')).toBeDefined();
    });

    it('_summary, _elements, _total and _count=0', async () => {
      const app = await appOver(await open());
      await seed(app);
      const summary = await search(app, 'Patient?_id=pa&_summary=true&_include=Patient:general-practitioner');
      const [pa, dr] = summary.entry.map((e) => e.resource);
      expect(Object.keys(pa!).sort()).toEqual(
        ['resourceType', 'id', 'meta', 'name', 'birthDate', 'gender'].sort(),
      );
      expect((pa!.meta as { tag: unknown[] }).tag).toEqual([SUBSETTED]);
      expect(dr).toMatchObject({ resourceType: 'Practitioner', name: [{ family: 'Who' }] });
      expect((dr!.meta as { tag: unknown[] }).tag).toEqual([SUBSETTED]);
      const text = (await search(app, 'Patient?_id=pa&_summary=text')).entry[0]!.resource;
      expect(Object.keys(text).sort()).toEqual(['id', 'meta', 'resourceType', 'text']);
      const data = (await search(app, 'Patient?_id=pa&_summary=data')).entry[0]!.resource;
      expect(data.text).toBeUndefined();
      expect(data.contact).toBeDefined();
      expect((data.meta as { tag: unknown[] }).tag).toEqual([SUBSETTED]);
      const whole = (await search(app, 'Patient?_id=pa&_summary=false')).entry[0]!.resource;
      expect(whole.text).toBeDefined();
      expect(whole.meta).not.toHaveProperty('tag');

      const elements = await search(app, 'Observation?_id=oa&_elements=subject&_include=Observation:subject');
      const [oa, patient] = elements.entry.map((e) => e.resource);
      // status and code are mandatory: kept.
      expect(Object.keys(oa!).sort()).toEqual(['code', 'id', 'meta', 'resourceType', 'status', 'subject']);
      expect((oa!.meta as { tag: unknown[] }).tag).toEqual([SUBSETTED]);
      // _elements names Observation elements: the included Patient goes whole.
      expect(patient).toMatchObject({ id: 'pa', contact: [{ name: { text: 'Kin' } }] });
      expect(decodeURIComponent(linkOf(elements, 'self')!)).toContain('_elements=subject');

      expect(await search(app, 'Patient')).not.toHaveProperty('total');
      expect(await search(app, 'Patient?_total=none')).not.toHaveProperty('total');
      expect((await search(app, 'Patient?_total=accurate')).total).toBe(5);
      expect((await search(app, 'Patient?_total=estimate')).total).toBe(5);
      const counted = await search(app, 'Patient?_count=0&_include=Patient:general-practitioner');
      expect(counted.total).toBe(5);
      expect(counted.entry).toEqual([]);
      expect(linkOf(counted, 'next')).toBeUndefined();
      const bad = await request(app)
        .get(`${BASE}/Patient?_summary=true&_elements=name`)
        .set('Authorization', auth);
      expect(bad.status).toBe(400);
    });

    it('a page walk while others write neither repeats nor skips what existed before it', async () => {
      const app = await appOver(await open());
      for (let i = 0; i < 12; i++) {
        await put(app, {
          resourceType: 'Patient',
          id: `w${String(i).padStart(2, '0')}`,
          name: [{ family: `F${i % 4}` }],
        });
      }
      for (const sort of ['', '&_sort=_id', '&_sort=-_lastUpdated', '&_sort=family']) {
        const existing = new Set<string>();
        for (const e of (await search(app, 'Patient?_count=1000')).entry) existing.add(e.resource.id);
        let page = await search(app, `Patient?_count=3${sort}`);
        const seen = [...ids(page)];
        let n = 0;
        while (linkOf(page, 'next')) {
          // Between pages: a new Patient, and a seen one deleted (offset paging would skip one).
          n += 1;
          await put(app, { resourceType: 'Patient', id: `new${sort.length}x${n}`, name: [{ family: 'F0' }] });
          const gone = seen.find((id) => existing.has(id));
          if (gone !== undefined) {
            await request(app).delete(`${BASE}/Patient/${gone}`).set('Authorization', auth);
            existing.delete(gone);
            seen.push(`deleted:${gone}`);
          }
          page = await follow(app, linkOf(page, 'next')!);
          seen.push(...ids(page));
        }
        const matched = seen.filter((id) => !id.startsWith('deleted:'));
        expect(new Set(matched).size, sort).toBe(matched.length);
        for (const id of existing) expect(matched, `${sort}: ${id}`).toContain(id);
      }
      // Under _sort=_id an update does not move a resource: a walk with updates neither repeats nor skips.
      let page = await search(app, 'Patient?_count=4&_sort=_id');
      const all = (await search(app, 'Patient?_count=1000&_sort=_id')).entry.map((e) => e.resource.id);
      const seen = [...ids(page)];
      while (linkOf(page, 'next')) {
        for (const id of all) await put(app, { resourceType: 'Patient', id, active: true });
        page = await follow(app, linkOf(page, 'next')!);
        seen.push(...ids(page));
      }
      expect(seen).toEqual(all);
    });

    it('POST _search with a form body answers as GET; a bad _cursor is a 400', async () => {
      const app = await appOver(await open());
      await seed(app);
      const got = await search(
        app,
        'Patient?family=baker&_sort=-birthdate&_include=Patient:general-practitioner',
      );
      const posted = await request(app)
        .post(`${BASE}/Patient/_search?_sort=-birthdate`)
        .set('Authorization', auth)
        .type('form')
        .send('family=baker&_include=Patient:general-practitioner');
      expect(posted.status).toBe(200);
      expect(posted.body.entry.map((e: Entry) => e.resource.id)).toEqual(got.entry.map((e) => e.resource.id));
      expect(ids(posted.body as Bundle)).toHaveLength(2);
      expect(decodeURIComponent(linkOf(posted.body as Bundle, 'self')!)).toMatch(
        /\/Patient\?_sort=-birthdate&family=baker&_include=Patient:general-practitioner&_count=20$/,
      );
      const empty = await request(app).post(`${BASE}/Patient/_search`).set('Authorization', auth);
      expect(empty.status).toBe(200);
      expect(ids(empty.body as Bundle)).toHaveLength(5);
      const json = await request(app)
        .post(`${BASE}/Patient/_search`)
        .set('Authorization', auth)
        .send({ a: 1 });
      expect(json.status).toBe(415);
      const getSearch = await request(app).get(`${BASE}/Patient/_search`).set('Authorization', auth);
      expect(getSearch.status).toBe(405);

      const page = await search(app, 'Patient?_count=2&_sort=family');
      const next = new URL(linkOf(page, 'next')!);
      const cursor = next.searchParams.get('_cursor')!;
      for (const query of [
        `_cursor=${cursor}&_sort=-family`,
        '_cursor=abc',
        `_cursor=${cursor}&_sort=family&_offset=2`,
      ]) {
        const res = await request(app).get(`${BASE}/Patient?${query}`).set('Authorization', auth);
        expect(res.status, query).toBe(400);
      }
    });

    it('a batch GET entry answers the same searchset, includes and all', async () => {
      const app = await appOver(await open());
      await seed(app);
      const res = await request(app)
        .post(BASE)
        .set('Authorization', auth)
        .send({
          resourceType: 'Bundle',
          type: 'batch',
          entry: [
            {
              request: {
                method: 'GET',
                url: 'Observation?_id=oa&_include=Observation:subject&_elements=status',
              },
            },
          ],
        });
      expect(res.status).toBe(200);
      const searchset = res.body.entry[0].resource as Bundle;
      expect(keys(searchset, 'match')).toEqual(['Observation/oa']);
      expect(keys(searchset, 'include')).toEqual(['Patient/pa']);
      expect(searchset.entry[0]!.resource.subject).toBeUndefined();
    });
  });
}

forEachStore('search results over HTTP', resultsSuite);
