import type pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { PlatformError } from '../../errors.js';
import { mapPgError } from './executor.js';

/** A chunk row: `len` bytes of the file from `off`, as stored (compressed for `deflate` files). */
export interface ChunkRow {
  off: number;
  len: number;
  data: Buffer;
}

/** `PGCOPY\n\377\r\n\0`: the signature of COPY's binary format. */
const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

function damaged(): PlatformError {
  return new PlatformError('ERR_EXPORT_STOPPED', 'The export file is damaged');
}

/**
 * The rows of a `COPY (SELECT off, len, data …) TO STDOUT (FORMAT binary)` output: int8, int4 and
 * bytea fields, each row's data a view of `out` (no copy).
 */
export function parseChunkCopy(out: Buffer): ChunkRow[] {
  if (out.length < SIGNATURE.length + 8 || !out.subarray(0, SIGNATURE.length).equals(SIGNATURE))
    throw damaged();
  let at = SIGNATURE.length + 4;
  at += 4 + out.readUInt32BE(at);
  const rows: ChunkRow[] = [];
  for (;;) {
    if (at + 2 > out.length) throw damaged();
    const fields = out.readInt16BE(at);
    at += 2;
    if (fields === -1) return rows;
    if (fields !== 3 || at + 12 + 8 + 4 > out.length) throw damaged();
    // off: int8 (8 bytes), len: int4 (4 bytes), each after its int32 length.
    if (out.readInt32BE(at) !== 8 || out.readInt32BE(at + 12) !== 4) throw damaged();
    const off = Number(out.readBigInt64BE(at + 4));
    const len = out.readInt32BE(at + 16);
    const size = out.readInt32BE(at + 20);
    at += 24;
    if (size < 0 || at + size > out.length) throw damaged();
    rows.push({ off, len, data: out.subarray(at, at + size) });
    at += size;
  }
}

/**
 * Up to `limit` chunks of file `fileId` (in table `table`), in order, from the one holding byte
 * `at`, read with `COPY … TO STDOUT (FORMAT binary)`: the stored bytes as they are. A plain query
 * would have PostgreSQL send bytea as hex text (twice the bytes, encoded by the server and
 * decoded here), and node-postgres decodes every field of a binary-format result as UTF-8, which
 * mangles compressed bytes; the download of a compressed file spent about half its time on that.
 * The connection is held for one batch only, never while a client reads the download.
 */
export async function copyChunks(
  pool: pg.Pool,
  table: string,
  fileId: string,
  at: number,
  limit: number,
): Promise<ChunkRow[]> {
  // COPY takes no parameters: the file id comes from the database (a bigint), the others are numbers.
  if (!/^[0-9]+$/.test(fileId)) throw damaged();
  const sql = `COPY (SELECT off, len, data FROM ${table}
                      WHERE file_id = ${fileId} AND off >= (SELECT coalesce(max(off), 0) FROM ${table}
                                                             WHERE file_id = ${fileId} AND off <= ${Math.trunc(at)})
                      ORDER BY off LIMIT ${Math.trunc(limit)}) TO STDOUT (FORMAT binary)`;
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw mapPgError(error);
  }
  let failure: unknown;
  try {
    const parts: Buffer[] = [];
    for await (const part of client.query(copyTo(sql)) as AsyncIterable<Buffer>) parts.push(part);
    return parseChunkCopy(parts.length === 1 ? parts[0]! : Buffer.concat(parts));
  } catch (error) {
    failure = error;
    throw error instanceof PlatformError ? error : mapPgError(error);
  } finally {
    // A connection that failed mid-COPY is not reused.
    client.release(failure instanceof Error && !(failure instanceof PlatformError) ? failure : undefined);
  }
}
