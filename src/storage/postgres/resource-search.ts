import type { ResourcePage, ResourceQuery, StoredResource } from '../types.js';
import type { Query } from './executor.js';

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

/** The WHERE clause (current, live versions narrowed by the query's SQL-side fields) and its values. */
function candidates(
  s: string,
  projectId: string,
  resourceType: string,
  query: ResourceQuery,
): { where: string; values: unknown[] } {
  const values: unknown[] = [projectId, resourceType];
  const param = (value: unknown): string => {
    values.push(value);
    return `$${values.length}`;
  };
  const clauses = ['project_id = $1', 'resource_type = $2', 'superseded_seq IS NULL', 'NOT deleted'];
  if (query.ids) clauses.push(`id = ANY(${param(query.ids)}::text[])`);
  const range = query.lastUpdated;
  // `lu` is in microseconds, the range in milliseconds.
  if (range?.gt !== undefined) clauses.push(`lu > ${param(range.gt * 1000)}::float8`);
  if (range?.ge !== undefined) clauses.push(`lu >= ${param(range.ge * 1000)}::float8`);
  if (range?.lt !== undefined) clauses.push(`lu < ${param(range.lt * 1000)}::float8`);
  if (range?.le !== undefined) clauses.push(`lu <= ${param(range.le * 1000)}::float8`);
  if (query.compartment) {
    clauses.push(
      `seq IN (SELECT seq FROM ${s}.resource_compartments
                WHERE project_id = $1 AND resource_type = $2 AND patient_id = ANY(${param(query.compartment)}::text[]))`,
    );
  }
  return { where: clauses.join(' AND '), values };
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
  const { where, values } = candidates(s, projectId, resourceType, q);
  const offset = Math.max(0, q.offset ?? 0);
  const count = q.count === undefined ? null : Math.max(0, q.count);
  if (!q.where) {
    values.push(count, offset);
    const { rows } = await query<{ total: number; body: string | null }>(
      `WITH m AS (SELECT seq, id, lu FROM ${s}.resources WHERE ${where})
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
    `SELECT seq FROM ${s}.resources r WHERE ${where} ORDER BY ${orderBy(q.sort, 'r')}`,
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
