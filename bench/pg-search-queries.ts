/**
 * Issue 30's searches on a PostgreSQL store (used by `measure-pg-search.ts` and the `--huge`
 * benchmark): the values are drawn from the loaded data, each query is timed as the FHIR router
 * runs it (parse, then the store's search: first page of 20 with the total `_total` asks, none
 * unless a count is asked for). The number of matches is counted once more, untimed.
 */
import type pg from 'pg';
import { parseSearch } from '../src/fhir/search/search-query.js';
import { searchTotal } from '../src/fhir/search/search-total.js';
import type { ResourceQuery, Storage } from '../src/storage/types.js';
import { median, now } from './stats.js';
import { allReads } from '../test/helpers/search-reads.js';

/** One timed search: what it is, the query, and its target median at 1M resources (ms). */
export interface PgSearchQuery {
  key: string;
  label: string;
  type: string;
  query: string;
  targetMs: number;
}

/**
 * The searches of issue 30 on the data of `schema` (quoted `s`): the token `code` (the generated
 * data's selective `2345-7`, about 1% of the resources, unless `code` is given), its count, a
 * family-name prefix, a month of Observation dates (the median date's month), and a one-level chain
 * on the rarest family name.
 */
export async function pgSearchQueries(
  db: pg.Pool | pg.Client,
  s: string,
  code = 'http://loinc.org|2345-7',
): Promise<PgSearchQuery[]> {
  const one = async <T>(sql: string): Promise<T> => (await db.query(sql)).rows[0] as T;
  const family = await one<{ exact: string }>(
    `SELECT exact FROM ${s}.search_strings
      WHERE key = ANY(ARRAY(SELECT key FROM ${s}.search_keys WHERE resource_type = 'Patient' AND param = 'family'))
      GROUP BY exact ORDER BY count(*), exact LIMIT 1`,
  );
  const month = await one<{ start: string }>(
    `SELECT to_char(to_timestamp(percentile_disc(0.5) WITHIN GROUP (ORDER BY lo) / 1000), 'YYYY-MM') AS start
       FROM ${s}.search_dates
      WHERE key = ANY(ARRAY(SELECT key FROM ${s}.search_keys WHERE resource_type = 'Observation' AND param = 'date'))`,
  );
  const [y, m] = month.start.split('-').map(Number) as [number, number];
  const next = m === 12 ? `${y + 1}-01` : `${y}-${String(m + 1).padStart(2, '0')}`;
  return [
    { key: 'token', label: 'token, ~1%', type: 'Observation', query: `code=${code}`, targetMs: 20 },
    {
      key: 'tokenCount',
      label: 'token, ~1%, _summary=count',
      type: 'Observation',
      query: `code=${code}&_summary=count`,
      targetMs: 50,
    },
    {
      key: 'prefix',
      label: 'string prefix',
      type: 'Patient',
      query: `name=${family.exact.slice(0, 3)}`,
      targetMs: 20,
    },
    {
      key: 'month',
      label: 'date range (a month)',
      type: 'Observation',
      query: `date=ge${month.start}&date=lt${next}`,
      targetMs: 20,
    },
    {
      key: 'chain',
      label: 'chain, one level',
      type: 'Observation',
      query: `subject:Patient.name=${family.exact}`,
      targetMs: 100,
    },
  ];
}

/** The number of matches of a parsed search's query (an exact count, unbounded). */
async function countMatches(storage: Storage, projectId: string, query: ResourceQuery): Promise<number> {
  const { order: _order, ...counted } = query;
  const page = await storage.searchResources(projectId, query.search!.resourceType, {
    ...counted,
    count: 0,
    total: 'accurate',
  });
  return page.total ?? 0;
}

/** `search` run `runs` times after 2 untimed runs: the median ms and its number of matches. */
export async function timePgSearch(
  storage: Storage,
  projectId: string,
  search: Pick<PgSearchQuery, 'type' | 'query'>,
  runs: number,
): Promise<{ medianMs: number; total: number; times: number[] }> {
  const times: number[] = [];
  let total: number | undefined;
  let query: ResourceQuery = {};
  for (let i = 0; i < runs + 2; i++) {
    const start = now();
    const parsed = await parseSearch(search.type, new URLSearchParams(search.query), {}, allReads());
    const page = await storage.searchResources(projectId, search.type, {
      ...parsed.query,
      total: searchTotal(parsed.request),
    });
    const ms = now() - start;
    total = page.total;
    query = parsed.query;
    if (i >= 2) times.push(ms);
  }
  total ??= await countMatches(storage, projectId, query);
  return { medianMs: median(times), total, times };
}
