import { Readable } from 'node:stream';
import pg from 'pg';
import { PlatformError, InvalidOptionError } from '../../errors.js';
import type {
  ExportFileHandle,
  ExportFileRange,
  ExportFileSink,
  ExportFileStore,
  ExportFilesRef,
  StorageDescriptor,
} from '../types.js';
import { quoteIdentifier } from './schema.js';
import { guardCheckedOutClients, mapPgError } from './executor.js';

/** Options of {@link openPostgresExportFiles} (what `postgresStorage().exportFiles.descriptor` holds). */
export interface PostgresExportFilesOptions {
  /** libpq connection string of the database. */
  connectionString: string;
  /**
   * Schema holding the store's tables.
   * @default 'public'
   */
  schema?: string;
  /**
   * Bytes buffered before a chunk is written (a write larger than that is one chunk).
   * @default 1048576
   */
  chunkBytes?: number;
}

const DEFAULT_CHUNK = 1024 * 1024;

/** Binary result values as received (Buffers): bytea without the hex text encoding. */
const RAW_BINARY: pg.CustomTypesConfig = {
  getTypeParser: (() => (value: unknown) => value) as pg.CustomTypesConfig['getTypeParser'],
};

/** SQLSTATE of a foreign key violation: the file's job (or the file) was deleted meanwhile. */
const FOREIGN_KEY_VIOLATION = '23503';

function stopped(): PlatformError {
  return new PlatformError(
    'ERR_EXPORT_STOPPED',
    'The export job was cancelled or is run by another instance',
  );
}

/** A deleted job as `ERR_EXPORT_STOPPED`; a lost database as `StorageUnavailableError`. */
function mapWriteError(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code === FOREIGN_KEY_VIOLATION ? stopped() : mapPgError(error);
}

/**
 * Export files kept in PostgreSQL, so that every instance on the database serves every job's files:
 * a row per file in `export_files`, its bytes in `export_file_chunks` (about `chunkBytes` each,
 * stored uncompressed out of line). Files belong to their job row (`ON DELETE CASCADE`): deleting
 * the job deletes them, and a run still writing for a deleted job fails on its next chunk. A new
 * file is accepted only while its job is running and, when the sink has a `run`, leased to that run.
 * Downloads read one chunk at a time, so memory stays bounded whatever the file's size.
 */
export class PostgresExportFiles implements ExportFileStore {
  readonly descriptor?: StorageDescriptor;
  private readonly s: string;

  constructor(
    private readonly pool: pg.Pool,
    schema: string,
    private readonly chunkBytes: number,
    /** Ends the pool on close (a store opened from a descriptor owns its pool). */
    private readonly ownsPool: boolean,
    descriptor?: StorageDescriptor,
  ) {
    this.s = quoteIdentifier(schema);
    if (descriptor) this.descriptor = descriptor;
  }

  /**
   * Runs one statement: a lost database as `StorageUnavailableError` (503, the job fails as
   * transient), other failures through `mapError` (writes: a deleted job as `ERR_EXPORT_STOPPED`).
   */
  private async query<R extends pg.QueryResultRow>(
    statement: string | pg.QueryConfig,
    values?: unknown[],
    mapError: (error: unknown) => unknown = mapPgError,
  ): Promise<pg.QueryResult<R>> {
    try {
      return typeof statement === 'string'
        ? await this.pool.query<R>(statement, values)
        : await this.pool.query<R>(statement);
    } catch (error) {
      throw mapError(error);
    }
  }

  sink(ref: ExportFilesRef): ExportFileSink {
    return { create: (name) => this.create(ref, name) };
  }

  private async create(ref: ExportFilesRef, name: string): Promise<ExportFileHandle> {
    // FOR SHARE: a claim of the job by another run waits for this insert, then clears the file.
    const { rows } = await this.query<{ file_id: string }>(
      `INSERT INTO ${this.s}.export_files (project_id, job_id, name)
         SELECT project_id, id, $3 FROM ${this.s}.export_jobs
          WHERE project_id = $1 AND id = $2 AND status IN ('accepted', 'in-progress')
            AND ($4::text IS NULL OR lease_owner = $4)
          FOR SHARE
         RETURNING file_id`,
      [ref.projectId, ref.jobId, name, ref.run ?? null],
      mapWriteError,
    );
    const fileId = rows[0]?.file_id;
    if (fileId === undefined) throw stopped();
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let written = 0;
    const flush = async (): Promise<void> => {
      if (pendingBytes === 0) return;
      const data = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
      pending = [];
      const len = pendingBytes;
      pendingBytes = 0;
      await this.query(
        `INSERT INTO ${this.s}.export_file_chunks (file_id, off, len, data) VALUES ($1, $2, $3, $4)`,
        [fileId, written, len, data],
        mapWriteError,
      );
      written += len;
    };
    return {
      write: async (data) => {
        // Copied: the caller may reuse its buffer once the write resolves.
        const bytes = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data);
        pending.push(bytes);
        pendingBytes += bytes.length;
        if (pendingBytes >= this.chunkBytes) await flush();
      },
      commit: async () => {
        await flush();
        const { rowCount } = await this.query(
          `UPDATE ${this.s}.export_files SET complete = true, size = $2 WHERE file_id = $1`,
          [fileId, written],
          mapWriteError,
        );
        if (rowCount === 0) throw stopped();
      },
      abort: async () => {
        pending = [];
        pendingBytes = 0;
        await this.query(`DELETE FROM ${this.s}.export_files WHERE file_id = $1`, [fileId]);
      },
    };
  }

  private async file(ref: ExportFilesRef, name: string): Promise<{ id: string; size: number } | undefined> {
    const { rows } = await this.query<{ file_id: string; size: string }>(
      `SELECT file_id, size FROM ${this.s}.export_files
        WHERE project_id = $1 AND job_id = $2 AND name = $3 AND complete
        ORDER BY file_id LIMIT 1`,
      [ref.projectId, ref.jobId, name],
    );
    const row = rows[0];
    return row ? { id: row.file_id, size: Number(row.size) } : undefined;
  }

  async size(ref: ExportFilesRef, name: string): Promise<number | undefined> {
    return (await this.file(ref, name))?.size;
  }

  read(ref: ExportFilesRef, name: string, range?: ExportFileRange): Readable {
    return Readable.from(this.chunks(ref, name, range), { objectMode: false });
  }

  /** The bytes of `range` (default: all), one stored chunk per query. */
  private async *chunks(ref: ExportFilesRef, name: string, range?: ExportFileRange): AsyncIterable<Buffer> {
    const file = await this.file(ref, name);
    if (!file) throw new PlatformError('ERR_EXPORT_STOPPED', 'The export file no longer exists');
    const end = Math.min(range?.end ?? file.size - 1, file.size - 1);
    let at = range?.start ?? 0;
    while (at <= end) {
      // Binary results: bytea in text format would be hex, twice the bytes to send and decode.
      // (`binary` is a pg query option its type declarations lack.)
      const config: pg.QueryConfig & { binary: boolean } = {
        text: `SELECT off::text AS start, data FROM ${this.s}.export_file_chunks
                WHERE file_id = $1 AND off <= $2 ORDER BY off DESC LIMIT 1`,
        values: [file.id, at],
        binary: true,
        types: RAW_BINARY,
      };
      const { rows } = await this.query<{ start: Buffer; data: Buffer }>(config);
      const row = rows[0];
      if (!row) throw new PlatformError('ERR_EXPORT_STOPPED', 'The export file no longer exists');
      const off = Number(row.start.toString());
      const piece = row.data.subarray(at - off, Math.min(row.data.length, end - off + 1));
      if (piece.length === 0) throw new PlatformError('ERR_EXPORT_STOPPED', 'The export file is truncated');
      yield piece;
      at += piece.length;
    }
  }

  async bytes(ref: ExportFilesRef): Promise<number> {
    const { rows } = await this.query<{ total: string }>(
      `SELECT coalesce(sum(size), 0) AS total FROM ${this.s}.export_files
        WHERE project_id = $1 AND job_id = $2 AND complete`,
      [ref.projectId, ref.jobId],
    );
    return Number(rows[0]?.total ?? 0);
  }

  async remove(ref: ExportFilesRef): Promise<void> {
    await this.query(`DELETE FROM ${this.s}.export_files WHERE project_id = $1 AND job_id = $2`, [
      ref.projectId,
      ref.jobId,
    ]);
  }

  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }
}

/** Checks `chunkBytes` (a positive integer) of the PostgreSQL export file store. */
export function exportFileChunkBytes(value: unknown, owner: string): number {
  if (value === undefined) return DEFAULT_CHUNK;
  if (!Number.isInteger(value) || (value as number) < 1) {
    throw new InvalidOptionError(`${owner}: exportFileChunkBytes must be a positive integer`);
  }
  return value as number;
}

/**
 * Opens the PostgreSQL export file store in an export worker thread: the target of
 * `postgresStorage().exportFiles.descriptor`. It owns a small pool, ended by `close()`.
 */
export function openPostgresExportFiles(options: PostgresExportFilesOptions): ExportFileStore {
  if (typeof options.connectionString !== 'string' || options.connectionString.length === 0) {
    throw new InvalidOptionError('openPostgresExportFiles: connectionString is required');
  }
  // Chunks need not wait for their WAL flush: the job's end is written with a synchronous commit
  // after them, which flushes the WAL up to it (a crash before loses the job's run, not its end).
  // (An `options` parameter in the connection string takes precedence over this one.)
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: 2,
    options: '-c synchronous_commit=off',
  });
  // An idle client's connection error must not crash the worker; the next query reports it.
  pool.on('error', () => undefined);
  guardCheckedOutClients(pool);
  return new PostgresExportFiles(
    pool,
    options.schema ?? 'public',
    exportFileChunkBytes(options.chunkBytes, 'openPostgresExportFiles'),
    true,
  );
}
