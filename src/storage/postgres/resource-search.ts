import { PlatformError } from '../../errors.js';
import type { ResourcePage, ResourceQuery, SortValue, StoredResource } from '../types.js';
import { narrowQuery, type NarrowedQuery } from '../query-narrowing.js';
import { compareItems, cursorItem, PageWindow } from '../result-page.js';
import {
  countedEnough,
  countLimit,
  extrapolated,
  resourcePage,
  totalOf,
  totalRule,
  type TotalRule,
} from '../total-rule.js';
import { identifierTokenKeys } from '../identifier-keys.js';
import type { Query } from './executor.js';
import { pgIdentifierKey } from './schema.js';
import { compartmentOf, type SortKey } from '../search-request.js';
import type { ResourceIndexer } from '../search-index.js';
import { SearchSql } from './search-sql.js';
import { numericSortKey, sortCursorValue, sortValueSql } from './search-sort.js';

/** The ORDER BY terms of a native sort on a FROM item `t` (`reversed`: each direction flipped). */
function orderBy(sort: ResourceQuery['sort'], t: string, reversed = false): string {
  const asc = reversed ? ' DESC' : '';
  const desc = reversed ? '' : ' DESC';
  switch (sort ?? '_lastUpdated') {
    case '_lastUpdated':
      return `${t}.lu${asc}, ${t}.id${asc}`;
    case '-_lastUpdated':
      return `${t}.lu${desc}, ${t}.id${asc}`;
    case '_id':
      return `${t}.id${asc}`;
    case '-_id':
      return `${t}.id${desc}`;
  }
}

/**
 * The condition that a row of `t` comes after (`before` false) or before the cursor in the order
 * of a native sort, with the cursor's id and `lu` (microseconds) in parameters `id` and `lu`.
 */
function beyond(sort: ResourceQuery['sort'], t: string, before: boolean, id: string, lu: string): string {
  const gt = before ? '<' : '>';
  const lt = before ? '>' : '<';
  switch (sort ?? '_lastUpdated') {
    case '_lastUpdated':
      return `(${t}.lu, ${t}.id) ${gt} (${lu}::bigint, ${id}::text)`;
    case '-_lastUpdated':
      return `(${t}.lu ${lt} ${lu}::bigint OR (${t}.lu = ${lu}::bigint AND ${t}.id ${gt} ${id}::text))`;
    case '_id':
      return `${t}.id ${gt} ${id}::text`;
    case '-_id':
      return `${t}.id ${lt} ${id}::text`;
  }
}

/** Bodies are read in slices of this many when `where` filters them in JavaScript. */
const SLICE = 256;

/**
 * The current, live versions matching the query's SQL-side fields: what follows FROM (a FROM
 * item `r` with columns `seq`, `id`, `lu`, possibly with its WHERE clause). Identifier, compartment
 * and id lookups go key by key through LATERAL subqueries (fenced with OFFSET 0) so that they stay
 * index lookups even before the planner has statistics; the first of them present drives the
 * search and the others are conditions on its rows.
 */
function candidates(
  s: string,
  projectId: string,
  resourceType: string,
  query: NarrowedQuery,
  sql: SearchSql | undefined,
  values: unknown[],
): { from: string; matched?: string } {
  const param = (value: unknown): string => {
    values.push(value);
    return `$${values.length}`;
  };
  // The conditions on a version, on columns prefixed with `r`.
  const conditions: ((r: string) => string)[] = [
    (r) =>
      `${r}project_id = $1 AND ${r}resource_type = $2 AND ${r}superseded_seq IS NULL AND NOT ${r}deleted`,
  ];
  const range = query.lastUpdated;
  // `lu` is in microseconds, the range in milliseconds.
  for (const [op, value] of [
    ['>', range?.gt],
    ['>=', range?.ge],
    ['<', range?.lt],
    ['<=', range?.le],
  ] as const) {
    if (value === undefined) continue;
    const p = param(value * 1000);
    conditions.push((r) => `${r}lu ${op} ${p}::float8`);
  }
  const keys = query.identifier
    ? param([...new Set(identifierTokenKeys(query.identifier).map(pgIdentifierKey))])
    : undefined;
  const compartment = compartmentOf(resourceType, query.search);
  const patients = compartment ? param([...new Set(compartment)]) : undefined;
  const ids = query.ids ? param([...new Set(query.ids)]) : undefined;
  // The search's filters, on `r` (every FROM below names the version `r`); without a lookup of
  // the query's own, one of them drives (its index lookup gives the candidates).
  const driver =
    sql && query.search && keys === undefined && patients === undefined && ids === undefined
      ? sql.driver(query.search.filters, '$2')
      : undefined;
  let matched: string | undefined;
  if (sql && query.search) {
    const rest = query.search.filters.filter((f) => !driver?.covers.includes(f));
    if (driver) {
      // The driver's seqs are those of current, live versions of the project and type (the index
      // holds no others): the other filters test them without reading the versions.
      const id = `(SELECT id FROM ${s}.resources WHERE seq = k.seq)`;
      matched = `SELECT k.seq FROM (SELECT DISTINCT d.seq FROM (${driver.seqs}) d OFFSET 0) k
                  WHERE ${sql.filters(rest, { seq: 'k.seq', id, type: '$2' })}`;
    } else {
      const tests = sql.filters(rest, { seq: 'r.seq', id: 'r.id', type: '$2' });
      conditions.push(() => tests);
    }
  }
  const live = (r: string): string => conditions.map((c) => c(r)).join(' AND ');
  // Conditions outside the fenced lookups, so that those stay lookups by key.
  if (keys !== undefined) {
    if (patients !== undefined) conditions.push((r) => inCompartments(s, r, patients));
    if (ids !== undefined) conditions.push((r) => `${r}id = ANY(${ids}::text[])`);
    return {
      from: `(SELECT DISTINCT i.seq
                FROM unnest(${keys}::text[]) AS q(key)
                CROSS JOIN LATERAL (
                  SELECT seq FROM ${s}.resource_identifiers
                   WHERE project_id = $1 AND resource_type = $2 AND key = q.key OFFSET 0) i) k
             CROSS JOIN LATERAL (SELECT * FROM ${s}.resources WHERE seq = k.seq OFFSET 0) r
             WHERE ${live('r.')}`,
    };
  }
  if (patients !== undefined) {
    if (ids !== undefined) conditions.push((r) => `${r}id = ANY(${ids}::text[])`);
    return {
      from: `(SELECT DISTINCT c.seq
                FROM unnest(${patients}::text[]) AS p(patient_id)
                CROSS JOIN LATERAL (
                  SELECT seq FROM ${s}.resource_compartments
                   WHERE project_id = $1 AND patient_id = p.patient_id AND resource_type = $2 OFFSET 0) c) k
             CROSS JOIN LATERAL (SELECT * FROM ${s}.resources WHERE seq = k.seq OFFSET 0) r
             WHERE ${live('r.')}`,
    };
  }
  if (ids !== undefined) {
    return {
      from: `unnest(${ids}::text[]) AS k(id)
             CROSS JOIN LATERAL (
               SELECT * FROM ${s}.resources
                WHERE project_id = $1 AND resource_type = $2 AND id = k.id AND superseded_seq IS NULL
               OFFSET 0) r
             WHERE ${live('r.')}`,
    };
  }
  if (matched !== undefined) {
    return {
      from: `(${matched}) k
             CROSS JOIN LATERAL (SELECT * FROM ${s}.resources WHERE seq = k.seq OFFSET 0) r
             WHERE ${live('r.')}`,
      ...(query.lastUpdated === undefined ? { matched } : {}),
    };
  }
  return { from: `${s}.resources r WHERE ${live('r.')}` };
}

/** The version `${r}seq` is in the compartment of one of the patients in parameter `patients`. */
function inCompartments(s: string, r: string, patients: string): string {
  return `EXISTS (SELECT 1 FROM ${s}.resource_compartments c
                   WHERE c.project_id = $1 AND c.patient_id = ANY(${patients}::text[])
                     AND c.resource_type = $2 AND c.seq = ${r}seq)`;
}

/** The ORDER BY terms of sort keys `k0`, `k1`, … of FROM item `t`, then its id (`reversed`: all flipped). */
function keysOrderBy(keys: readonly SortKey[], t: string, reversed = false): string {
  const terms = keys.map((key, i) =>
    key.descending !== reversed
      ? `${t}.k${i} DESC NULLS ${reversed ? 'FIRST' : 'LAST'}`
      : `${t}.k${i} ASC NULLS ${reversed ? 'FIRST' : 'LAST'}`,
  );
  return [...terms, `${t}.id${reversed ? ' DESC' : ''}`].join(', ');
}

/**
 * The condition that a row of `t` comes after (`before`: before) the cursor in the order of sort
 * keys `k0`, `k1`, … (a NULL, no value, last in either direction), then the id.
 */
function keysBeyond(
  keys: readonly SortKey[],
  t: string,
  before: boolean,
  cursor: { id: string; keys: readonly SortValue[] },
  param: (value: unknown) => string,
): string {
  let condition = `${t}.id ${before ? '<' : '>'} ${param(cursor.id)}::text`;
  for (let i = keys.length - 1; i >= 0; i--) {
    const key = keys[i]!;
    const column = `${t}.k${i}`;
    const value = cursor.keys[i] ?? null;
    if (value === null) {
      // Past a NULL only NULLs follow; before it, every value.
      condition = before
        ? `(${column} IS NOT NULL OR (${column} IS NULL AND ${condition}))`
        : `(${column} IS NULL AND ${condition})`;
      continue;
    }
    const p = `${param(sortCursorValue(value))}::${numericSortKey(key) ? 'float8' : 'text'}`;
    const forward = key.descending ? '<' : '>';
    const backward = key.descending ? '>' : '<';
    condition = before
      ? `(${column} ${backward} ${p} OR (${column} = ${p} AND ${condition}))`
      : `(${column} IS NULL OR ${column} ${forward} ${p} OR (${column} = ${p} AND ${condition}))`;
  }
  return condition;
}

/** What a page statement answered, with what it tells of the total. */
interface SqlPage {
  resources: StoredResource[];
  /** The matches it counted (at most its limit), when it was asked to. */
  counted?: number;
  /** The number of matches when the page shows it (it ended before `count`, from the start). */
  exact?: number;
  /** A number of matches there are at least (those the page passed and holds). */
  atLeast: number;
}

/** The matches of a query as rows (one per match) of SQL text and the parameters it uses. */
interface MatchRows {
  rows: string;
  values: unknown[];
}

/**
 * `searchResources` in SQL: the candidates, their order and the page (by offset or by keyset) in
 * one statement, so that a page in an indexed order stops after `count`; with `total: 'accurate'`
 * the same statement counts the matches, reading at most `maxTotal + 1` of them. An estimate is the
 * planner's (`sqlEstimate`). With the store's search indexer (`indexer`) a query's `search` is
 * translated to SQL too (`SearchSql`): all of it, chains and `_has` within its `reach` included, and
 * its `_sort` keys. Without one, a search with filters is refused (`ERR_INTERNAL`). The caller's
 * own `where`, or an `order` without the index, still runs in JavaScript (`filteredPage`).
 */
export async function searchResources(
  query: Query,
  s: string,
  projectId: string,
  resourceType: string,
  asked: ResourceQuery,
  indexer?: Pick<ResourceIndexer, 'derived' | 'identifierIndexed'>,
): Promise<ResourcePage> {
  const q = narrowQuery(resourceType, asked, indexer?.identifierIndexed?.bind(indexer));
  const rule = totalRule(q);
  const values: unknown[] = [projectId, resourceType];
  const derived = indexer?.derived?.bind(indexer);
  const sql =
    indexer && q.search
      ? new SearchSql(s, values, '$1', derived && ((type, code) => derived(type).get(code)), q.search.reach)
      : undefined;
  if (!sql && q.search?.resourceType === resourceType && q.search.filters.length > 0) {
    // Without its search index the store cannot answer the filters: never a silent superset.
    throw new PlatformError(
      'ERR_INTERNAL',
      'This PostgreSQL store keeps no search index (no indexer): it cannot answer search filters',
    );
  }
  const { from, matched } = candidates(s, projectId, resourceType, q, sql, values);
  // One row per match, with the candidates' parameters only (the page adds its own).
  const matches: MatchRows = {
    rows: matched !== undefined ? `SELECT 1 FROM (${matched}) x` : `SELECT 1 FROM ${from}`,
    values: [...values],
  };
  const keys = sql && q.order && q.search ? q.search.sort : undefined;
  if (q.where || (q.order && !keys)) return filteredPage(query, s, q, from, values, rule);
  const page = await sqlPage(query, s, q, rule, { from, matched, sql, keys, values, matches });
  if (rule.mode === 'none') return resourcePage(page.resources, undefined);
  if (page.counted !== undefined) return resourcePage(page.resources, page.counted);
  if (page.exact !== undefined) return resourcePage(page.resources, totalOf(rule, page.exact));
  return resourcePage(page.resources, Math.max(await sqlEstimate(query, matches), page.atLeast));
}

/** What the candidates of a SQL page are (see `candidates`), and the parameters they use. */
interface SqlCandidates {
  from: string;
  matched: string | undefined;
  sql: SearchSql | undefined;
  keys: readonly SortKey[] | undefined;
  values: unknown[];
  matches: MatchRows;
}

/**
 * The page of a query answered in SQL, in one statement: counting the matches as far as an
 * accurate total needs, else counting nothing (with `count` 0 there is no page, only the count).
 */
async function sqlPage(
  query: Query,
  s: string,
  q: ResourceQuery,
  rule: TotalRule,
  c: SqlCandidates,
): Promise<SqlPage> {
  const offset = Math.max(0, q.offset ?? 0);
  const count = q.count === undefined ? null : Math.max(0, q.count);
  const cursor = q.after ?? q.before;
  const limit = rule.bound === Infinity ? null : countLimit(rule);
  if (count === 0) {
    if (rule.mode !== 'accurate') return { resources: [], atLeast: 0 };
    return { resources: [], counted: await countMatches(query, c.matches, limit), atLeast: 0 };
  }
  const param = (value: unknown): string => {
    c.values.push(value);
    return `$${c.values.length}`;
  };
  // The count reads the candidates' own text (the page's `m` stays a single, inlined reference).
  const counting =
    rule.mode === 'accurate'
      ? `(SELECT count(*)::int AS total FROM (${c.matches.rows} LIMIT ${param(limit)}) c) t`
      : undefined;
  const { ctes, rows: pageRows, order } = pageSelect(s, q, c, param, { count, offset });
  const statement = counting
    ? `${ctes}SELECT t.total, p.body FROM ${counting} LEFT JOIN LATERAL (${pageRows}) p ON true
        ORDER BY ${order}`
    : `${ctes}SELECT p.body FROM (${pageRows}) p ORDER BY ${order}`;
  const { rows } = await query<{ total?: number; body: string | null }>(statement, c.values);
  const resources = rows.flatMap((r) => (r.body === null ? [] : [JSON.parse(r.body) as StoredResource]));
  const passed = cursor || resources.length === 0 ? 0 : offset;
  const ended =
    (count === null || resources.length < count) && !cursor && (resources.length > 0 || offset === 0);
  return {
    resources,
    ...(counting ? { counted: rows[0]?.total ?? 0 } : {}),
    atLeast: passed + resources.length,
    ...(ended ? { exact: offset + resources.length } : {}),
  };
}

/** The number of matches, reading at most `limit` of them (`null`: all). */
async function countMatches(query: Query, matches: MatchRows, limit: number | null): Promise<number> {
  const { rows } = await query<{ total: number }>(
    `SELECT count(*)::int AS total FROM (${matches.rows} LIMIT $${matches.values.length + 1}) t`,
    [...matches.values, limit],
  );
  return rows[0]?.total ?? 0;
}

/**
 * The rows of a page (`body` and what the order compares) and the order to answer them in, with
 * the common table expressions they need: the matches ordered and cut (by `count` and `offset`, or
 * from the cursor) before the bodies are read. `matched` (seqs of the matches, see `candidates`)
 * answers a `_lastUpdated` page without a cursor alone.
 */
function pageSelect(
  s: string,
  q: ResourceQuery,
  c: SqlCandidates,
  param: (value: unknown) => string,
  window: { count: number | null; offset: number },
): { ctes: string; rows: string; order: string } {
  const { keys, values } = c;
  const cursor = q.after ?? q.before;
  const backwards = q.before !== undefined;
  let position = 'true';
  if (cursor) {
    const at = cursorItem(q, cursor);
    if (keys) position = keysBeyond(keys, 'k', backwards, { id: at.id, keys: at.keys ?? [] }, param);
    else {
      const id = param(at.id);
      // An unused parameter has no type PostgreSQL can infer: `lu` only for the `_lastUpdated` sorts.
      if (at.lastUpdatedMicros !== undefined) values.push(at.lastUpdatedMicros);
      position = beyond(q.sort, 'm', backwards, id, `$${values.length}`);
    }
  }
  const limit = param(window.count);
  const offset = param(window.offset);
  if (c.matched !== undefined && !cursor && !keys && (q.sort ?? '_lastUpdated').endsWith('_lastUpdated')) {
    // Versions of a project get their seqs and instants in one order (both are handed out under
    // the project's clock lock): a `_lastUpdated` page is the lowest (highest) seqs, read alone.
    const desc = q.sort === '-_lastUpdated' ? ' DESC' : '';
    return {
      ctes: '',
      rows: `SELECT r.body, r.lu, r.id
               FROM (SELECT seq FROM (${c.matched}) m ORDER BY seq${desc} LIMIT ${limit} OFFSET ${offset}) n
               JOIN ${s}.resources r USING (seq)`,
      order: orderBy(q.sort, 'p'),
    };
  }
  const sortValues =
    keys?.map((key, i) => `${sortValueSql(c.sql!, s, key, 'm.seq', 'm.id', '$2')} AS k${i}`) ?? [];
  const ordered = keys ? `(SELECT m.seq, m.id, ${sortValues.join(', ')} FROM m) k` : 'm';
  const t = keys ? 'k' : 'm';
  const pageOrder = keys ? keysOrderBy(keys, 'k', backwards) : orderBy(q.sort, 'm', backwards);
  return {
    ctes: `WITH m AS (SELECT r.seq, r.id, r.lu FROM ${c.from}) `,
    // The page is cut before the bodies are read: only its own are.
    rows: `SELECT r.body, n.* FROM (
             SELECT ${t}.* FROM ${ordered}
              WHERE ${position}
              ORDER BY ${pageOrder}
              LIMIT ${limit} OFFSET ${offset}) n
           JOIN ${s}.resources r USING (seq)`,
    order: keys ? keysOrderBy(keys, 'p') : orderBy(q.sort, 'p'),
  };
}

/**
 * The planner's estimate of the number of matches (`EXPLAIN` of the match rows: nothing is read),
 * as fresh as the statistics `ANALYZE` (or autovacuum) gathered.
 */
async function sqlEstimate(query: Query, matches: MatchRows): Promise<number> {
  const { rows } = await query<{ 'QUERY PLAN': { Plan: { 'Plan Rows': number } }[] }>(
    `EXPLAIN (FORMAT JSON) ${matches.rows}`,
    matches.values,
  );
  return Math.round(rows[0]?.['QUERY PLAN'][0]?.Plan['Plan Rows'] ?? 0);
}

/**
 * The page of a query with `where`, or an `order` without the index: the candidates come from
 * SQL, but filtering, sorting by `order` and paging happen here, on bodies read slice by slice
 * (versions never change, so reading a slice later, or a page's bodies again, is still
 * consistent). In the native order, reading stops once the page is complete and the count needs
 * no more (as the memory and file stores do); an `order` reads every match.
 */
async function filteredPage(
  query: Query,
  s: string,
  q: ResourceQuery,
  from: string,
  values: unknown[],
  rule: TotalRule,
): Promise<ResourcePage> {
  const window = new PageWindow<string>(q);
  const order = window.countOnly ? undefined : q.order;
  const { rows: matches } = await query<{ seq: string; id: string; lu: string }>(
    `SELECT r.seq, r.id, r.lu FROM ${from}${order || window.countOnly ? '' : ` ORDER BY ${orderBy(q.sort, 'r')}`}`,
    values,
  );
  const keyed: { seq: string; id: string; keys: SortValue[] }[] = [];
  let examined = 0;
  while (examined < matches.length && (order || !(window.full && countedEnough(rule, window.total)))) {
    const slice = matches.slice(examined, examined + SLICE);
    const { rows } = await query<{ seq: string; body: string }>(
      `SELECT seq, body FROM ${s}.resources WHERE seq = ANY($1::bigint[])`,
      [slice.map((m) => m.seq)],
    );
    const bodies = new Map(rows.map((r) => [r.seq, r.body]));
    for (const match of slice) {
      const body = bodies.get(match.seq);
      if (body === undefined) continue;
      const resource = JSON.parse(body) as StoredResource;
      if (q.where && !q.where(resource)) continue;
      if (order) keyed.push({ seq: match.seq, id: match.id, keys: order.keys(resource) });
      else window.offer({ id: match.id, lastUpdatedMicros: Number(match.lu) }, body);
    }
    examined += slice.length;
  }
  if (order) {
    keyed.sort(compareItems(q));
    for (const item of keyed) window.offer(item, item.seq);
  }
  let page = window.page();
  if (order && page.length > 0) {
    // The page's bodies, read again by seq (kept in the page's order).
    const { rows } = await query<{ seq: string; body: string }>(
      `SELECT seq, body FROM ${s}.resources WHERE seq = ANY($1::bigint[])`,
      [page],
    );
    const bodies = new Map(rows.map((r) => [r.seq, r.body]));
    page = page.flatMap((seq) => {
      const body = bodies.get(seq);
      return body === undefined ? [] : [body];
    });
  }
  const total =
    rule.mode === 'estimate'
      ? extrapolated(window.total, examined, matches.length)
      : totalOf(rule, window.total);
  return resourcePage(
    page.map((body) => JSON.parse(body) as StoredResource),
    total,
  );
}
