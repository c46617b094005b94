import type { GrantStore } from '../grant-types.js';
import { PostgresGrants } from './grants.js';
import { AsyncLocalStorage } from 'node:async_hooks';
import pg from 'pg';
import { isoMicros } from '../engine/clock.js';
import { ConflictError, NotFoundError, StorageError } from '../errors.js';
import type {
  ExportFileStore,
  ExportJobChanges,
  ExportJobQueue,
  ExportJobRecord,
  ExportJobStatus,
  ExportReader,
  ExportSnapshot,
  FailureCountStore,
  HistoryPage,
  HistoryQuery,
  HistoryRetention,
  NewExportJob,
  PatientCompartment,
  ProjectRecord,
  SigningKeyRecord,
  Storage,
  StorageDescriptor,
  StorageOperations,
  StoredResource,
  ResourceWrite,
  WriteResult,
} from '../types.js';
import {
  type Executor,
  mapPgError,
  type TransactionMarker,
  PoolExecutor,
  TransactionExecutor,
  guardCheckedOutClients,
} from './executor.js';
import { PostgresExportReader, type PostgresSnapshot } from './export-reader.js';
import { exportFileChunkBytes, exportFileGzipLevel, PostgresExportFiles } from './export-files.js';
import { PostgresExportQueue, updateJobRow } from './export-queue.js';
import { PostgresFailureCounts } from './failure-counts.js';
import { PostgresOperations } from './operations.js';
import { postgresExportReaderModule } from './reader-module.js';
import { GuardedExecutor, Lifecycle, settlesWithin, trackCheckedOut } from './lifecycle.js';
import { migrate, quoteIdentifier } from './schema.js';
import { searchIndexOf, type SearchIndex } from './search-index-sync.js';
import { INDEX_TABLES } from './search-tables.js';
import { checkPatientCompartment, type WithCompartment } from '../patient-compartment.js';
import { newExportJobRecord } from '../record-rules.js';
import { InvalidOptionError } from '../../errors.js';
import type { PostgresStorageOptions } from './postgres-options.js';
import { checkHistoryRetention } from '../history-retention.js';
import { FirstStatistics } from './first-statistics.js';
import { HistorySweeper, readPgHistory, readPgVersion } from './resource-history.js';

export type { PostgresStorageOptions } from './postgres-options.js';
import { millis, POSTGRES_POOL_DEFAULTS, SESSION_OPTIONS } from './pool-options.js';
import { ReplicaExecutor, replicaRouterFor, type ReplicaRouter } from './replicas.js';
import { LaneExecutor } from './lane-executor.js';
import { resolveSearchLane, SearchLane } from './search-lane.js';

export { POSTGRES_POOL_DEFAULTS } from './pool-options.js';

interface JobRow {
  record: ExportJobRecord;
}

/** Expired one-time values are purged once every this many `useOnce` calls. */
const PURGE_EVERY = 1024;

class PostgresStorage extends PostgresOperations implements Storage {
  readonly exportReader: ExportReader;
  readonly descriptor?: StorageDescriptor;
  readonly exportFiles: ExportFileStore;
  readonly exportQueue: ExportJobQueue;
  readonly failureCounts: FailureCountStore;
  readonly grants: GrantStore;
  private readonly root: Executor;
  private closing: Promise<void> | undefined;
  private onceCalls = 0;
  /** The pool's clients checked out now (tracked only on a pool the store owns). */
  private readonly checkedOut: Set<pg.PoolClient>;

  constructor(
    private readonly pool: pg.Pool,
    private readonly ownsPool: boolean,
    private readonly lifecycle: Lifecycle,
    private readonly scope: AsyncLocalStorage<TransactionMarker>,
    schema: string,
    chunkBytes: number,
    descriptor: StorageDescriptor | undefined,
    compartment: PatientCompartment,
    files: { chunkBytes: number; gzipLevel: number; descriptor: StorageDescriptor | undefined },
    history: HistoryRetention,
    index: SearchIndex,
    private readonly searches: { lane: SearchLane; statementTimeoutMs: number },
    private readonly replicas?: ReplicaRouter,
  ) {
    const primary = new PoolExecutor(pool, scope, searches.statementTimeoutMs);
    const guarded = (inner: Executor) =>
      new GuardedExecutor(lifecycle, new LaneExecutor(searches.lane, inner, scope));
    const root = guarded(primary);
    super(
      replicas ? guarded(new ReplicaExecutor(primary, pool, replicas, scope)) : root,
      quoteIdentifier(schema),
      compartment,
      index,
    );
    this.root = root;
    this.checkedOut = ownsPool ? trackCheckedOut(pool) : new Set();
    this.descriptor = descriptor;
    this.failureCounts = new PostgresFailureCounts(root, this.s);
    this.grants = new PostgresGrants(root, this.s);
    this.exportReader = new PostgresExportReader(pool, schema, chunkBytes, false, () =>
      lifecycle.assertOpen(),
    );
    const { chunkBytes: fileChunk, gzipLevel, descriptor: filesDescriptor } = files;
    this.exportFiles = new PostgresExportFiles(pool, schema, fileChunk, false, filesDescriptor, gzipLevel);
    this.exportQueue = new PostgresExportQueue(root, pool, this.s, `fhir-platform-kit:${schema}`, (fn) =>
      lifecycle.track(fn),
    );
    this.sweeper = history === 'all' ? undefined : new HistorySweeper(root, this.s, history);
    this.firstStatistics = new FirstStatistics(root, this.s);
  }

  private readonly sweeper: HistorySweeper | undefined;
  private readonly firstStatistics: FirstStatistics;

  override async writeResources(projectId: string, writes: ResourceWrite[]): Promise<WriteResult[]> {
    const results = await super.writeResources(projectId, writes);
    this.firstStatistics.note(writes.length);
    await this.sweeper?.afterWrite(projectId);
    return results;
  }

  readResourceVersion(
    projectId: string,
    type: string,
    id: string,
    versionId: string,
  ): Promise<StoredResource> {
    return this.root.run('read', (query) => readPgVersion(query, this.s, projectId, type, id, versionId));
  }

  readHistory(projectId: string, query: HistoryQuery): Promise<HistoryPage> {
    // A type's or the project's history walks many versions: in the search lane, as a search.
    const search = query.id === undefined ? { projectId } : undefined;
    return this.root.run('read', (q) => readPgHistory(q, this.s, projectId, query), search);
  }

  /** Transaction functions running now (the scope is disabled when none is). */
  private openTransactions = 0;

  transaction<T>(fn: (tx: StorageOperations) => Promise<T>): Promise<T> {
    return this.lifecycle.track(async () => {
      if (this.scope.getStore()?.open) {
        throw new StorageError('ERR_STORAGE_IN_TRANSACTION', 'Transactions do not nest; use the tx view');
      }
      const client = await this.pool.connect().catch((error: unknown) => {
        throw mapPgError(error);
      });
      const exec = new TransactionExecutor(client, this.searches.statementTimeoutMs);
      let broken: Error | undefined;
      let written = 0;
      try {
        await client.query('BEGIN');
        const marker: TransactionMarker = { open: true, exec };
        let result: T;
        this.openTransactions++;
        try {
          const ops = new PostgresOperations(exec, this.s, this.compartment, this.index, true, (n) => {
            written += n;
          });
          result = await this.scope.run(marker, () => fn(ops));
        } finally {
          marker.open = false;
          // On Node 20 an enabled AsyncLocalStorage makes every promise of the process run a hook:
          // enabled only while a transaction function runs (`run` enables it again).
          if (--this.openTransactions === 0) this.scope.disable();
        }
        await exec.end();
        exec.assertCommittable();
        const commit = await client.query('COMMIT');
        this.replicas?.noteWrite();
        if (commit.command !== 'ROLLBACK') this.firstStatistics.note(written);
        // PostgreSQL answers COMMIT of an aborted transaction with a rollback, not an error.
        if (commit.command === 'ROLLBACK') {
          throw new StorageError('ERR_STORAGE_TRANSACTION_ABORTED', 'The transaction was rolled back');
        }
        return result;
      } catch (error) {
        await exec.end();
        try {
          await client.query('ROLLBACK');
        } catch (rollbackError) {
          broken = rollbackError as Error;
        }
        throw mapPgError(error);
      } finally {
        client.release(broken);
      }
    });
  }

  deleteProject(id: string): Promise<void> {
    return this.root.run('atomic', async (query) => {
      const { rowCount } = await query(`DELETE FROM ${this.s}.projects WHERE id = $1`, [id]);
      if (rowCount === 0) throw new NotFoundError(`Project ${id} not found`);
      // The clock row first: it waits for the project's resource writers in flight.
      for (const table of [
        'resource_clocks',
        'resource_compartments',
        'resource_identifiers',
        'resources',
        'users',
        'memberships',
        'clients',
        'export_jobs',
        'oauth_grants',
      ]) {
        await query(`DELETE FROM ${this.s}.${table} WHERE project_id = $1`, [id]);
      }
      // The index rows by their keys. The keys stay (a few rows per type and parameter written):
      // a project made again with the same id writes its rows under them again.
      for (const table of INDEX_TABLES) {
        await query(
          `DELETE FROM ${this.s}.${table}
            WHERE key = ANY(ARRAY(SELECT key FROM ${this.s}.search_keys WHERE project_id = $1))`,
          [id],
        );
      }
    });
  }

  listProjects(): Promise<ProjectRecord[]> {
    return this.root.run('read', async (query) => {
      const { rows } = await query<{ record: ProjectRecord }>(
        `SELECT record FROM ${this.s}.projects ORDER BY created_at, id`,
      );
      return rows.map((r) => r.record);
    });
  }

  listSigningKeys(): Promise<SigningKeyRecord[]> {
    return this.root.run('read', async (query) => {
      const { rows } = await query<{ record: SigningKeyRecord }>(
        `SELECT record FROM ${this.s}.signing_keys ORDER BY created_at, kid`,
      );
      return rows.map((r) => r.record);
    });
  }

  saveSigningKey(key: SigningKeyRecord): Promise<void> {
    return this.root.run('write', async (query) => {
      await query(
        `INSERT INTO ${this.s}.signing_keys (kid, created_at, record) VALUES ($1, $2, $3)
         ON CONFLICT (kid) DO UPDATE SET created_at = excluded.created_at, record = excluded.record`,
        [key.kid, key.createdAt, JSON.stringify(key)],
      );
    });
  }

  useOnce(key: string, expiresAt: number): Promise<boolean> {
    const purge = ++this.onceCalls % PURGE_EVERY === 0;
    return this.root.run('write', async (query) => {
      const now = Date.now();
      if (purge) await query(`DELETE FROM ${this.s}.one_time_values WHERE expires_at <= $1`, [now]);
      // A concurrent insert of the same key waits for the first one, then finds it unexpired.
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.one_time_values AS o (key, expires_at) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE o.expires_at <= $3`,
        [key, Math.ceil(expiresAt), now],
      );
      return rowCount === 1;
    });
  }

  createExportJob(job: NewExportJob): Promise<ExportJobRecord> {
    return this.root.run('write', async (query) => {
      const now = new Date().toISOString();
      const record = newExportJobRecord(job, now);
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.export_jobs (project_id, id, status, created_at, version, record)
         VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT DO NOTHING`,
        [record.projectId, record.id, record.status, now, JSON.stringify(record)],
      );
      if (rowCount === 0) throw new ConflictError(`Export job ${record.id} exists`, { attribute: 'id' });
      return record;
    });
  }

  readExportJob(projectId: string, id: string): Promise<ExportJobRecord> {
    return this.root.run('read', async (query) => {
      const { rows } = await query<JobRow>(
        `SELECT record FROM ${this.s}.export_jobs WHERE project_id = $1 AND id = $2`,
        [projectId, id],
      );
      if (!rows[0]) throw new NotFoundError(`Export job ${id} not found`);
      return rows[0].record;
    });
  }

  updateExportJob(
    projectId: string,
    id: string,
    changes: ExportJobChanges,
    options?: { ifVersion?: number },
  ): Promise<ExportJobRecord> {
    return this.root.run(
      'atomic',
      async (query) =>
        (await updateJobRow(query, this.s, projectId, id, changes, {
          ...(options?.ifVersion !== undefined ? { ifVersion: options.ifVersion } : {}),
        }))!,
    );
  }

  deleteExportJob(projectId: string, id: string): Promise<void> {
    return this.root.run('write', async (query) => {
      const { rowCount } = await query(
        `DELETE FROM ${this.s}.export_jobs WHERE project_id = $1 AND id = $2`,
        [projectId, id],
      );
      if (rowCount === 0) throw new NotFoundError(`Export job ${id} not found`);
    });
  }

  listExportJobs(q?: { projectId?: string; status?: ExportJobStatus[] }): Promise<ExportJobRecord[]> {
    return this.root.run('read', async (query) => {
      const { rows } = await query<JobRow>(
        `SELECT record FROM ${this.s}.export_jobs
          WHERE ($1::text IS NULL OR project_id = $1) AND ($2::text[] IS NULL OR status = ANY($2::text[]))
          ORDER BY created_at, id`,
        [q?.projectId ?? null, q?.status ?? null],
      );
      return rows.map((r) => r.record);
    });
  }

  exportSnapshot(projectId: string): Promise<ExportSnapshot> {
    return this.root.run('atomic', async (query) => {
      // Taking the project's clock lock waits for its resource writers in flight; every version
      // committed so far then has a seq at most the sequence's last value, and every later one
      // gets a greater seq. `takenAt` is a tick of the clock, like a write: every version in the
      // snapshot is at or before it, every later one after it (so it is a safe next `_since`).
      const { rows } = await query<{ lu: string }>(
        `INSERT INTO ${this.s}.resource_clocks AS c (project_id, lu)
           VALUES ($1, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint * 1000)
         ON CONFLICT (project_id) DO UPDATE SET lu = greatest(c.lu + 1, excluded.lu)
         RETURNING lu`,
        [projectId],
      );
      const { rows: seqRows } = await query<{ seq: string }>(
        `SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END AS seq FROM ${this.s}.resource_seq`,
      );
      const snapshot: PostgresSnapshot = {
        takenAt: isoMicros(Number(rows[0]!.lu)),
        adapter: 'postgres',
        projectId,
        seq: Number(seqRows[0]!.seq),
      };
      return snapshot;
    });
  }

  /** `SELECT 1` through the pool: rejects when the store is closed or the database unreachable. */
  ping(): Promise<void> {
    return this.root.run('read', async (query) => {
      await query('SELECT 1');
    });
  }

  releaseSnapshot(): Promise<void> {
    // Every version is kept, so a snapshot pins nothing.
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      // Searches still waiting for the lane have not started: refused now rather than run.
      this.searches.lane.close();
      const settled = await this.lifecycle.close();
      if (!this.ownsPool) return;
      if (!settled) {
        // Calls stuck past the close timeout (a lock wait, a lost network): end their connections,
        // so that they fail and the pool can end.
        for (const client of this.checkedOut) void client.end().catch(() => undefined);
      }
      await this.replicas?.close();
      const ended = this.pool.end();
      // A client its holder never releases (an export read abandoned mid-way) keeps `end` pending.
      if (!(await settlesWithin(ended, settled ? 0 : this.lifecycle.closeTimeoutMs))) {
        ended.catch(() => undefined);
      }
    })();
    return this.closing;
  }
}

/** The PostgreSQL store (see `postgresStorage` in `src/stores.ts`, which fills in the compartment). */
export function createPostgresStorage(options: WithCompartment<PostgresStorageOptions>): Storage {
  const schema = options.schema ?? 'public';
  if (typeof schema !== 'string' || schema.length === 0 || schema.length > 63) {
    throw new InvalidOptionError('postgresStorage: schema must be a non-empty name of at most 63 characters');
  }
  const chunkBytes = options.exportChunkBytes ?? 1024 * 1024;
  if (!Number.isInteger(chunkBytes) || chunkBytes < 1) {
    throw new InvalidOptionError('postgresStorage: exportChunkBytes must be a positive integer');
  }
  const defaults = POSTGRES_POOL_DEFAULTS;
  const max = options.maxConnections ?? defaults.maxConnections;
  if (!Number.isInteger(max) || max < 2) {
    throw new InvalidOptionError('postgresStorage: maxConnections must be an integer of at least 2');
  }
  const acquireTimeoutMs = millis(options.acquireTimeoutMs, 'acquireTimeoutMs', defaults.acquireTimeoutMs);
  const lockTimeoutMs = millis(options.lockTimeoutMs, 'lockTimeoutMs', defaults.lockTimeoutMs);
  const statementTimeoutMs = millis(
    options.statementTimeoutMs,
    'statementTimeoutMs',
    defaults.statementTimeoutMs,
  );
  const idleTimeoutMs = millis(
    options.idleInTransactionTimeoutMs,
    'idleInTransactionTimeoutMs',
    defaults.idleInTransactionTimeoutMs,
  );
  const closeTimeoutMs = millis(options.closeTimeoutMs, 'closeTimeoutMs', defaults.closeTimeoutMs);
  const { connectionString } = options;
  if (connectionString !== undefined && (typeof connectionString !== 'string' || connectionString === '')) {
    throw new InvalidOptionError('postgresStorage: connectionString must be a non-empty string');
  }
  checkPatientCompartment(options.compartment, 'postgresStorage');
  const lane = new SearchLane(resolveSearchLane(options, options.pool?.options.max ?? max, acquireTimeoutMs));
  let pool = options.pool;
  const ownsPool = pool === undefined;
  if (!pool) {
    pool = new pg.Pool({
      ...(connectionString !== undefined ? { connectionString } : {}),
      max,
      connectionTimeoutMillis: acquireTimeoutMs,
      lock_timeout: lockTimeoutMs,
      statement_timeout: statementTimeoutMs,
      idle_in_transaction_session_timeout: idleTimeoutMs,
      options: SESSION_OPTIONS,
    });
    // A connection dropped while idle must not crash the process; the next query reports it.
    pool.on('error', () => undefined);
  }
  guardCheckedOutClients(pool);
  const descriptor: StorageDescriptor | undefined =
    connectionString === undefined
      ? undefined
      : {
          module: postgresExportReaderModule(),
          exportName: 'openPostgresExportReader',
          options: { connectionString, schema, exportChunkBytes: chunkBytes },
        };
  const fileChunkBytes = exportFileChunkBytes(options.exportFileChunkBytes, 'postgresStorage');
  const gzipLevel = exportFileGzipLevel(options.exportFileGzipLevel, 'postgresStorage');
  const filesDescriptor: StorageDescriptor | undefined =
    connectionString === undefined
      ? undefined
      : {
          module: postgresExportReaderModule('./export-files.ts'),
          exportName: 'openPostgresExportFiles',
          options: { connectionString, schema, chunkBytes: fileChunkBytes, gzipLevel },
        };
  const index = searchIndexOf(pool, schema, options.indexer);
  const replicas = replicaRouterFor(options.readReplicas, max, acquireTimeoutMs, options.replicaFreshness);
  return new PostgresStorage(
    pool,
    ownsPool,
    new Lifecycle(() => migrate(pool, schema).then(() => index.open()), closeTimeoutMs),
    new AsyncLocalStorage(),
    schema,
    chunkBytes,
    descriptor,
    options.compartment,
    { chunkBytes: fileChunkBytes, gzipLevel, descriptor: filesDescriptor },
    checkHistoryRetention('postgresStorage', options.history),
    index,
    // The timeout of the store's own sessions; a caller's pool's is not known.
    { lane, statementTimeoutMs: ownsPool ? statementTimeoutMs : 0 },
    replicas,
  );
}
