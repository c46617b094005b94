import { promisify } from 'node:util';
import { constants, deflateRaw, inflateRaw } from 'node:zlib';

/**
 * The compressed form of export file chunks in PostgreSQL. Each chunk is compressed on its own as
 * raw DEFLATE blocks (RFC 1951) ending with a sync flush: byte-aligned, none marked final. So the
 * chunks of a file, laid end to end, are one deflate stream, and each chunk also inflates alone
 * (its compressor started empty: no back-reference reaches into an earlier chunk). A file is sent
 * to clients that accept gzip as one gzip member (RFC 1952 §2.3) without recompressing:
 * {@link GZIP_HEADER}, every chunk as stored, then {@link gzipTrailer}.
 */

const deflateAsync = promisify(deflateRaw);
const inflateAsync = promisify(inflateRaw);

/** Encodings of `export_files.encoding`. */
export type ChunkEncoding = 'identity' | 'deflate';

/**
 * A gzip member header: deflate, no flags, no modification time, no extra flags, OS unknown (255).
 */
export const GZIP_HEADER: Buffer = Buffer.from([0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff]);

/** An empty final block with fixed codes: ends the deflate stream the chunks left open. */
const FINAL_BLOCK = Buffer.from([0x03, 0x00]);

/** Bytes a gzip answer adds to the stored chunks: the header, the final block and the trailer. */
export const GZIP_OVERHEAD = GZIP_HEADER.length + FINAL_BLOCK.length + 8;

/**
 * What follows the last chunk in the gzip form: the final block, then the CRC-32 and the size
 * modulo 2^32 of the uncompressed bytes, little-endian (RFC 1952 §2.3.1).
 */
export function gzipTrailer(crc: number, size: number): Buffer {
  const trailer = Buffer.alloc(FINAL_BLOCK.length + 8);
  FINAL_BLOCK.copy(trailer);
  trailer.writeUInt32LE(crc >>> 0, FINAL_BLOCK.length);
  trailer.writeUInt32LE(size % 2 ** 32, FINAL_BLOCK.length + 4);
  return trailer;
}

/** Compresses one chunk at `level` (1–9), on the libuv thread pool. */
export function deflateChunk(data: Buffer, level: number): Promise<Buffer> {
  return deflateAsync(data, { level, finishFlush: constants.Z_SYNC_FLUSH });
}

/**
 * The bytes of one stored chunk (see {@link deflateChunk}), on the libuv thread pool. `size`, the
 * chunk's length uncompressed, sizes the output buffer: with zlib's default (16 KiB) a 1 MiB chunk
 * takes 64 trips between the pool and the main thread and a copy of the pieces, which made
 * inflating 2–3x slower.
 */
export function inflateChunk(data: Buffer, size: number): Promise<Buffer> {
  return inflateAsync(data, {
    finishFlush: constants.Z_SYNC_FLUSH,
    // One byte more than the output: zlib then ends with room to spare, not with one more round.
    chunkSize: Math.max(constants.Z_MIN_CHUNK, size + 1),
  });
}
