import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { fileStorage, memoryStorage, r4SearchIndexer } from '../../src/stores.js';
import { decodeChecked, encodeChecked } from '../../src/storage/file/log-index.js';
import type { PostingsFile } from '../../src/storage/file/postings-file.js';
import type { BaseState } from '../../src/storage/engine/state.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { tempDir } from '../helpers/temp-dir.js';
import { allReads, countingIndexer, scannedQuery, type MatcherCalls } from '../helpers/search-reads.js';

// Search through the stores' indexes (issue 30): each search is built as the FHIR router builds
// it (`parseSearch`: `query.search` plus the `where` predicate), and its answer is compared with
// the same query without `search` (every store then scans the type through `where`) and with the
// ids expected. Kept in test/ with `forEachStore` rather than in src/testing: the queries need
// src/fhir and src/search, which the contract suite (storage and common only) may not import.

const P = 'p1';
const OTHER = 'p2';
const LOINC = 'http://loinc.org';

const patients: FhirResource[] = [
  {
    resourceType: 'Patient',
    id: 'pa',
    name: [{ family: 'Smith', given: ['Ann'] }],
    gender: 'female',
    birthDate: '1970-03-04',
  },
  {
    resourceType: 'Patient',
    id: 'pb',
    name: [{ family: 'Smíthers', given: ['Bob'] }],
    gender: 'male',
    birthDate: '1985',
  },
  {
    resourceType: 'Patient',
    id: 'pc',
    name: [{ family: 'Jones', given: ['Cy'] }],
    gender: 'male',
    birthDate: '2001-12-31',
    active: true,
  },
  {
    resourceType: 'Patient',
    id: 'pd',
    name: [{ family: 'Ng' }],
    telecom: [{ system: 'phone', value: '555' }],
  },
];

const observation = (
  id: string,
  code: string,
  system: string | undefined,
  subject: string,
  value: number,
  date: string,
): FhirResource => ({
  resourceType: 'Observation',
  id,
  status: 'final',
  code: { coding: [{ ...(system === undefined ? {} : { system }), code }], text: `test ${code}` },
  subject: { reference: subject },
  valueQuantity: { value, unit: 'mg', system: 'http://unitsofmeasure.org', code: 'mg' },
  effectiveDateTime: date,
});

const observations: FhirResource[] = [
  observation('o1', '1234-5', LOINC, 'Patient/pa', 5.4, '2020-01-15T10:00:00Z'),
  observation('o2', '1234-5', LOINC, 'Patient/pb', 10, '2020-02-01'),
  observation('o3', '1234-5', 'http://other', 'Patient/pc', 100, '2021-06'),
  observation('o4', '9999-9', LOINC, 'Patient/pa', 0.5, '2019'),
  observation('o5', '1234-5', undefined, 'Patient/pd', 42, '2022-03-01T00:00:00+02:00'),
  {
    resourceType: 'Observation',
    id: 'o6',
    status: 'final',
    code: { text: 'no coding' },
    effectivePeriod: { start: '2020-01-01' },
  },
  {
    resourceType: 'Observation',
    id: 'o7',
    status: 'final',
    code: { coding: [{ system: LOINC, code: '1234-5' }] },
    subject: { reference: 'Group/pa' },
  },
];

const ids = (resources: { id: string }[]): string[] => resources.map((r) => r.id).sort();

async function search(storage: Storage, type: string, params: [string, string][], projectId = P) {
  const { query } = await parseSearch(type, params, {}, allReads());
  const page = await storage.searchResources(projectId, type, query);
  // The same query scanned: no store index narrows it, match.ts decides over the whole type.
  const scanned = await storage.searchResources(
    projectId,
    type,
    await scannedQuery(storage, projectId, query),
  );
  expect(ids(page.resources)).toEqual(ids(scanned.resources));
  expect(page.total).toBe(scanned.total);
  return { ids: page.resources.map((r) => r.id), total: page.total };
}

async function load(storage: Storage): Promise<void> {
  await storage.createProject({ id: P, name: 'P', strictMode: false });
  await storage.createProject({ id: OTHER, name: 'Q', strictMode: false });
  await storage.writeResources(
    P,
    [...patients, ...observations].map((resource) => ({ op: 'create' as const, resource })),
  );
  // The other project holds the same ids with other values: none may leak into P's answers.
  await storage.writeResources(OTHER, [
    {
      op: 'create',
      resource: { resourceType: 'Patient', id: 'px', name: [{ family: 'Smith' }], birthDate: '1970' },
    },
    { op: 'create', resource: observation('ox', '1234-5', LOINC, 'Patient/pa', 5.4, '2020-01-15') },
  ]);
}

const sorted = (...list: string[]): string[] => list.sort();

function searchCases(open: () => Storage | Promise<Storage>): void {
  let storage: Storage | undefined;
  afterEach(async () => {
    await storage?.close();
    storage = undefined;
  });
  const ready = async (): Promise<Storage> => {
    storage = await open();
    await load(storage);
    return storage;
  };
  const of = async (s: Storage, type: string, params: [string, string][]) =>
    (await search(s, type, params)).ids.sort();

  it('tokens: code, system|code, |code, system|, OR, AND, :not, :missing', async () => {
    const s = await ready();
    expect(await of(s, 'Observation', [['code', '1234-5']])).toEqual(sorted('o1', 'o2', 'o3', 'o5', 'o7'));
    expect(await of(s, 'Observation', [['code', `${LOINC}|1234-5`]])).toEqual(sorted('o1', 'o2', 'o7'));
    expect(await of(s, 'Observation', [['code', '|1234-5']])).toEqual(['o5']);
    expect(await of(s, 'Observation', [['code', 'http://other|']])).toEqual(['o3']);
    expect(await of(s, 'Observation', [['code', '9999-9,http://other|1234-5']])).toEqual(sorted('o3', 'o4'));
    expect(
      await of(s, 'Observation', [
        ['code', '1234-5'],
        ['subject', 'Patient/pa'],
      ]),
    ).toEqual(['o1']);
    expect(await of(s, 'Observation', [['code:not', '1234-5']])).toEqual(sorted('o4', 'o6'));
    expect(await of(s, 'Observation', [['subject:missing', 'true']])).toEqual(['o6']);
    expect(await of(s, 'Observation', [['code', 'nothing']])).toEqual([]);
    expect(await of(s, 'Patient', [['gender', 'male']])).toEqual(sorted('pb', 'pc'));
    expect(await of(s, 'Patient', [['active', 'true']])).toEqual(['pc']);
    expect(await of(s, 'Patient', [['telecom', '555']])).toEqual(['pd']);
    expect(await of(s, 'Observation', [['code:text', 'test 99']])).toEqual(['o4']);
  });

  it('strings: prefix (case and accents folded), :exact, :contains', async () => {
    const s = await ready();
    expect(await of(s, 'Patient', [['name', 'smi']])).toEqual(sorted('pa', 'pb'));
    expect(await of(s, 'Patient', [['family', 'SMITH']])).toEqual(sorted('pa', 'pb'));
    expect(await of(s, 'Patient', [['family:exact', 'Smith']])).toEqual(['pa']);
    expect(await of(s, 'Patient', [['family:exact', 'smith']])).toEqual([]);
    expect(await of(s, 'Patient', [['name:contains', 'ON']])).toEqual(['pc']);
    expect(await of(s, 'Patient', [['name', 'bob,cy']])).toEqual(sorted('pb', 'pc'));
    expect(await of(s, 'Patient', [['name', 'zz']])).toEqual([]);
  });

  it('dates: prefixes and precision, ranges ANDed, Periods', async () => {
    const s = await ready();
    expect(await of(s, 'Observation', [['date', '2020']])).toEqual(sorted('o1', 'o2'));
    expect(await of(s, 'Observation', [['date', 'ge2020-02']])).toEqual(sorted('o2', 'o3', 'o5', 'o6'));
    expect(await of(s, 'Observation', [['date', 'lt2020']])).toEqual(['o4']);
    expect(
      await of(s, 'Observation', [
        ['date', 'ge2020-01-10'],
        ['date', 'lt2021'],
      ]),
    ).toEqual(sorted('o1', 'o2', 'o6'));
    expect(
      await of(s, 'Observation', [
        ['date', 'sa2021'],
        ['date', 'eb2023'],
      ]),
    ).toEqual(['o5']);
    expect(await of(s, 'Observation', [['date', 'ap2021-06-15']])).toEqual(['o3', 'o6'].sort());
    expect(await of(s, 'Observation', [['date', 'ne2020']])).toEqual(sorted('o3', 'o4', 'o5', 'o6'));
    expect(await of(s, 'Patient', [['birthdate', 'le1985-06']])).toEqual(sorted('pa', 'pb'));
    expect(await of(s, 'Patient', [['birthdate', 'eq1985']])).toEqual(['pb']);
  });

  it('ranges: a value spread over several elements, a Period ending before it starts', async () => {
    const s = await ready();
    await s.writeResources(P, [
      {
        op: 'create',
        resource: {
          resourceType: 'Observation',
          id: 'c1',
          status: 'final',
          code: { text: 'panel' },
          component: [
            { code: { text: 'a' }, valueQuantity: { value: 1 } },
            { code: { text: 'b' }, valueQuantity: { value: 20 } },
          ],
          effectivePeriod: { start: '2021-05', end: '2019-02' },
        },
      },
    ]);
    // Each filter matches a different component: ANDed per resource, not per value.
    expect(
      await of(s, 'Observation', [
        ['component-value-quantity', 'ge10'],
        ['component-value-quantity', 'le2'],
      ]),
    ).toEqual(['c1']);
    expect(await of(s, 'Observation', [['date', 'eq2021']])).toEqual(sorted('c1', 'o3'));
    expect(
      await of(s, 'Observation', [
        ['date', 'ge2021-05'],
        ['date', 'lt2021-06'],
      ]),
    ).toEqual(sorted('c1', 'o6')); // o6's Period has no end: it reaches past any date.
  });

  it('numbers and quantities: prefixes, value|system|code', async () => {
    const s = await ready();
    expect(await of(s, 'Observation', [['value-quantity', '10']])).toEqual(['o2']);
    expect(await of(s, 'Observation', [['value-quantity', 'gt10']])).toEqual(sorted('o3', 'o5'));
    expect(await of(s, 'Observation', [['value-quantity', 'le5.4']])).toEqual(sorted('o1', 'o4'));
    expect(await of(s, 'Observation', [['value-quantity', 'ap100']])).toEqual(['o3']);
    expect(
      await of(s, 'Observation', [
        ['value-quantity', 'ge1|http://unitsofmeasure.org|mg'],
        ['value-quantity', 'lt50'],
      ]),
    ).toEqual(sorted('o1', 'o2', 'o5'));
    expect(await of(s, 'Observation', [['value-quantity', 'ne10']])).toEqual(sorted('o1', 'o3', 'o4', 'o5'));
  });

  it('references: Type/id, bare id, :Type, absolute URL; other projects never leak', async () => {
    const s = await ready();
    expect(await of(s, 'Observation', [['subject', 'Patient/pa']])).toEqual(sorted('o1', 'o4'));
    expect(await of(s, 'Observation', [['subject', 'pa']])).toEqual(sorted('o1', 'o4', 'o7'));
    expect(await of(s, 'Observation', [['subject:Group', 'pa']])).toEqual(['o7']);
    expect(await of(s, 'Observation', [['subject', 'https://example.org/fhir/Patient/pb']])).toEqual(['o2']);
    expect(await of(s, 'Observation', [['patient', 'pc,pd']])).toEqual(sorted('o3', 'o5'));
    expect((await search(s, 'Patient', [['name', 'smith']], OTHER)).ids).toEqual(['px']);
    expect((await search(s, 'Observation', [['code', '1234-5']], OTHER)).ids).toEqual(['ox']);
  });

  it('totals, _sort and keyset paging over a narrowed search', async () => {
    const s = await ready();
    const { query } = await parseSearch(
      'Observation',
      [
        ['code', '1234-5'],
        ['_sort', '-date'],
        ['_count', '2'],
      ],
      {},
      allReads(),
    );
    const first = await s.searchResources(P, 'Observation', query);
    expect(first.total).toBe(5);
    expect(ids(first.resources)).toEqual(sorted('o3', 'o5'));
    expect(first.resources.map((r) => r.id)).toEqual(['o5', 'o3']);
    const { query: next } = await parseSearch(
      'Observation',
      [
        ['code', '1234-5'],
        ['_sort', '-date'],
        ['_count', '2'],
      ],
      {},
      allReads(),
    );
    const after = await s.searchResources(P, 'Observation', {
      ...next,
      after: { id: 'o3', keys: query.order!.keys(first.resources[1]!) },
    });
    expect(after.resources.map((r) => r.id)).toEqual(['o2', 'o1']);
    const { query: count } = await parseSearch(
      'Observation',
      [
        ['code', '1234-5'],
        ['_summary', 'count'],
      ],
      {},
      allReads(),
    );
    const counted = await s.searchResources(P, 'Observation', count);
    expect(counted).toEqual({ total: 5, resources: [] });
  });

  it('writes, deletes and transactions are visible at once', async () => {
    const s = await ready();
    await s.updateResource(P, {
      ...(observations[0] as FhirResource & { id: string }),
      code: { coding: [{ system: LOINC, code: '7777-7' }] },
    });
    expect(await of(s, 'Observation', [['code', '7777-7']])).toEqual(['o1']);
    expect(await of(s, 'Observation', [['code', `${LOINC}|1234-5`]])).toEqual(sorted('o2', 'o7'));
    await s.deleteResource(P, 'Observation', 'o2');
    expect(await of(s, 'Observation', [['code', `${LOINC}|1234-5`]])).toEqual(['o7']);
    await s.transaction(async (tx) => {
      await tx.createResource(P, observation('t1', '7777-7', LOINC, 'Patient/pb', 1, '2024'));
      // Inside the transaction: its own writes are candidates too.
      const { query } = await parseSearch('Observation', [['code', '7777-7']], {}, allReads());
      expect(ids((await tx.searchResources(P, 'Observation', query)).resources)).toEqual(sorted('o1', 't1'));
      await tx.deleteResource(P, 'Observation', 'o1');
      expect(ids((await tx.searchResources(P, 'Observation', query)).resources)).toEqual(['t1']);
    });
    expect(await of(s, 'Observation', [['code', '7777-7']])).toEqual(['t1']);
    await expect(
      s.transaction(async (tx) => {
        await tx.createResource(P, observation('t2', '7777-7', LOINC, 'Patient/pb', 1, '2024'));
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await of(s, 'Observation', [['code', '7777-7']])).toEqual(['t1']);
    await s.deleteProject(OTHER);
    await s.createProject({ id: OTHER, name: 'Q', strictMode: false });
    expect((await search(s, 'Patient', [['name', 'smith']], OTHER)).ids).toEqual([]);
  });
}

// The embedded stores keep postings by default (built per parameter by the first search on it);
// `indexer: false` turns them off: every search then scans.
const withoutIndex: Record<string, () => Promise<Storage> | Storage> = {
  memory: () => memoryStorage({ indexer: false }),
  file: () => fileStorage({ dir: tempDir('fpk-search-'), durability: 'write', indexer: false }),
};

forEachStore('search index', (store, open) => {
  describe(`search through the indexes: ${store}`, () => searchCases(open));
  const scanning = withoutIndex[store];
  if (scanning) describe(`search without an index: ${store}`, () => searchCases(scanning));
});

describe('file store: the search index after reopening', () => {
  it('is rebuilt from the logs on open', async () => {
    const dir = tempDir('fpk-search-');
    let storage: Storage = await fileStorage({ dir, durability: 'write' });
    await load(storage);
    await storage.close();
    storage = await fileStorage({ dir, durability: 'write' });
    try {
      expect((await search(storage, 'Observation', [['code', `${LOINC}|1234-5`]])).ids.sort()).toEqual(
        sorted('o1', 'o2', 'o7'),
      );
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids.sort()).toEqual(sorted('pa', 'pb'));
      await storage.deleteResource(P, 'Patient', 'pa');
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids).toEqual(['pb']);
    } finally {
      await storage.close();
    }
  });
});

/** The parameters a store has built for a type (the engine's committed state). */
const built = (storage: Storage, type: string): string[] => {
  const base = (storage as unknown as { engine: { base: BaseState } }).engine.base;
  return [...(base.postingsOf(P, type)?.built ?? [])].sort();
};

/** The `.postings` files under a store directory. */
const postingsFiles = (dir: string): string[] =>
  (fs.readdirSync(dir, { recursive: true }) as string[]).filter((f) => f.endsWith('.postings')).sort();

describe('file store: postings built on demand, saved on close', () => {
  it('builds only the parameters searched; a write posts them at once', async () => {
    const storage = await fileStorage({ dir: tempDir('fpk-search-'), durability: 'write' });
    try {
      await load(storage);
      expect(built(storage, 'Patient')).toEqual([]);
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids.sort()).toEqual(sorted('pa', 'pb'));
      expect(built(storage, 'Patient')).toEqual(['name']);
      expect(built(storage, 'Observation')).toEqual([]);
      await storage.createResource(P, { resourceType: 'Patient', id: 'pe', name: [{ family: 'Smythe' }] });
      expect((await search(storage, 'Patient', [['name', 'sm']])).ids.sort()).toEqual(
        sorted('pa', 'pb', 'pe'),
      );
      expect((await search(storage, 'Patient', [['name:contains', 'yth']])).ids).toEqual(['pe']);
    } finally {
      await storage.close();
    }
  });

  it('tests no candidate with its matcher when the postings answer every filter exactly', async () => {
    const calls: MatcherCalls = { tests: 0, reads: [] };
    const storage = await fileStorage({
      dir: tempDir('fpk-search-'),
      durability: 'write',
      indexer: countingIndexer(calls),
    });
    try {
      await load(storage);
      const counted = async (params: [string, string][]) => {
        const { query } = await parseSearch('Observation', params, {}, allReads());
        expect(query.where).toBeUndefined();
        calls.tests = 0;
        return storage.searchResources(P, 'Observation', query);
      };
      const exact = await counted([
        ['code', `${LOINC}|1234-5`],
        ['subject', 'Patient/pa'],
      ]);
      expect(ids(exact.resources)).toEqual(['o1']);
      expect(calls.tests).toBe(0);
      const dated = await counted([
        ['date', 'ge2020-01-15'],
        ['date', 'lt2021'],
      ]);
      expect(ids(dated.resources)).toEqual(sorted('o1', 'o2', 'o6'));
      expect(calls.tests).toBe(0);
      // `ne` is only narrowed by the postings (by the code): the matcher decides on the candidates.
      const ne = await counted([
        ['code', '1234-5'],
        ['date', 'ne2020-02-01'],
      ]);
      expect(ids(ne.resources)).toEqual(sorted('o1', 'o3', 'o5'));
      expect(calls.tests).toBeGreaterThan(0);
    } finally {
      await storage.close();
    }
  });

  it('answers a one-level chain through both types postings, reading no other body', async () => {
    const calls: MatcherCalls = { tests: 0, reads: [] };
    const storage = await fileStorage({
      dir: tempDir('fpk-search-'),
      durability: 'write',
      indexer: countingIndexer(calls),
    });
    try {
      await load(storage);
      const chained = async (value: string) => {
        Object.assign(calls, { tests: 0, reads: [] });
        const { query } = await parseSearch('Observation', [['subject:Patient.name', value]], {}, allReads());
        const page = await storage.searchResources(P, 'Observation', query);
        return { ids: ids(page.resources), tests: calls.tests, reads: calls.reads.length };
      };
      await chained('smi'); // Builds the postings of both types.
      expect(await chained('smi')).toEqual({ ids: sorted('o1', 'o2', 'o4'), tests: 0, reads: 0 });
      expect(await chained('nobody')).toEqual({ ids: [], tests: 0, reads: 0 });
      await storage.updateResource(P, { resourceType: 'Patient', id: 'pc', name: [{ family: 'Smart' }] });
      expect((await chained('sm')).ids).toEqual(sorted('o1', 'o2', 'o3', 'o4'));
    } finally {
      await storage.close();
    }
  });

  it('reopens with the postings saved by a clean close, consumed on open', async () => {
    const dir = tempDir('fpk-search-');
    let storage: Storage = await fileStorage({ dir, durability: 'write' });
    await load(storage);
    await search(storage, 'Patient', [['name', 'smi']]);
    await search(storage, 'Observation', [
      ['code', '1234-5'],
      ['date', 'ge2020'],
    ]);
    await storage.close();
    expect(postingsFiles(dir).map((f) => path.basename(f))).toEqual([
      'Observation.log.postings',
      'Patient.log.postings',
    ]);
    storage = await fileStorage({ dir, durability: 'write' });
    try {
      expect(postingsFiles(dir)).toEqual([]);
      expect(built(storage, 'Patient')).toEqual(['name']);
      expect(built(storage, 'Observation')).toEqual(['code', 'date']);
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids.sort()).toEqual(sorted('pa', 'pb'));
      await storage.deleteResource(P, 'Patient', 'pa');
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids).toEqual(['pb']);
      expect(
        (
          await search(storage, 'Observation', [
            ['code', '1234-5'],
            ['date', 'lt2021'],
          ])
        ).ids.sort(),
      ).toEqual(sorted('o1', 'o2'));
    } finally {
      await storage.close();
    }
  });

  it('ignores saved postings that do not name the current versions, or of another indexer', async () => {
    const dir = tempDir('fpk-search-');
    let storage: Storage = await fileStorage({ dir, durability: 'write' });
    await load(storage);
    await search(storage, 'Patient', [['name', 'smi']]);
    await storage.close();
    // A file naming another version of pa (checksum intact): not used, name is built again.
    const [file] = postingsFiles(dir);
    const full = path.join(dir, file!);
    const saved = decodeChecked(fs.readFileSync(full, 'utf8')) as PostingsFile;
    const original = structuredClone(saved);
    saved.entries.find(([id]) => id === 'pa')![1] = '99';
    fs.writeFileSync(full, encodeChecked(saved));
    storage = await fileStorage({ dir, durability: 'write' });
    try {
      expect(built(storage, 'Patient')).toEqual([]);
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids.sort()).toEqual(sorted('pa', 'pb'));
    } finally {
      await storage.close();
    }
    // Another indexer's fingerprint: not used either.
    const other = async () => ({ ...(await r4SearchIndexer()), fingerprint: 'another' });
    fs.writeFileSync(full, encodeChecked({ ...original, ino: saved.ino }));
    storage = await fileStorage({ dir, durability: 'write', indexer: other });
    try {
      expect(built(storage, 'Patient')).toEqual([]);
      expect((await search(storage, 'Patient', [['name', 'smi']])).ids.sort()).toEqual(sorted('pa', 'pb'));
    } finally {
      await storage.close();
    }
  });
});
