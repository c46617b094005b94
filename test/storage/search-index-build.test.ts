import { describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import type { ResourceIndexer } from '../../src/storage/search-index.js';
import { fileStorage, memoryStorage, r4SearchIndexer } from '../../src/stores.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { tempDir } from '../helpers/temp-dir.js';
import { allReads, scannedQuery } from '../helpers/search-reads.js';

// The first search on a parameter builds its postings (build-postings.ts) without holding the
// writer: writes issued meanwhile complete before the build does, and the postings then hold them.

const P = 'p1';
/** More Patients than a build indexes holding the writer: most are read with writes flowing. */
const PATIENTS = 1500;

const patient = (i: number, family = `Fam${i}`): FhirResource & { id: string } => ({
  resourceType: 'Patient',
  id: `p${i}`,
  name: [{ family }],
});

/** The R4 indexer, calling `onIndex` with the parameters each version is indexed for. */
async function watchedIndexer(onIndex: (codes: ReadonlySet<string>) => void): Promise<ResourceIndexer> {
  const inner = await r4SearchIndexer();
  return {
    fingerprint: inner.fingerprint,
    index(resource, codes) {
      if (codes) onIndex(codes);
      return inner.index(resource, codes);
    },
  };
}

async function ids(storage: Storage, params: [string, string][]): Promise<string[]> {
  const { query } = await parseSearch('Patient', params, {}, allReads());
  const page = await storage.searchResources(P, 'Patient', query);
  // The same query scanned (match.ts over every Patient) answers the same.
  const scanned = await storage.searchResources(P, 'Patient', await scannedQuery(storage, P, query));
  const found = page.resources.map((r) => r.id).sort();
  expect(found).toEqual(scanned.resources.map((r) => r.id).sort());
  return found;
}

async function load(storage: Storage): Promise<void> {
  await storage.createProject({ id: P, name: 'P', strictMode: false });
  const all = Array.from({ length: PATIENTS }, (_, i) => ({ op: 'create' as const, resource: patient(i) }));
  await storage.writeResources(P, all);
}

type Open = (indexer: ResourceIndexer) => Promise<Storage>;

const stores: [string, Open][] = [
  ['memory', (indexer) => Promise.resolve(memoryStorage({ indexer }))],
  ['file', (indexer) => fileStorage({ dir: tempDir('fpk-build-'), durability: 'write', indexer })],
];

describe.each(stores)('building postings on the %s store', (_name, open) => {
  it('lets writes issued during the build complete first, and posts them', async () => {
    const events: string[] = [];
    let writes: Promise<unknown>[] | undefined;
    const opened: { storage?: Storage } = {};
    const indexer = await watchedIndexer((codes) => {
      // On the build's first read: a create, an update and a delete while it runs.
      const s = opened.storage;
      if (!codes.has('name') || writes || !s) return;
      writes = [
        s.createResource(P, patient(PATIENTS, 'Zedd')),
        s.updateResource(P, patient(0, 'Quux')),
        s.deleteResource(P, 'Patient', 'p1'),
      ].map((w) => w.then(() => events.push('write')));
    });
    const storage = await open(indexer);
    opened.storage = storage;
    try {
      await load(storage);
      const { query } = await parseSearch('Patient', [['name', 'fam1']], {}, allReads());
      const searched = storage.searchResources(P, 'Patient', query).then((page) => {
        events.push('search');
        return page;
      });
      await searched;
      await Promise.all(writes ?? []);
      // Each write resolved before the search that built the postings did.
      expect(events).toEqual(['write', 'write', 'write', 'search']);
      expect(await ids(storage, [['name', 'zedd']])).toEqual([`p${PATIENTS}`]);
      expect(await ids(storage, [['name', 'quux']])).toEqual(['p0']);
      expect(await ids(storage, [['name', 'fam0']])).toEqual([]);
      expect(await ids(storage, [['name', 'fam1']])).toContain('p10');
      expect(await ids(storage, [['name', 'fam1']])).not.toContain('p1');
      expect(await ids(storage, [['name:exact', 'Fam2']])).toEqual(['p2']);
    } finally {
      await storage.close();
    }
  });

  it('shares one build between concurrent searches of the same parameter', async () => {
    let indexed = 0;
    const storage = await open(
      await watchedIndexer((codes) => {
        if (codes.has('name')) indexed += 1;
      }),
    );
    try {
      await load(storage);
      const searches = ['fam12', 'fam3', 'fam149'].map(async (value) => {
        const { query } = await parseSearch('Patient', [['name', value]], {}, allReads());
        return (await storage.searchResources(P, 'Patient', query)).total;
      });
      expect(await Promise.all(searches)).toEqual([111, 111, 11]);
      expect(indexed).toBe(PATIENTS);
    } finally {
      await storage.close();
    }
  });
});
