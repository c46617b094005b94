import type { Pool } from 'pg';
import { ConflictError, NotFoundError } from '../errors.js';
import { checkIfVersion, newExportJobRecord, updatedExportJobRecord } from '../record-rules.js';
import type { ExportJobChanges, ExportJobQueue, ExportJobRecord, NewExportJob } from '../types.js';
import { mapPgError, type Executor, type Query } from './executor.js';

interface JobRow {
  record: ExportJobRecord;
}

/** Jobs a run may hold: the others are over. */
const RUNNABLE = `status IN ('accepted', 'in-progress')`;

/** `clock_timestamp()` plus `$n` milliseconds: leases run on the database's clock, not each instance's. */
const leaseEnd = (n: number): string => `clock_timestamp() + make_interval(secs => $${n}::float8 / 1000)`;

/**
 * Applies `changes` to a job row inside an atomic operation: the record is read `FOR UPDATE`, checked
 * (`ifVersion`) and written back. With `leaseOwner`, only while that run holds the lease, which is
 * then freed; undefined when it does not.
 */
export async function updateJobRow(
  query: Query,
  s: string,
  projectId: string,
  id: string,
  changes: ExportJobChanges,
  options: { ifVersion?: number; leaseOwner?: string } = {},
): Promise<ExportJobRecord | undefined> {
  const leased = options.leaseOwner !== undefined;
  const { rows } = await query<JobRow>(
    `SELECT record FROM ${s}.export_jobs WHERE project_id = $1 AND id = $2
        ${leased ? 'AND lease_owner = $3' : ''} FOR UPDATE`,
    leased ? [projectId, id, options.leaseOwner] : [projectId, id],
  );
  const current = rows[0]?.record;
  if (!current) {
    if (leased) return undefined;
    throw new NotFoundError(`Export job ${id} not found`);
  }
  checkIfVersion('Export job', id, current.version, options.ifVersion);
  const record = updatedExportJobRecord(current, projectId, id, changes, new Date().toISOString());
  await query(
    `UPDATE ${s}.export_jobs SET status = $3, version = $4, record = $5
        ${leased ? ', lease_owner = NULL, lease_until = NULL' : ''}
      WHERE project_id = $1 AND id = $2`,
    [projectId, id, record.status, record.version, JSON.stringify(record)],
  );
  return record;
}

/**
 * The export job queue of the PostgreSQL store: leases are two columns of `export_jobs`
 * (`lease_owner`, `lease_until`), claimed with `FOR UPDATE SKIP LOCKED` so that instances claiming
 * at once never wait for each other nor take the same job. Kick-offs of a project are serialized
 * across instances with a session advisory lock.
 */
export class PostgresExportQueue implements ExportJobQueue {
  constructor(
    private readonly exec: Executor,
    private readonly pool: Pool,
    private readonly s: string,
    /** Names the advisory locks (the schema, so that two stores on one database do not share them). */
    private readonly lockPrefix: string,
    /** Runs `fn` as a call of the store (waits for migrations; `close()` waits for it). */
    private readonly track: <T>(fn: () => Promise<T>) => Promise<T>,
  ) {}

  createLeased(job: NewExportJob, run: string, leaseMs: number): Promise<ExportJobRecord> {
    return this.exec.run('write', async (query) => {
      const now = new Date().toISOString();
      const record = newExportJobRecord(job, now);
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.export_jobs
           (project_id, id, status, created_at, version, record, lease_owner, lease_until)
         VALUES ($1, $2, $3, $4, 1, $5, $6, ${leaseEnd(7)}) ON CONFLICT DO NOTHING`,
        [record.projectId, record.id, record.status, now, JSON.stringify(record), run, leaseMs],
      );
      if (rowCount === 0) throw new ConflictError(`Export job ${record.id} exists`, { attribute: 'id' });
      return record;
    });
  }

  claim(
    run: string,
    leaseMs: number,
    only?: { projectId: string; id: string },
  ): Promise<ExportJobRecord | undefined> {
    return this.exec.run('write', async (query) => {
      const { rows } = await query<JobRow>(
        `UPDATE ${this.s}.export_jobs j SET lease_owner = $1, lease_until = ${leaseEnd(2)}
           FROM (SELECT project_id, id FROM ${this.s}.export_jobs
                  WHERE ${RUNNABLE} AND (lease_until IS NULL OR lease_until < clock_timestamp())
                    AND ($3::text IS NULL OR (project_id = $3 AND id = $4))
                  ORDER BY created_at, id LIMIT 1
                  FOR UPDATE SKIP LOCKED) c
          WHERE j.project_id = c.project_id AND j.id = c.id
          RETURNING j.record`,
        [run, leaseMs, only?.projectId ?? null, only?.id ?? null],
      );
      return rows[0]?.record;
    });
  }

  renew(projectId: string, id: string, run: string, leaseMs: number): Promise<boolean> {
    return this.exec.run('write', async (query) => {
      const { rowCount } = await query(
        `UPDATE ${this.s}.export_jobs SET lease_until = ${leaseEnd(4)}
          WHERE project_id = $1 AND id = $2 AND lease_owner = $3 AND ${RUNNABLE}`,
        [projectId, id, run, leaseMs],
      );
      return rowCount === 1;
    });
  }

  finish(projectId: string, id: string, run: string, changes: ExportJobChanges): Promise<boolean> {
    return this.exec.run('atomic', async (query) => {
      return (await updateJobRow(query, this.s, projectId, id, changes, { leaseOwner: run })) !== undefined;
    });
  }

  release(projectId: string, id: string, run: string): Promise<void> {
    return this.exec.run('write', async (query) => {
      await query(
        `UPDATE ${this.s}.export_jobs SET lease_owner = NULL, lease_until = NULL
          WHERE project_id = $1 AND id = $2 AND lease_owner = $3`,
        [projectId, id, run],
      );
    });
  }

  holdForDownload(projectId: string, id: string, ms: number): Promise<void> {
    // Finished jobs only: on a runnable job the lease columns belong to the run holding it.
    return this.exec.run('write', async (query) => {
      await query(
        `UPDATE ${this.s}.export_jobs
            SET lease_until = GREATEST(coalesce(lease_until, clock_timestamp()), ${leaseEnd(3)})
          WHERE project_id = $1 AND id = $2 AND NOT (${RUNNABLE})`,
        [projectId, id, ms],
      );
    });
  }

  deleteIfUnheld(projectId: string, id: string): Promise<boolean> {
    return this.exec.run('write', async (query) => {
      await query(
        `DELETE FROM ${this.s}.export_jobs
          WHERE project_id = $1 AND id = $2 AND (lease_until IS NULL OR lease_until < clock_timestamp())`,
        [projectId, id],
      );
      const { rows } = await query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${this.s}.export_jobs WHERE project_id = $1 AND id = $2`,
        [projectId, id],
      );
      return rows[0]?.n === 0;
    });
  }

  /** Calls of `withProjectLock` holding (or waiting for) a connection now, and the ones queued. */
  private lockHolders = 0;
  private readonly lockQueue: Array<() => void> = [];

  /**
   * Runs `fn` once no more than half the pool's connections are held by project locks. A lock
   * holds its connection while `fn` uses the pool for its own statements: with every connection
   * held by a lock (or waiting for one), no `fn` could ever get the one it needs.
   */
  private async withLockSlot<T>(fn: () => Promise<T>): Promise<T> {
    const slots = Math.max(1, Math.floor((this.pool.options.max ?? 10) / 2));
    if (this.lockHolders >= slots) await new Promise<void>((resolve) => this.lockQueue.push(resolve));
    else this.lockHolders++;
    try {
      return await fn();
    } finally {
      // The slot passes straight to the next caller in line.
      const next = this.lockQueue.shift();
      if (next) next();
      else this.lockHolders--;
    }
  }

  withProjectLock<T>(projectId: string, fn: () => Promise<T>): Promise<T> {
    return this.track(() => this.withLockSlot(() => this.lockedRun(projectId, fn)));
  }

  private async lockedRun<T>(projectId: string, fn: () => Promise<T>): Promise<T> {
    const key = `${this.lockPrefix}:export-kickoff:${projectId}`;
    const client = await this.pool.connect().catch((error: unknown) => {
      throw mapPgError(error);
    });
    let broken: Error | undefined;
    try {
      await client.query('SELECT pg_advisory_lock(hashtext($1))', [key]).catch((error: unknown) => {
        broken = error as Error;
        throw mapPgError(error);
      });
      try {
        return await fn();
      } finally {
        await client.query('SELECT pg_advisory_unlock(hashtext($1))', [key]).catch((error: unknown) => {
          // A lock that could not be released dies with its connection.
          broken = error as Error;
        });
      }
    } finally {
      client.release(broken);
    }
  }
}
