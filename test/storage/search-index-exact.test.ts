import { afterEach, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search-query.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { tempDir } from '../helpers/temp-dir.js';

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

const stores: [string, () => Promise<Storage>][] = [
  ['memory', () => Promise.resolve(memoryStorage())],
  ['file', () => fileStorage({ dir: tempDir('fpk-exact-'), durability: 'write' })],
];

describe.each(stores)('searches the %s store answers without where', (_name, open) => {
  let storage: Storage | undefined;
  afterEach(async () => {
    await storage?.close();
    storage = undefined;
  });

  /** The ids found, the total, and how many times `where` ran (the scan's answer is the same). */
  async function counted(s: Storage, params: [string, string][]) {
    const { query } = await parseSearch('Patient', params);
    const where = query.where;
    let calls = 0;
    if (where)
      query.where = (r) => {
        calls += 1;
        return where(r);
      };
    const page = await s.searchResources(P, 'Patient', query);
    const { search: _dropped, ...scan } = query;
    const scanned = await s.searchResources(P, 'Patient', { ...scan, where });
    const ids = page.resources.map((r) => r.id).sort();
    expect(ids).toEqual(scanned.resources.map((r) => r.id).sort());
    expect(page.total).toBe(scanned.total);
    return { ids, total: page.total, calls };
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
