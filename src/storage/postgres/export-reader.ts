import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import Cursor from 'pg-cursor';
import { isoMicros } from '../engine/clock.js';
import { untilMicros } from '../export-window.js';
import { InvalidRecordError, StorageClosedError, StorageError } from '../errors.js';
import type { ExportReader, ExportReadOptions, ExportSnapshot, NdjsonChunk, Tombstone } from '../types.js';
import { LineChunks } from './line-chunks.js';
import { quoteIdentifier } from './schema.js';
import { guardCheckedOutClients, mapPgError } from './executor.js';
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

/** Rows fetched from the server-side cursor per round trip (deleted-resource reads). */
const FETCH_ROWS = 1000;

/**
 * CSV with a quote and a delimiter no stored body holds: bodies are `JSON.stringify` output, which
 * escapes every control character, so no row is ever quoted and each row is its body and `\n`,
 * byte for byte. (COPY's text format would double every backslash.)
 */
const COPY_AS_NDJSON = `WITH (FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01')`;
const QUOTE_BYTE = 0x01;

/**
 * The export reads of the PostgreSQL store. A version belongs to a snapshot when its `seq` is at
 * most the snapshot's and it was not superseded by then. Resources stream as
 * `COPY (SELECT body …) TO STDOUT` (pg-copy-streams): the stored JSON text goes from the socket
 * into NDJSON chunks without being decoded, parsed or re-encoded, with no round trip per batch,
 * and memory stays bounded whatever the number of resources. Tombstones come from a server-side
 * cursor (pg-cursor).
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
    if (this.closed) throw new StorageClosedError('The export reader is closed');
    this.assertOpen();
    // COPY takes no parameters: the values are SQL literals (escaped by pg; seq and since are numbers).
    const lit = (value: string): string => pg.escapeLiteral(value);
    const seq = String(Math.trunc(snap.seq));
    const since = `${lit(String((options.since ?? -1e15) * 1000))}::float8`;
    const until = untilMicros(options);
    const upTo = (r: string): string =>
      until === Infinity ? '' : ` AND ${r}lu <= ${lit(String(until))}::float8`;
    // Filters outside the fenced lookup, so that it stays a primary-key lookup.
    const liveOf = (r: string): string =>
      `${r}project_id = ${lit(projectId)} AND ${r}resource_type = ${lit(options.resourceType)}
       AND ${r}seq <= ${seq} AND (${r}superseded_seq IS NULL OR ${r}superseded_seq > ${seq})
       AND NOT ${r}deleted AND ${r}lu > ${since}${upTo(r)}`;
    let sql = `SELECT body FROM ${this.s}.resources WHERE ${liveOf('')} ORDER BY seq`;
    if (options.patientIds) {
      const patients = `ARRAY[${options.patientIds.map(lit).join(',')}]::text[]`;
      // Group/Patient exports read only the versions ever in these compartments, patient by
      // patient and version by version through the indexes (LATERAL, fenced with OFFSET 0).
      sql = `SELECT r.body
               FROM (SELECT DISTINCT c.seq
                       FROM (SELECT DISTINCT * FROM unnest(${patients})) AS p(patient_id)
                       CROSS JOIN LATERAL (
                         SELECT seq FROM ${this.s}.resource_compartments
                          WHERE project_id = ${lit(projectId)} AND patient_id = p.patient_id
                            AND resource_type = ${lit(options.resourceType)} AND seq <= ${seq} OFFSET 0) c) k
               CROSS JOIN LATERAL (
                 SELECT * FROM ${this.s}.resources WHERE seq = k.seq OFFSET 0) r
              WHERE ${liveOf('r.')}
              ORDER BY k.seq`;
    }
    yield* this.copyOut(`COPY (${sql}) TO STDOUT ${COPY_AS_NDJSON}`, options.reuseChunks === true);
  }

  /** The output of a `COPY … TO STDOUT` as NDJSON chunks, on a client held until the caller stops reading. */
  private async *copyOut(sql: string, reuse: boolean): AsyncIterable<NdjsonChunk> {
    const client = await this.pool.connect().catch((error: unknown) => {
      throw mapPgError(error);
    });
    let broken: Error | undefined;
    let complete = false;
    try {
      // An export reads for as long as its data takes: the store's `statement_timeout` is for requests.
      await client.query('SET statement_timeout = 0');
      const lines = new LineChunks(this.chunkBytes, reuse);
      const copy = client.query(copyTo(sql));
      for await (const data of copy as AsyncIterable<Buffer>) {
        if (data.includes(QUOTE_BYTE)) {
          // A quoted row: a body with a raw control character, which JSON.stringify never writes.
          throw new StorageError('ERR_STORAGE_CORRUPT', 'A stored resource body is not single-line JSON');
        }
        yield* lines.push(data);
      }
      const last = lines.end();
      if (last) yield last;
      await client.query('RESET statement_timeout');
      complete = true;
    } catch (error) {
      broken = error as Error;
      // A lost database as `StorageUnavailableError`: the job fails as transient, not as a bug.
      throw mapPgError(error);
    } finally {
      // A COPY left unfinished (the caller stopped reading) leaves the connection unusable: drop it.
      client.release(broken ?? (complete ? undefined : new Error('COPY not read to its end')));
    }
  }

  async typesWithVersions(
    projectId: string,
    snapshot: ExportSnapshot,
    resourceTypes: readonly string[],
  ): Promise<Set<string>> {
    const snap = asPostgresSnapshot(projectId, snapshot);
    if (this.closed) throw new StorageClosedError('The export reader is closed');
    this.assertOpen();
    // One probe of the (project, type, seq) index per type, in one statement: a system export
    // would otherwise run a COPY (and its round trips) for each of the ~145 R4 types.
    const sql = `SELECT t.type FROM unnest($2::text[]) AS t(type)
                  WHERE EXISTS (SELECT 1 FROM ${this.s}.resources r
                                 WHERE r.project_id = $1 AND r.resource_type = t.type AND r.seq <= $3)`;
    try {
      const { rows } = await this.pool.query<{ type: string }>(sql, [
        projectId,
        [...resourceTypes],
        snap.seq,
      ]);
      return new Set(rows.map((r) => r.type));
    } catch (error) {
      throw mapPgError(error);
    }
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
                    AND deleted AND lu > $4::float8 AND lu <= $5::float8
                  ORDER BY seq`;
    const until = untilMicros(options);
    const values = [
      projectId,
      options.resourceType,
      snap.seq,
      (options.since ?? -1e15) * 1000,
      until === Infinity ? 1e18 : until,
    ];
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
    const client = await this.pool.connect().catch((error: unknown) => {
      throw mapPgError(error);
    });
    let broken: Error | undefined;
    // Exempt, as `copyOut` is, from the store's `statement_timeout`; reset before the release.
    await client.query('SET statement_timeout = 0').catch((error: unknown) => {
      client.release(error as Error);
      throw mapPgError(error);
    });
    const cursor = client.query(new Cursor<R>(sql, values));
    try {
      for (;;) {
        const rows = await cursor.read(FETCH_ROWS);
        if (rows.length === 0) break;
        yield rows;
      }
    } catch (error) {
      broken = error as Error;
      throw mapPgError(error);
    } finally {
      // Closing the cursor also ends its implicit transaction, so the client is clean for reuse.
      await cursor.close().catch((error: unknown) => {
        broken ??= error as Error;
      });
      if (!broken) {
        await client.query('RESET statement_timeout').catch((error: unknown) => {
          broken = error as Error;
        });
      }
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
  guardCheckedOutClients(pool);
  return new PostgresExportReader(
    pool,
    options.schema ?? 'public',
    options.exportChunkBytes ?? 1024 * 1024,
    true,
  );
}
