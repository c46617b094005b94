import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { SearchParameterError } from '../../src/search/search-error.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import { sortValuesOf } from '../../src/search/sort-values.js';
import { compareSortValues } from '../../src/storage/result-page.js';
import type { Storage, StoredResource } from '../../src/storage/types.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allQueries, expected, loadCorpus } from '../helpers/search-differential.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

const PROJECT = 'p';
let registry: SearchRegistry;

/*
 * Differential test of PostgreSQL's search in SQL (src/storage/postgres/search-sql.ts) against the
 * in-memory evaluation (src/search/match.ts, itself checked against @medplum/core's
 * matchesSearchRequest by differential.test.ts): the same queries over the same stored resources
 * must match exactly the same ids, and `_sort` must give the same order, page by page. Queries are
 * drawn from the data for every parameter of every type present, every parameter type, prefix and
 * modifier, composites, one- and two-level chains and `_has`. Generated resources and edge cases
 * always; the first 60 resources of each type of the shared Synthea sample when present (the draw
 * and the oracle: test/helpers/search-differential.ts).
 */

async function actual(storage: Storage, type: string, query: string): Promise<string[]> {
  const parsed = await parseSearch(type, new URLSearchParams(query), {}, allReads());
  expect(parsed.query.where, `${type}?${query} reaches the store without a predicate`).toBeUndefined();
  const { count: _count, ...all } = parsed.query;
  const page = await storage.searchResources(PROJECT, type, all);
  expect(page.total).toBe(page.resources.length);
  return page.resources.map((r) => r.id).sort();
}

if (postgresTestUrl('search in SQL against match.ts')) {
  const newSchema = schemaFactory(POSTGRES_URL!);
  let storage: Storage;
  let corpus = new Map<string, StoredResource[]>();

  beforeAll(async () => {
    registry = await loadSearchRegistry();
    storage = postgresStorage({ connectionString: POSTGRES_URL!, schema: newSchema() });
    corpus = await loadCorpus(storage, PROJECT);
  });
  afterAll(() => storage?.close());

  describe('search in SQL (PostgreSQL) against match.ts', () => {
    it('matches the same resources for every parameter, prefix, modifier, chain and _has', async () => {
      const queries = allQueries(registry, corpus);
      const failures: string[] = [];
      let matched = 0;
      let refused = 0;
      for (const [type, query] of queries) {
        let want: string[];
        try {
          want = await expected(registry, corpus, type, query);
        } catch (error) {
          // A drawn value the parameter refuses (a 400 from the parser, for both paths).
          if (!(error instanceof SearchParameterError)) throw error;
          refused++;
          continue;
        }
        const t0 = Date.now();
        const got = await actual(storage, type, query);
        if (process.env.SEARCH_DIFF_VERBOSE && Date.now() - t0 > 200)
          console.log(Date.now() - t0, type, query);
        matched += want.length;
        if (JSON.stringify(want) !== JSON.stringify(got) && failures.length < 20) {
          failures.push(
            `${type}?${query}: want ${want.length} ${want.slice(0, 3).join()}, got ${got.length} ${got.slice(0, 3).join()}`,
          );
        }
      }
      expect(failures).toEqual([]);
      // Every kind of query was drawn, and they select something.
      const all = queries.map(([, q]) => q).join('\n');
      for (const kind of [
        ':missing',
        ':exact',
        ':contains',
        ':not',
        ':text',
        ':below',
        ':above',
        '_has:',
        '$',
        'ap',
        'sa',
        'eb',
      ]) {
        expect(all, kind).toContain(kind);
      }
      expect(queries.length - refused).toBeGreaterThan(300);
      expect(matched).toBeGreaterThan(1000);
    });

    it('orders _sort keys as sortValuesOf and compareSortValues do, page by page', async () => {
      const sorts: [string, string][] = [
        ['Patient', 'family'],
        ['Patient', '-birthdate'],
        ['Patient', 'gender,-family'],
        ['Observation', 'code,-date'],
        ['Observation', '-value-quantity'],
        ['Observation', 'subject,date'],
        ['Encounter', '-date'],
        // Issue 44's nine keys (five are the router's default bound).
        ['Observation', 'status,code,date,subject,value-quantity,category,performer,encounter,-_lastUpdated'],
      ];
      const limits = { maxSortKeys: 9 };
      for (const [type, sort] of sorts) {
        const list = corpus.get(type) ?? [];
        const request = parseSearchRequest(registry, type, new URLSearchParams(`_sort=${sort}`), {
          limits,
        }).request;
        const keys = sortValuesOf(registry, type, request.sort);
        const descending = request.sort.map((k) => k.descending);
        const want = [...list]
          .map((r) => ({ id: r.id, keys: keys(r) }))
          .sort(
            (a, b) =>
              compareSortValues(a.keys, b.keys, descending) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
          )
          .map((r) => r.id);
        const parsed = await parseSearch(
          type,
          new URLSearchParams(`_sort=${sort}&_count=7`),
          { limits },
          allReads(),
        );
        const got: string[] = [];
        let page = await storage.searchResources(PROJECT, type, parsed.query);
        while (page.resources.length > 0) {
          got.push(...page.resources.map((r) => r.id));
          const last = page.resources[page.resources.length - 1]!;
          page = await storage.searchResources(PROJECT, type, {
            ...parsed.query,
            after: parsed.positionOf(last),
          });
        }
        expect(got, `${type}?_sort=${sort}`).toEqual(want);
        // Backwards from the end gives the last page.
        const end =
          want.length > 0 ? parsed.positionOf(list.find((r) => r.id === want[want.length - 1])!) : undefined;
        if (end) {
          const back = await storage.searchResources(PROJECT, type, { ...parsed.query, before: end });
          expect(back.resources.map((r) => r.id)).toEqual(want.slice(-8, -1));
        }
      }
    });
  });
}
