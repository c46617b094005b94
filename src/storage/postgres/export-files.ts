import { Readable } from 'node:stream';
import { crc32 } from 'node:zlib';
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
import { copyChunks, type ChunkRow } from './chunk-copy.js';
import {
  deflateChunk,
  GZIP_HEADER,
  GZIP_OVERHEAD,
  gzipTrailer,
  inflateChunk,
  type ChunkEncoding,
} from './deflate-chunks.js';

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
  /**
   * zlib level (1–9) each chunk is compressed at before it is written, or 0 to store the bytes
   * uncompressed. Level 1 compresses export NDJSON about 7x at over 100 MiB/s per core.
   * @default 1
   */
  gzipLevel?: number;
}

const DEFAULT_CHUNK = 1024 * 1024;
const DEFAULT_GZIP_LEVEL = 1;

/** A completed file's row. */
interface StoredFile {
  id: string;
  /** Bytes of the file (NDJSON, uncompressed). */
  size: number;
  encoding: ChunkEncoding;
  /** CRC-32 of the uncompressed bytes (`deflate` files). */
  crc: number;
  /** Bytes of its chunks as stored. */
  storedSize: number;
}

/** Chunks of a file being compressed or inserted while its writer produces the next. */
const CHUNKS_AHEAD = 2;

/** Stored bytes a download reads per query (after the first chunk). */
const BATCH_BYTES = 2 * 1024 * 1024;

/**
 * Chunks a download inflates ahead of the one being sent, in parallel on the libuv thread pool
 * (4 threads by default): inflating is most of a download's CPU, and spread over threads it keeps
 * up with the socket (one at a time, a download took about 1.6x as long as with four).
 */
const INFLATE_AHEAD = 4;

/**
 * `rows` through `map`, which runs up to `depth` rows ahead: the next rows' `map` (inflates on the
 * libuv thread pool) run while the caller handles the current one. (An async generator queues
 * `next()` calls made before the previous one settled, so the rows still come in order.)
 */
async function* readAhead<T>(
  rows: AsyncGenerator<T>,
  map: (row: T) => Promise<T>,
  depth: number,
): AsyncGenerator<T> {
  const pull = async (): Promise<IteratorResult<T>> => {
    const item = await rows.next();
    return item.done ? item : { done: false, value: await map(item.value) };
  };
  const ahead: Promise<IteratorResult<T>>[] = [];
  const push = (): void => {
    const next = pull();
    // Awaited in turn unless the caller stops first: never an unhandled rejection.
    next.catch(() => undefined);
    ahead.push(next);
  };
  try {
    for (let i = 0; i < depth; i++) push();
    for (;;) {
      const current = await ahead.shift()!;
      if (current.done) return;
      push();
      yield current.value;
    }
  } finally {
    await Promise.allSettled(ahead);
    await rows.return(undefined);
  }
}

/** SQLSTATE of a foreign key violation: the file's job (or the file) was deleted meanwhile. */
const FOREIGN_KEY_VIOLATION = '23503';

function gone(): PlatformError {
  return new PlatformError('ERR_EXPORT_STOPPED', 'The export file no longer exists');
}

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
 * a row per file in `export_files`, its bytes in `export_file_chunks` (`chunkBytes` of the file
 * each, compressed on their own at `gzipLevel` (see `deflate-chunks.ts`) and stored out of line).
 * Clients that accept gzip get the chunks as stored; others, and `Range` requests, get them
 * inflated. Files written uncompressed (level 0, or before migration 7) are served as they are.
 * Files belong to their job row (`ON DELETE CASCADE`): deleting the job deletes them, and a run
 * still writing for a deleted job fails on its next chunk. A new file is accepted only while its
 * job is running and, when the sink has a `run`, leased to that run. Downloads read about
 * {@link BATCH_BYTES} of stored chunks per binary `COPY` (`chunk-copy.ts`), the next batch fetched
 * (and the next {@link INFLATE_AHEAD} chunks inflated) while one is sent, so memory stays at a few
 * MiB whatever the file's size; writes likewise compress a chunk while the previous one is inserted.
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
    /** zlib level of new chunks; 0 stores them uncompressed. */
    private readonly gzipLevel: number = DEFAULT_GZIP_LEVEL,
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
    const level = this.gzipLevel;
    const encoding: ChunkEncoding = level > 0 ? 'deflate' : 'identity';
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let written = 0;
    let stored = 0;
    let crc = 0;
    // Up to CHUNKS_AHEAD chunks being compressed (on the libuv thread pool) and inserted (one at a
    // time, in order) while the caller produces the next: a write waits only when that many are
    // pending. A failure is reported by a later write or the commit (the no-op handlers keep it
    // from being unhandled meanwhile).
    const steps: Promise<void>[] = [];
    let inserted: Promise<unknown> = Promise.resolve();
    const flush = async (): Promise<void> => {
      if (pendingBytes > 0) {
        const data = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
        pending = [];
        const len = pendingBytes;
        pendingBytes = 0;
        const off = written;
        written += len;
        if (encoding === 'deflate') crc = crc32(data, crc);
        const body = encoding === 'deflate' ? deflateChunk(data, level) : Promise.resolve(data);
        body.catch(() => undefined);
        const previous = inserted;
        const step = (async () => {
          const bytes = await body;
          await previous;
          stored += bytes.length;
          await this.query(
            `INSERT INTO ${this.s}.export_file_chunks (file_id, off, len, data) VALUES ($1, $2, $3, $4)`,
            [fileId, off, len, bytes],
            mapWriteError,
          );
        })();
        step.catch(() => undefined);
        inserted = step;
        steps.push(step);
      }
      while (steps.length > CHUNKS_AHEAD) await steps.shift();
    };
    const settle = async (): Promise<void> => {
      while (steps.length > 0) await steps.shift();
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
        await settle();
        const { rowCount } = await this.query(
          `UPDATE ${this.s}.export_files
              SET complete = true, size = $2, encoding = $3, crc32 = $4, stored_size = $5
            WHERE file_id = $1`,
          [fileId, written, encoding, encoding === 'deflate' ? crc : null, stored],
          mapWriteError,
        );
        if (rowCount === 0) throw stopped();
      },
      abort: async () => {
        pending = [];
        pendingBytes = 0;
        await settle().catch(() => undefined);
        await this.query(`DELETE FROM ${this.s}.export_files WHERE file_id = $1`, [fileId]);
      },
    };
  }

  private async file(ref: ExportFilesRef, name: string): Promise<StoredFile | undefined> {
    const { rows } = await this.query<{
      file_id: string;
      size: string;
      encoding: ChunkEncoding;
      crc32: string | null;
      stored_size: string | null;
    }>(
      `SELECT file_id, size, encoding, crc32, stored_size FROM ${this.s}.export_files
        WHERE project_id = $1 AND job_id = $2 AND name = $3 AND complete
        ORDER BY file_id LIMIT 1`,
      [ref.projectId, ref.jobId, name],
    );
    const row = rows[0];
    if (!row) return undefined;
    const size = Number(row.size);
    return {
      id: row.file_id,
      size,
      encoding: row.encoding,
      crc: Number(row.crc32 ?? 0),
      storedSize: row.stored_size === null ? size : Number(row.stored_size),
    };
  }

  async size(ref: ExportFilesRef, name: string): Promise<number | undefined> {
    return (await this.file(ref, name))?.size;
  }

  async gzipSize(ref: ExportFilesRef, name: string): Promise<number | undefined> {
    const file = await this.file(ref, name);
    return file?.encoding === 'deflate' ? file.storedSize + GZIP_OVERHEAD : undefined;
  }

  read(ref: ExportFilesRef, name: string, range?: ExportFileRange): Readable {
    return Readable.from(this.bytesOf(ref, name, range), { objectMode: false });
  }

  readGzip(ref: ExportFilesRef, name: string): Readable {
    return Readable.from(this.gzipOf(ref, name), { objectMode: false });
  }

  /** The bytes of `range` (default: all), inflated when stored compressed. */
  private async *bytesOf(ref: ExportFilesRef, name: string, range?: ExportFileRange): AsyncIterable<Buffer> {
    const file = await this.file(ref, name);
    if (!file) throw gone();
    const start = range?.start ?? 0;
    const end = Math.min(range?.end ?? file.size - 1, file.size - 1);
    let rows = this.chunkRows(file, start, end);
    if (file.encoding === 'deflate') {
      rows = readAhead(
        rows,
        async (row) => ({ ...row, data: await inflateChunk(row.data, row.len).catch(() => Buffer.alloc(0)) }),
        INFLATE_AHEAD,
      );
    }
    for await (const row of rows) {
      if (row.data.length !== row.len) {
        throw new PlatformError('ERR_EXPORT_STOPPED', 'The export file is damaged');
      }
      yield row.data.subarray(Math.max(0, start - row.off), Math.min(row.len, end - row.off + 1));
    }
  }

  /** The gzip form of a `deflate` file: a header, its chunks as stored, the trailer. */
  private async *gzipOf(ref: ExportFilesRef, name: string): AsyncIterable<Buffer> {
    const file = await this.file(ref, name);
    if (file?.encoding !== 'deflate') throw gone();
    yield Buffer.from(GZIP_HEADER);
    for await (const row of this.chunkRows(file, 0, file.size - 1)) yield row.data;
    yield gzipTrailer(file.crc, file.size);
  }

  /**
   * The chunk rows, as stored, covering bytes `start` to `end` of a file, in order: the first
   * alone, then in batches of up to {@link BATCH_BYTES} of stored bytes (about 8 chunks of a
   * compressed file, 2 of an uncompressed one); the next batch is fetched while the caller
   * handles one.
   */
  private async *chunkRows(file: StoredFile, start: number, end: number): AsyncGenerator<ChunkRow> {
    const chunks = Math.max(1, Math.ceil(file.size / this.chunkBytes));
    const perBatch = Math.max(1, Math.floor(BATCH_BYTES / Math.max(1, file.storedSize / chunks)));
    const fetch = (at: number, limit: number): Promise<ChunkRow[]> => {
      const rows = copyChunks(this.pool, `${this.s}.export_file_chunks`, file.id, at, limit);
      // Awaited by the loop unless the reader stops first: never an unhandled rejection.
      rows.catch(() => undefined);
      return rows;
    };
    let next = start <= end ? fetch(start, 1) : undefined;
    let at = start;
    while (next) {
      const rows = await next;
      const last = rows[rows.length - 1];
      if (!last) throw gone();
      const after = last.off + last.len;
      next = after <= end ? fetch(after, perBatch) : undefined;
      for (const row of rows) {
        // Chunks hold consecutive ranges: one missing (or a file cut short) is a damaged file.
        if (row.off > at || row.off + row.len <= at) {
          throw new PlatformError('ERR_EXPORT_STOPPED', 'The export file is truncated');
        }
        at = row.off + row.len;
        yield row;
        if (at > end) return;
      }
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

/** Checks `gzipLevel` (an integer from 0 to 9) of the PostgreSQL export file store. */
export function exportFileGzipLevel(value: unknown, owner: string): number {
  if (value === undefined) return DEFAULT_GZIP_LEVEL;
  if (!Number.isInteger(value) || (value as number) < 0 || (value as number) > 9) {
    throw new InvalidOptionError(`${owner}: exportFileGzipLevel must be an integer from 0 to 9`);
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
    undefined,
    exportFileGzipLevel(options.gzipLevel, 'openPostgresExportFiles'),
  );
}
