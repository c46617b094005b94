import type { ResourcePage, ResourceQuery, StoredResource } from '../types.js';
import { identifierTokenKeys } from '../identifier-keys.js';
import type { Query } from './executor.js';
import { pgIdentifierKey } from './schema.js';

function orderBy(sort: ResourceQuery['sort'], t: string): string {
  switch (sort ?? '_lastUpdated') {
    case '_lastUpdated':
      return `${t}.lu, ${t}.id`;
    case '-_lastUpdated':
      return `${t}.lu DESC, ${t}.id`;
    case '_id':
      return `${t}.id`;
    case '-_id':
      return `${t}.id DESC`;
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
  query: ResourceQuery,
): { from: string; values: unknown[] } {
  const values: unknown[] = [projectId, resourceType];
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
  const live = (r: string): string => conditions.map((c) => c(r)).join(' AND ');
  const keys = query.identifier
    ? param([...new Set(identifierTokenKeys(query.identifier).map(pgIdentifierKey))])
    : undefined;
  const patients = query.compartment ? param([...new Set(query.compartment)]) : undefined;
  const ids = query.ids ? param([...new Set(query.ids)]) : undefined;
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
      values,
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
      values,
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
      values,
    };
  }
  return { from: `(SELECT seq, id, lu FROM ${s}.resources WHERE ${live('')}) r`, values };
}

/** The version `${r}seq` is in the compartment of one of the patients in parameter `patients`. */
function inCompartments(s: string, r: string, patients: string): string {
  return `EXISTS (SELECT 1 FROM ${s}.resource_compartments c
                   WHERE c.project_id = $1 AND c.patient_id = ANY(${patients}::text[])
                     AND c.resource_type = $2 AND c.seq = ${r}seq)`;
}

/**
 * `searchResources` in SQL: the candidates, their order, the page and the total in one statement.
 * With a `where` predicate the order is still SQL's, but filtering and paging happen here, on
 * bodies read slice by slice (versions never change, so reading a slice later is still consistent).
 */
export async function searchResources(
  query: Query,
  s: string,
  projectId: string,
  resourceType: string,
  q: ResourceQuery,
): Promise<ResourcePage> {
  const { from, values } = candidates(s, projectId, resourceType, q);
  const offset = Math.max(0, q.offset ?? 0);
  const count = q.count === undefined ? null : Math.max(0, q.count);
  if (!q.where) {
    values.push(count, offset);
    const { rows } = await query<{ total: number; body: string | null }>(
      `WITH m AS (SELECT r.seq, r.id, r.lu FROM ${from})
       SELECT t.total, p.body
         FROM (SELECT count(*)::int AS total FROM m) t
         LEFT JOIN LATERAL (
           SELECT r.body, m.id, m.lu FROM m JOIN ${s}.resources r USING (seq)
           ORDER BY ${orderBy(q.sort, 'm')}
           LIMIT $${values.length - 1} OFFSET $${values.length}) p ON true
        ORDER BY ${orderBy(q.sort, 'p')}`,
      values,
    );
    return {
      total: rows[0]?.total ?? 0,
      resources: rows.filter((r) => r.body !== null).map((r) => JSON.parse(r.body!) as StoredResource),
    };
  }
  const { rows: matches } = await query<{ seq: string }>(
    `SELECT r.seq FROM ${from} ORDER BY ${orderBy(q.sort, 'r')}`,
    values,
  );
  const kept: StoredResource[] = [];
  let total = 0;
  for (let i = 0; i < matches.length; i += SLICE) {
    const seqs = matches.slice(i, i + SLICE).map((m) => m.seq);
    const { rows } = await query<{ seq: string; body: string }>(
      `SELECT seq, body FROM ${s}.resources WHERE seq = ANY($1::bigint[])`,
      [seqs],
    );
    const bodies = new Map(rows.map((r) => [r.seq, r.body]));
    for (const seq of seqs) {
      const body = bodies.get(seq);
      if (body === undefined) continue;
      const resource = JSON.parse(body) as StoredResource;
      if (!q.where(resource)) continue;
      if (total >= offset && (count === null || kept.length < count)) kept.push(resource);
      total += 1;
    }
  }
  return { total, resources: kept };
}
