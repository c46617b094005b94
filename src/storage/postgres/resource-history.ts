import { isoMicros } from '../engine/clock.js';
import { checkHistoryQuery, versionNotFound } from '../engine/history.js';
import { InvalidRecordError } from '../errors.js';
import { DAY_MICROS } from '../history-retention.js';
import type {
  HistoryEntry,
  HistoryMethod,
  HistoryPage,
  HistoryQuery,
  HistoryRetention,
  StoredResource,
} from '../types.js';
import type { Executor, Query } from './executor.js';

/**
 * History on PostgreSQL: every version is a row of `resources`, numbered by `seq`. A project's
 * writers hold its clock row until they commit, so its versions become visible in `seq` order:
 * `seq` is the paging cursor (a page continues below the last `seq` of the one before, and
 * versions committed meanwhile are above it). The walks use `resources_history_instance`
 * (migration 5) and `resources_history`.
 */

const CURSOR = /^p([0-9]{1,19})$/;

function decodeCursor(cursor: string | undefined): string | undefined {
  if (cursor === undefined) return undefined;
  const match = typeof cursor === 'string' ? CURSOR.exec(cursor) : null;
  if (!match) throw new InvalidRecordError('Not a history cursor of this store');
  return match[1];
}

/** `Storage.readResourceVersion` on PostgreSQL. */
export async function readPgVersion(
  query: Query,
  s: string,
  projectId: string,
  resourceType: string,
  id: string,
  versionId: string,
): Promise<StoredResource> {
  // PostgreSQL text cannot hold NUL: no stored record has one.
  if ([projectId, resourceType, id, versionId].some((v) => v.includes('\u0000')))
    throw versionNotFound(resourceType, id, versionId);
  const { rows } = await query<{ deleted: boolean; body: string | null }>(
    `SELECT deleted, body FROM ${s}.resources
      WHERE project_id = $1 AND resource_type = $2 AND id = $3 AND version_id = $4
      ORDER BY seq DESC LIMIT 1`,
    [projectId, resourceType, id, versionId],
    true,
  );
  const row = rows[0];
  if (!row || row.deleted || row.body === null)
    throw versionNotFound(resourceType, id, versionId, row !== undefined);
  return JSON.parse(row.body) as StoredResource;
}

interface HistoryRow {
  seq: string;
  resource_type: string;
  id: string;
  version_id: string;
  lu: string;
  deleted: boolean;
  body: string | null;
  prev_deleted: boolean | null;
}

/** The conditions of `query` on `resources r`, with their parameters from `$2` on. */
function conditions(s: string, projectId: string, query: HistoryQuery): { where: string; params: unknown[] } {
  const params: unknown[] = [projectId];
  const where = ['r.project_id = $1'];
  const param = (value: unknown): string => `$${params.push(value)}`;
  if (query.type !== undefined) where.push(`r.resource_type = ${param(query.type)}`);
  if (query.id !== undefined) where.push(`r.id = ${param(query.id)}`);
  if (query.since !== undefined) where.push(`r.lu >= ${param(Math.ceil(query.since * 1000))}`);
  if (query.at) {
    where.push(`r.lu < ${param(Math.floor(query.at.to * 1000))}`);
    where.push(
      `(r.superseded_seq IS NULL OR (SELECT n.lu FROM ${s}.resources n WHERE n.seq = r.superseded_seq) > ${param(
        Math.floor(query.at.from * 1000),
      )})`,
    );
  }
  return { where: where.join(' AND '), params };
}

function methodOf(row: HistoryRow): HistoryMethod {
  if (row.deleted) return 'DELETE';
  if (row.prev_deleted === null) return row.version_id === '1' ? 'POST' : 'PUT';
  return row.prev_deleted ? 'POST' : 'PUT';
}

/** `Storage.readHistory` on PostgreSQL. */
export async function readPgHistory(
  query: Query,
  s: string,
  projectId: string,
  history: HistoryQuery,
): Promise<HistoryPage> {
  checkHistoryQuery(history);
  const before = decodeCursor(history.cursor);
  // PostgreSQL text cannot hold NUL: no stored record has one.
  if ([projectId, history.type ?? '', history.id ?? ''].some((v) => v.includes('\u0000')))
    return history.id !== undefined ? { entries: [], total: 0 } : { entries: [] };
  const filter = conditions(s, projectId, history);
  const { where } = filter;
  const params = [...filter.params];
  const cursorCondition = before === undefined ? '' : ` AND r.seq < $${params.push(before)}`;
  const limit = `$${params.push(history.count + 1)}`;
  // A type's or a resource's versions: one walk back along `resources_history` or
  // `resources_history_instance`. The project's: the same walk per type, merged; the types come
  // from a loose scan of `resources_history` (one index probe per type), so no index on
  // `(project_id, seq)` has to be written with every version.
  const versions =
    history.type !== undefined
      ? `SELECT r.* FROM ${s}.resources r WHERE ${where}${cursorCondition} ORDER BY r.seq DESC LIMIT ${limit}`
      : `WITH RECURSIVE types(rt) AS (
           SELECT (SELECT min(resource_type) FROM ${s}.resources WHERE project_id = $1)
           UNION ALL
           SELECT (SELECT min(resource_type) FROM ${s}.resources WHERE project_id = $1 AND resource_type > t.rt)
             FROM types t WHERE t.rt IS NOT NULL)
         SELECT r.* FROM types CROSS JOIN LATERAL (
           SELECT r.* FROM ${s}.resources r
            WHERE ${where}${cursorCondition} AND r.resource_type = types.rt
            ORDER BY r.seq DESC LIMIT ${limit}) r
         WHERE types.rt IS NOT NULL ORDER BY r.seq DESC LIMIT ${limit}`;
  const { rows } = await query<HistoryRow>(
    `SELECT r.seq, r.resource_type, r.id, r.version_id, r.lu, r.deleted, r.body,
        (SELECT p.deleted FROM ${s}.resources p
          WHERE p.project_id = r.project_id AND p.resource_type = r.resource_type AND p.id = r.id
            AND p.seq < r.seq ORDER BY p.seq DESC LIMIT 1) AS prev_deleted
       FROM (${versions}) r ORDER BY r.seq DESC`,
    params,
  );
  const page = rows.slice(0, history.count);
  const entries = page.map((row): HistoryEntry => {
    const entry: HistoryEntry = {
      method: methodOf(row),
      resourceType: row.resource_type,
      id: row.id,
      versionId: row.version_id,
      lastUpdated: isoMicros(Number(row.lu)),
    };
    if (!row.deleted && row.body !== null) entry.resource = JSON.parse(row.body) as StoredResource;
    return entry;
  });
  const last = page[page.length - 1];
  const result: HistoryPage = { entries };
  if (rows.length > history.count && last) result.next = `p${last.seq}`;
  if (history.id !== undefined) {
    const counted = await query<{ n: string }>(
      `SELECT count(*) AS n FROM ${s}.resources r WHERE ${where}`,
      filter.params,
    );
    result.total = Number(counted.rows[0]!.n);
  }
  return result;
}

/**
 * Deletes up to `limit` superseded versions of a project that `retention` no longer keeps, and
 * their compartment rows, never one an export job still running may read (superseded after the
 * oldest such job's snapshot). Answers how many it deleted.
 */
export async function sweepPgHistory(
  query: Query,
  s: string,
  projectId: string,
  retention: Exclude<HistoryRetention, 'all'>,
  limit = 1000,
): Promise<number> {
  const { rows: pins } = await query<{ seq: string | null }>(
    `SELECT min((record->'snapshot'->>'seq')::bigint)::text AS seq FROM ${s}.export_jobs
      WHERE project_id = $1 AND status IN ('accepted', 'in-progress') AND record->'snapshot'->>'seq' IS NOT NULL`,
    [projectId],
  );
  const pin = pins[0]?.seq ?? null;
  const dropped =
    'days' in retention
      ? `(SELECT n.lu FROM ${s}.resources n WHERE n.seq = r.superseded_seq) < $3`
      : `(SELECT count(*) FROM ${s}.resources n
           WHERE n.project_id = r.project_id AND n.resource_type = r.resource_type AND n.id = r.id
             AND n.seq > r.seq) >= $3`;
  const bound = 'days' in retention ? Date.now() * 1000 - retention.days * DAY_MICROS : retention.versions;
  const { rows } = await query<{ seq: string }>(
    `WITH gone AS (
       DELETE FROM ${s}.resources WHERE seq IN (
         SELECT r.seq FROM ${s}.resources r
          WHERE r.project_id = $1 AND r.superseded_seq IS NOT NULL
            AND ($2::bigint IS NULL OR r.superseded_seq <= $2::bigint) AND ${dropped}
          ORDER BY r.seq LIMIT $4)
       RETURNING seq)
     , c AS (DELETE FROM ${s}.resource_compartments WHERE project_id = $1 AND seq IN (SELECT seq FROM gone))
     SELECT seq FROM gone`,
    [projectId, pin, bound, limit],
  );
  return rows.length;
}

/** Sweeps a project's history after every `every`th resource write to it (see `sweepPgHistory`). */
export class HistorySweeper {
  private readonly writes = new Map<string, number>();

  constructor(
    private readonly exec: Executor,
    private readonly s: string,
    private readonly retention: Exclude<HistoryRetention, 'all'>,
    private readonly every = 256,
  ) {}

  /** Counts a write; on every `every`th, sweeps the project. A failed sweep is tried again later. */
  async afterWrite(projectId: string): Promise<void> {
    const count = (this.writes.get(projectId) ?? 0) + 1;
    this.writes.set(projectId, count % this.every);
    if (count < this.every) return;
    await this.exec
      .run('atomic', (query) => sweepPgHistory(query, this.s, projectId, this.retention))
      .catch(() => undefined);
  }
}
