import pg from 'pg';
import Cursor from 'pg-cursor';
import { isoMicros } from '../engine/clock.js';
import { InvalidRecordError, StorageClosedError } from '../errors.js';
import type { ExportReader, ExportReadOptions, ExportSnapshot, NdjsonChunk, Tombstone } from '../types.js';
import { quoteIdentifier } from './schema.js';
import { InvalidOptionError } from '../../errors.js';

/** What `exportSnapshot` of the PostgreSQL store holds: every version with `seq <= seq` is in it. */
export interface PostgresSnapshot extends ExportSnapshot {
  adapter: 'postgres';
  projectId: string;
  seq: number;
}

function asPostgresSnapshot(projectId: string, snapshot: ExportSnapshot): PostgresSnapshot {
  if (
    snapshot.adapter !== 'postgres' ||
    snapshot.projectId !== projectId ||
    typeof snapshot.seq !== 'number'
  ) {
    throw new InvalidRecordError('Not a PostgreSQL storage snapshot of this project');
  }
  return snapshot as PostgresSnapshot;
}

/** Options of {@link openPostgresExportReader} (what `postgresStorage().descriptor.options` holds). */
export interface PostgresExportReaderOptions {
  /** libpq connection string of the database. */
  connectionString: string;
  /**
   * Schema holding the store's tables.
   * @default 'public'
   */
  schema?: string;
  /**
   * Largest NDJSON chunk yielded, in bytes (a chunk holds at least one line).
   * @default 1048576
   */
  exportChunkBytes?: number;
}

/** Rows fetched from the server-side cursor per round trip. */
const FETCH_ROWS = 1000;

/**
 * The export reads of the PostgreSQL store. A version belongs to a snapshot when its `seq` is at
 * most the snapshot's and it was not superseded by then; rows stream from a server-side cursor
 * (pg-cursor), so memory stays bounded whatever the number of resources.
 */
export class PostgresExportReader implements ExportReader {
  private readonly s: string;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    schema: string,
    private readonly chunkBytes: number,
    /** Ends the pool on close (a reader opened from a descriptor owns its pool). */
    private readonly ownsPool: boolean,
    /** Throws when the store this reader belongs to is closed. */
    private readonly assertOpen: () => void = () => undefined,
  ) {
    this.s = quoteIdentifier(schema);
  }

  async *readResources(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<NdjsonChunk> {
    const snap = asPostgresSnapshot(projectId, snapshot);
    const values: unknown[] = [projectId, options.resourceType, snap.seq, (options.since ?? -1e15) * 1000];
    // Filters outside the fenced lookup, so that it stays a primary-key lookup.
    const liveOf = (r: string): string =>
      `${r}project_id = $1 AND ${r}resource_type = $2 AND ${r}seq <= $3
       AND (${r}superseded_seq IS NULL OR ${r}superseded_seq > $3) AND NOT ${r}deleted AND ${r}lu > $4::float8`;
    let sql = `SELECT body FROM ${this.s}.resources WHERE ${liveOf('')} ORDER BY seq`;
    if (options.patientIds) {
      values.push(options.patientIds);
      // Group/Patient exports read only the versions ever in these compartments, patient by
      // patient and version by version through the indexes (LATERAL, fenced with OFFSET 0).
      sql = `SELECT r.body
               FROM (SELECT DISTINCT c.seq
                       FROM (SELECT DISTINCT * FROM unnest($5::text[])) AS p(patient_id)
                       CROSS JOIN LATERAL (
                         SELECT seq FROM ${this.s}.resource_compartments
                          WHERE project_id = $1 AND patient_id = p.patient_id AND resource_type = $2
                            AND seq <= $3 OFFSET 0) c) k
               CROSS JOIN LATERAL (
                 SELECT * FROM ${this.s}.resources WHERE seq = k.seq OFFSET 0) r
              WHERE ${liveOf('r.')}
              ORDER BY k.seq`;
    }
    let lines: string[] = [];
    let bytes = 0;
    for await (const rows of this.stream<{ body: string }>(sql, values)) {
      for (const { body } of rows) {
        lines.push(body, '\n');
        bytes += body.length + 1;
        if (bytes >= this.chunkBytes) {
          yield { data: lines.join(''), count: lines.length / 2 };
          lines = [];
          bytes = 0;
        }
      }
    }
    if (lines.length > 0) yield { data: lines.join(''), count: lines.length / 2 };
  }

  async *readDeleted(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<Tombstone> {
    const snap = asPostgresSnapshot(projectId, snapshot);
    const sql = `SELECT id, lu FROM ${this.s}.resources
                  WHERE project_id = $1 AND resource_type = $2 AND seq <= $3
                    AND (superseded_seq IS NULL OR superseded_seq > $3)
                    AND deleted AND lu > $4::float8
                  ORDER BY seq`;
    const values = [projectId, options.resourceType, snap.seq, (options.since ?? -1e15) * 1000];
    for await (const rows of this.stream<{ id: string; lu: string }>(sql, values)) {
      for (const row of rows) {
        yield { resourceType: options.resourceType, id: row.id, deletedAt: isoMicros(Number(row.lu)) };
      }
    }
  }

  /** Rows of `sql` in batches, from a cursor on a client held until the caller stops reading. */
  private async *stream<R>(sql: string, values: unknown[]): AsyncIterable<R[]> {
    if (this.closed) throw new StorageClosedError('The export reader is closed');
    this.assertOpen();
    const client = await this.pool.connect();
    const cursor = client.query(new Cursor<R>(sql, values));
    let broken: Error | undefined;
    try {
      for (;;) {
        const rows = await cursor.read(FETCH_ROWS);
        if (rows.length === 0) break;
        yield rows;
      }
    } catch (error) {
      broken = error as Error;
      throw error;
    } finally {
      // Closing the cursor also ends its implicit transaction, so the client is clean for reuse.
      await cursor.close().catch((error: unknown) => {
        broken ??= error as Error;
      });
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsPool) await this.pool.end();
  }
}

/**
 * Opens a read-only view of a PostgreSQL store for an export worker thread: the target of
 * `postgresStorage().descriptor`. It owns a small pool, ended by `close()`.
 */
export function openPostgresExportReader(options: PostgresExportReaderOptions): ExportReader {
  if (typeof options.connectionString !== 'string' || options.connectionString.length === 0) {
    throw new InvalidOptionError('openPostgresExportReader: connectionString is required');
  }
  const pool = new pg.Pool({ connectionString: options.connectionString, max: 2 });
  // An idle client's connection error must not crash the worker; the next query reports it.
  pool.on('error', () => undefined);
  return new PostgresExportReader(
    pool,
    options.schema ?? 'public',
    options.exportChunkBytes ?? 1024 * 1024,
    true,
  );
}
