import { afterEach, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import type { FaultHook } from '../../src/storage/file/faults.js';
import { createFileStorage } from '../../src/storage/file/file-storage.js';
import { fileStorage, memoryStorage, r4SearchIndexer } from '../../src/stores.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { tempDir } from '../helpers/temp-dir.js';
import { allReads, countingIndexer, scannedQuery, type MatcherCalls } from '../helpers/search-reads.js';

// `_id`, `_lastUpdated` and a plain `identifier` are answered by the stores' own indexes (the
// query's `ids`, `lastUpdated`, `identifier`): combined with filters the postings answer exactly,
// the search needs no `where`, so it reads only its page's bodies (a count, none).

const P = 'p1';
const SYS = 'urn:mrn';

const patient = (i: number): FhirResource => ({
  resourceType: 'Patient',
  id: `p${i}`,
  identifier: [{ system: SYS, value: `m${i % 10}` }],
  name: [{ family: i % 2 === 0 ? 'Even' : 'Odd' }],
  gender: i % 3 === 0 ? 'female' : 'male',
});

/** What the stores' matchers did (`countingIndexer`): zero tests when the postings answer exactly. */
const calls: MatcherCalls = { tests: 0, reads: [] };
const stores: [string, () => Promise<Storage>][] = [
  ['memory', () => Promise.resolve(memoryStorage({ indexer: countingIndexer(calls) }))],
  [
    'file',
    () => fileStorage({ dir: tempDir('fpk-exact-'), durability: 'write', indexer: countingIndexer(calls) }),
  ],
];

describe.each(stores)('searches the %s store answers without where', (_name, open) => {
  let storage: Storage | undefined;
  afterEach(async () => {
    await storage?.close();
    storage = undefined;
  });

  /** The ids found, the total, and how many candidates the matcher tested (the scan's answer is the same). */
  async function counted(s: Storage, params: [string, string][]) {
    const { query } = await parseSearch('Patient', params, {}, allReads());
    calls.tests = 0;
    const page = await s.searchResources(P, 'Patient', query);
    const tested = calls.tests;
    const scanned = await s.searchResources(P, 'Patient', await scannedQuery(s, P, query));
    const ids = page.resources.map((r) => r.id).sort();
    expect(ids).toEqual(scanned.resources.map((r) => r.id).sort());
    expect(page.total).toBe(scanned.total);
    return { ids, total: page.total, calls: tested };
  }

  it('_id, _lastUpdated and identifier with exact filters', async () => {
    const s = (storage = await open());
    await s.createProject({ id: P, name: 'P', strictMode: false });
    await s.writeResources(
      P,
      Array.from({ length: 60 }, (_, i) => ({ op: 'create' as const, resource: patient(i) })),
    );
    // Built by a first search each.
    await counted(s, [['name', 'x']]);
    await counted(s, [['gender', 'x']]);
    expect(
      await counted(s, [
        ['_id', 'p3,p4,p6'],
        ['gender', 'female'],
      ]),
    ).toEqual({
      ids: ['p3', 'p6'],
      total: 2,
      calls: 0,
    });
    expect(
      await counted(s, [
        ['identifier', `${SYS}|m4`],
        ['name', 'even'],
      ]),
    ).toEqual({
      ids: ['p14', 'p24', 'p34', 'p4', 'p44', 'p54'],
      total: 6,
      calls: 0,
    });
    expect(
      await counted(s, [
        ['identifier', 'm5'],
        ['name', 'even'],
      ]),
    ).toEqual({ ids: [], total: 0, calls: 0 });
    const later = await counted(s, [
      ['_lastUpdated', 'ge2000-01-01'],
      ['_lastUpdated', 'lt2999'],
      ['gender', 'female'],
      ['_summary', 'count'],
    ]);
    expect(later).toEqual({ ids: [], total: 20, calls: 0 });
    const none = await counted(s, [
      ['_lastUpdated', 'lt2000'],
      ['name', 'odd'],
    ]);
    expect(none).toEqual({ ids: [], total: 0, calls: 0 });
    // A filter the postings do not answer exactly (`:not`) keeps `where`.
    const not = await counted(s, [
      ['_id', 'p3,p4,p6'],
      ['gender:not', 'female'],
    ]);
    expect(not.ids).toEqual(['p4']);
    expect(not.calls).toBeGreaterThan(0);
    // A write and a delete are seen at once.
    await s.updateResource(P, { ...patient(4), gender: 'female', id: 'p4' });
    await s.deleteResource(P, 'Patient', 'p6');
    expect(
      await counted(s, [
        ['_id', 'p3,p4,p6'],
        ['gender', 'female'],
      ]),
    ).toEqual({
      ids: ['p3', 'p4'],
      total: 2,
      calls: 0,
    });
  });
});

describe('_sort from the postings (file store)', () => {
  const person = (i: number): FhirResource => ({
    resourceType: 'Patient',
    id: `s${i}`,
    name: [{ family: ['Ólafsson', 'berg', 'Adams', 'Zed', 'adams'][i % 5]!, given: [`G${i % 7}`] }],
    gender: i % 2 === 0 ? 'female' : 'male',
    // Every third has no birth date (sorts last both ways); some have only a year.
    ...(i % 3 === 0
      ? {}
      : { birthDate: i % 4 === 0 ? `19${50 + (i % 9)}` : `19${50 + (i % 9)}-0${1 + (i % 8)}-1${i % 10}` }),
  });

  it('orders by string and date parameters reading only the page bodies, as the scan does', async () => {
    let reads = 0;
    const faults: FaultHook = (op) => {
      if (op === 'read') reads += 1;
    };
    const s = await createFileStorage(
      {
        dir: tempDir('fpk-sort-'),
        durability: 'write',
        compartment: R4_PATIENT_COMPARTMENT,
        indexer: r4SearchIndexer,
      },
      undefined,
      { faults },
    );
    try {
      await s.createProject({ id: P, name: 'P', strictMode: false });
      await s.writeResources(
        P,
        Array.from({ length: 45 }, (_, i) => ({ op: 'create' as const, resource: person(i) })),
      );
      const sorts: [string, string][][] = [
        [['_sort', 'name']],
        [['_sort', '-name']],
        [['_sort', 'birthdate']],
        [['_sort', '-birthdate,name']],
        [
          ['_sort', 'family,-birthdate'],
          ['gender', 'female'],
        ],
      ];
      for (const params of sorts) {
        const { query } = await parseSearch('Patient', [...params, ['_count', '7']], {}, allReads());
        await s.searchResources(P, 'Patient', query); // Builds the postings.
        reads = 0;
        const page = await s.searchResources(P, 'Patient', query);
        expect(reads).toBe(7);
        const scan = await scannedQuery(s, P, query);
        const scanned = await s.searchResources(P, 'Patient', scan);
        expect(page.resources.map((r) => r.id)).toEqual(scanned.resources.map((r) => r.id));
        expect(page.total).toBe(scanned.total);
        // The next page, from a cursor taken from the body (as the router does), continues it.
        const last = page.resources.at(-1)!;
        const after = { id: last.id, keys: query.order!.keys(last) };
        const next = await s.searchResources(P, 'Patient', { ...query, after });
        const scannedNext = await s.searchResources(P, 'Patient', { ...scan, after });
        expect(next.resources.map((r) => r.id)).toEqual(scannedNext.resources.map((r) => r.id));
      }
      // A filter the postings do not answer exactly: where reads the bodies, same order.
      const { query } = await parseSearch(
        'Patient',
        [
          ['_sort', 'name'],
          ['gender:not', 'female'],
        ],
        {},
        allReads(),
      );
      const scan = await scannedQuery(s, P, query);
      expect((await s.searchResources(P, 'Patient', query)).resources.map((r) => r.id)).toEqual(
        (await s.searchResources(P, 'Patient', scan)).resources.map((r) => r.id),
      );
    } finally {
      await s.close();
    }
  });
});

describe.each(stores)('a two-level chain on the %s store', (_name, open) => {
  it('is answered through the postings of all three types, without where', async () => {
    const s = await open();
    try {
      await s.createProject({ id: P, name: 'P', strictMode: false });
      const org = (id: string, name: string): FhirResource => ({ resourceType: 'Organization', id, name });
      const pat = (id: string, orgId: string): FhirResource => ({
        resourceType: 'Patient',
        id,
        managingOrganization: { reference: `Organization/${orgId}` },
      });
      const obs = (id: string, patientId: string): FhirResource => ({
        resourceType: 'Observation',
        id,
        status: 'final',
        code: { text: 'x' },
        subject: { reference: `Patient/${patientId}` },
      });
      await s.writeResources(
        P,
        [
          org('acme', 'Acme Health'),
          org('zen', 'Zenith'),
          pat('pa', 'acme'),
          pat('pb', 'zen'),
          pat('pc', 'acme'),
          obs('o1', 'pa'),
          obs('o2', 'pb'),
          obs('o3', 'pc'),
          obs('o4', 'pb'),
        ].map((resource) => ({ op: 'create' as const, resource })),
      );
      const answer = async (type: string, params: [string, string][]) => {
        const { query } = await parseSearch(type, params, {}, allReads());
        calls.tests = 0;
        const page = await s.searchResources(P, type, query);
        const tested = calls.tests;
        const scanned = await s.searchResources(P, type, await scannedQuery(s, P, query));
        const ids = page.resources.map((r) => r.id).sort();
        expect(ids).toEqual(scanned.resources.map((r) => r.id).sort());
        return { ids, calls: tested };
      };
      const chained = (value: string) =>
        answer('Observation', [['subject:Patient.organization:Organization.name', value]]);
      await chained('acme'); // Builds the postings.
      expect(await chained('acme')).toEqual({ ids: ['o1', 'o3'], calls: 0 });
      expect(await chained('zen')).toEqual({ ids: ['o2', 'o4'], calls: 0 });
      expect(await chained('nobody')).toEqual({ ids: [], calls: 0 });
      await s.updateResource(P, { ...(org('zen', 'Acme West') as FhirResource & { id: string }) });
      expect(await chained('acme')).toEqual({ ids: ['o1', 'o2', 'o3', 'o4'], calls: 0 });
      // `_has`: the Patients an Observation matching its filter points at, with other filters.
      await s.updateResource(P, { ...(obs('o3', 'pc') as FhirResource & { id: string }), status: 'amended' });
      await answer('Patient', [['_has:Observation:subject:status', 'final']]); // Builds.
      expect(await answer('Patient', [['_has:Observation:subject:status', 'final']])).toEqual({
        ids: ['pa', 'pb'],
        calls: 0,
      });
      expect(
        await answer('Patient', [
          ['_has:Observation:subject:status', 'amended,final'],
          ['organization', 'Organization/acme'],
        ]),
      ).toEqual({ ids: ['pa', 'pc'], calls: 0 });
      expect(
        await answer('Patient', [
          ['_has:Observation:subject:status', 'final'],
          ['_id', 'pb,pc'],
        ]),
      ).toEqual({ ids: ['pb'], calls: 0 });
      expect(await answer('Patient', [['_has:Observation:subject:status', 'cancelled']])).toEqual({
        ids: [],
        calls: 0,
      });
      // A `_has` inside `_has`: the inner one's ids, then their references.
      const nested = (value: string) =>
        answer('Organization', [['_has:Patient:organization:_has:Observation:subject:status', value]]);
      await nested('amended'); // Builds.
      expect(await nested('amended')).toEqual({ ids: ['acme'], calls: 0 });
      expect(await nested('final')).toEqual({ ids: ['acme', 'zen'], calls: 0 });
      expect(await nested('cancelled')).toEqual({ ids: [], calls: 0 });
      // A Patient deleted: its Observations no longer lead to its organization.
      await s.deleteResource(P, 'Patient', 'pc');
      expect(await nested('amended')).toEqual({ ids: [], calls: 0 });
    } finally {
      await s.close();
    }
  });
});

describe.each(stores)(':missing on the %s store', (_name, open) => {
  it('is answered from the presence postings, alone, with other filters and inside _has', async () => {
    const s = await open();
    try {
      await s.createProject({ id: P, name: 'P', strictMode: false });
      const obs = (id: string, patientId: string, value?: number): FhirResource => ({
        resourceType: 'Observation',
        id,
        status: id === 'o4' ? 'amended' : 'final',
        code: { text: 'x' },
        subject: { reference: `Patient/${patientId}` },
        ...(value === undefined ? {} : { valueQuantity: { value, unit: 'kg' } }),
      });
      await s.writeResources(
        P,
        [
          { resourceType: 'Patient', id: 'pa' },
          { resourceType: 'Patient', id: 'pb' },
          { resourceType: 'Patient', id: 'pc' },
          obs('o1', 'pa', 70),
          obs('o2', 'pb'),
          obs('o3', 'pb'),
          obs('o4', 'pc', 80),
        ].map((resource) => ({ op: 'create' as const, resource })),
      );
      const answer = async (type: string, params: [string, string][]) => {
        const { query } = await parseSearch(type, params, {}, allReads());
        calls.tests = 0;
        calls.reads = [];
        const page = await s.searchResources(P, type, query);
        const seen = { tests: calls.tests, reads: calls.reads.length };
        const scanned = await s.searchResources(P, type, await scannedQuery(s, P, query));
        const ids = page.resources.map((r) => r.id).sort();
        expect(ids).toEqual(scanned.resources.map((r) => r.id).sort());
        expect(page.total).toBe(scanned.total);
        return { ids, ...seen };
      };
      const present = (missing: string, more: [string, string][] = []) =>
        answer('Observation', [['value-quantity:missing', missing], ...more]);
      await present('false'); // Builds the presence of value-quantity.
      expect(await present('false')).toEqual({ ids: ['o1', 'o4'], tests: 0, reads: 0 });
      expect(await present('true')).toEqual({ ids: ['o2', 'o3'], tests: 0, reads: 0 });
      await answer('Observation', [['status', 'final']]); // Builds status.
      expect(await present('true', [['status', 'final']])).toEqual({ ids: ['o2', 'o3'], tests: 0, reads: 0 });
      expect(await present('false', [['status', 'amended']])).toEqual({ ids: ['o4'], tests: 0, reads: 0 });
      // `_has` over the presence: the Patients with a measured Observation, no body read.
      const measured = (missing: string) =>
        answer('Patient', [['_has:Observation:subject:value-quantity:missing', missing]]);
      await measured('false'); // Builds subject.
      expect(await measured('false')).toEqual({ ids: ['pa', 'pc'], tests: 0, reads: 0 });
      expect(await measured('true')).toEqual({ ids: ['pb'], tests: 0, reads: 0 });
      // Writes follow: a value added, a value removed, an Observation deleted.
      await s.updateResource(P, obs('o2', 'pb', 60) as FhirResource & { id: string });
      await s.updateResource(P, obs('o4', 'pc') as FhirResource & { id: string });
      await s.deleteResource(P, 'Observation', 'o3');
      expect(await present('false')).toEqual({ ids: ['o1', 'o2'], tests: 0, reads: 0 });
      expect(await present('true')).toEqual({ ids: ['o4'], tests: 0, reads: 0 });
      expect(await measured('false')).toEqual({ ids: ['pa', 'pb'], tests: 0, reads: 0 });
      expect(await measured('true')).toEqual({ ids: ['pc'], tests: 0, reads: 0 });
      // `:missing` with a filter the postings do not answer exactly keeps the test.
      const not = await present('false', [['status:not', 'final']]);
      expect(not.ids).toEqual([]);
      expect(not.tests).toBeGreaterThan(0);
    } finally {
      await s.close();
    }
  });
});
