import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { SearchParameterError } from '../../src/search/search-error.js';
import { idFilter, typeSearch } from '../../src/storage/search-request.js';
import type { BaseState } from '../../src/storage/engine/state.js';
import type { Storage, StoredResource } from '../../src/storage/types.js';
import { fileStorage } from '../../src/stores.js';
import { allQueries, expected, hasSynthea, loadCorpus } from '../helpers/search-differential.js';
import { tempDir } from '../helpers/temp-dir.js';
import { allReads } from '../helpers/search-reads.js';

/*
 * Differential test of the embedded stores' search index (src/storage/engine/postings.ts, on by
 * default) against the in-memory evaluation (src/search/match.ts over every resource of the type):
 * the queries of differential-postgres.test.ts (every parameter, prefix and modifier, composites,
 * chains, `_has`), asked as the FHIR router asks them (`parseSearch`: the store answers the whole
 * search, without `where`), over generated
 * resources, edge cases and the Synthea sample when present, on the file store (the memory store
 * shares the engine). Every query is asked once (building the postings of its parameters); the ones
 * the postings may answer are asked again after a write (the postings follow it) and after a clean
 * close and reopen (from the saved postings), with their `_summary=count` too.
 */

const PROJECT = 'p';
let registry: SearchRegistry;

async function actual(storage: Storage, type: string, query: string, count: boolean): Promise<string[]> {
  const parsed = await parseSearch(type, new URLSearchParams(query), {}, allReads());
  const { count: _count, ...all } = parsed.query;
  const page = await storage.searchResources(PROJECT, type, all);
  expect(page.total).toBe(page.resources.length);
  if (count) {
    // The count alone (no body read when the postings answer exactly) agrees.
    const counted = await storage.searchResources(PROJECT, type, { ...all, count: 0 });
    expect(counted.total, `${type}?${query} _summary=count`).toBe(page.total);
  }
  return page.resources.map((r) => r.id).sort();
}

/**
 * The queries the postings may answer (no chain, `_has` or composite): those worth
 * asking again once the postings are built. The others scan whatever the postings hold.
 */
const posted = (queries: [string, string][]): [string, string][] =>
  queries.filter(([, q]) => !/_has:|%24|\$|^[^=]*\./.test(q));

/** Compares every query's answer with match.ts; answers the failures and how many ids matched. */
async function compare(
  storage: Storage,
  corpus: Map<string, StoredResource[]>,
  queries: [string, string][],
  count: boolean,
): Promise<{ failures: string[]; matched: number; asked: number }> {
  const failures: string[] = [];
  let matched = 0;
  let asked = 0;
  for (const [type, query] of queries) {
    let want: string[];
    try {
      want = await expected(registry, corpus, type, query);
    } catch (error) {
      if (!(error instanceof SearchParameterError)) throw error;
      continue;
    }
    asked++;
    const got = await actual(storage, type, query, count);
    matched += want.length;
    if (JSON.stringify(want) !== JSON.stringify(got) && failures.length < 20) {
      failures.push(
        `${type}?${query}: want ${want.length} ${want.slice(0, 3).join()}, got ${got.length} ${got.slice(0, 3).join()}`,
      );
    }
  }
  return { failures, matched, asked };
}

const built = (storage: Storage, type: string): number => {
  const base = (storage as unknown as { engine: { base: BaseState } }).engine.base;
  return base.postingsOf(PROJECT, type)?.built.size ?? 0;
};

beforeAll(async () => {
  registry = await loadSearchRegistry();
});

describe(`search index of the file store against match.ts${hasSynthea ? ' (with Synthea)' : ''}`, () => {
  const dir = tempDir('fpk-diff-');
  const open = (): Promise<Storage> => fileStorage({ dir, durability: 'write' });
  let storage: Storage;
  let corpus: Map<string, StoredResource[]>;
  beforeAll(async () => {
    storage = await open();
    corpus = await loadCorpus(storage, PROJECT);
  });
  afterAll(() => storage?.close());

  it('matches the same resources as a scan, building postings, then from them', async () => {
    const queries = allQueries(registry, corpus);
    const first = await compare(storage, corpus, queries, false);
    expect(first.failures).toEqual([]);
    expect(first.asked).toBeGreaterThan(300);
    expect(first.matched).toBeGreaterThan(1000);
    expect(built(storage, 'Observation')).toBeGreaterThan(5);
    // A write after the build: the postings follow it.
    const [observation] = corpus.get('Observation')!;
    const changed = {
      ...observation!,
      status: 'amended',
      code: { coding: [{ system: 'urn:x', code: 'X1' }] },
    };
    await storage.updateResource(PROJECT, changed);
    const [stored] = (
      await storage.searchResources(PROJECT, 'Observation', {
        search: typeSearch('Observation', [idFilter([changed.id])]),
      })
    ).resources;
    corpus.set(
      'Observation',
      corpus.get('Observation')!.map((r) => (r.id === changed.id ? stored! : r)),
    );
    const again = posted(queries);
    expect(again.length).toBeGreaterThan(200);
    const second = await compare(storage, corpus, again, true);
    expect(second.failures).toEqual([]);
    // Reopened from the postings a clean close saved.
    await storage.close();
    storage = await open();
    expect(built(storage, 'Observation')).toBeGreaterThan(5);
    const third = await compare(storage, corpus, again, true);
    expect(third.failures).toEqual([]);
  });
});
