import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { syncDir } from './durable-json-file.js';
import type { FaultHook } from './faults.js';

/**
 * An entry's header: `FPKB`, the body's length (u32), the batch's seq (u48, then 2 zero bytes), the
 * CRC-32 of the length, seq and body (u32). All little-endian.
 */
const HEADER = 20;
const MAGIC = 0x424b5046; // "FPKB" read as a little-endian u32

/** What a batch appended to one log: `data` goes at `offset` of the store-relative `file`. */
export interface BatchPart {
  file: string;
  offset: number;
  data: Buffer;
}

/** One intact entry of the batch log. */
export interface BatchEntry {
  seq: number;
  parts: BatchPart[];
}

/**
 * `batch.log`, the file store's write-ahead log (see docs/file-store.md, "Writes: group commit"): each
 * batch committed without a `directory.json` write appends one entry holding every record it
 * appends to the project logs, with where each goes, and fdatasyncs this one file. An intact entry
 * is the batch's commit: on open, every entry is written again into its logs (whatever a crash kept
 * of them), and a checkpoint (every log synced, the last seq in `commit.log`) empties the file.
 */
export class BatchLog {
  /** Bytes of complete entries (where the next one goes). */
  size = 0;

  private constructor(
    readonly file: string,
    private readonly handle: FileHandle,
    private readonly faults: FaultHook | undefined,
  ) {}

  /** Opens (or creates, durably) `batch.log` in the store directory `dir`. */
  static async open(dir: string, faults?: FaultHook): Promise<BatchLog> {
    const file = path.join(dir, 'batch.log');
    faults?.('open', file);
    let handle: FileHandle;
    try {
      handle = await fs.open(file, 'r+');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      handle = await fs.open(file, 'wx+');
      try {
        await syncDir(dir, faults);
      } catch (failure) {
        await handle.close().catch(() => undefined);
        throw failure;
      }
    }
    const log = new BatchLog(file, handle, faults);
    log.size = (await handle.stat()).size;
    return log;
  }

  /**
   * The intact entries, in order. A torn or damaged entry ends the log: it and anything after it
   * were never acknowledged (each entry is synced before its batch is), so `end` is where the
   * intact ones stop, for the caller to cut the rest.
   */
  async read(): Promise<{ entries: BatchEntry[]; end: number }> {
    const content = await this.handle.readFile();
    const entries: BatchEntry[] = [];
    let at = 0;
    while (at + HEADER <= content.length) {
      if (content.readUInt32LE(at) !== MAGIC) break;
      const length = content.readUInt32LE(at + 4);
      const end = at + HEADER + length;
      if (end > content.length) break;
      const crc = crc32(content.subarray(at + HEADER, end), crc32(content.subarray(at + 4, at + 16)));
      if (crc !== content.readUInt32LE(at + 16)) break;
      const parts = decodeParts(content.subarray(at + HEADER, end));
      if (!parts) break;
      entries.push({ seq: content.readUIntLE(at + 8, 6), parts });
      at = end;
    }
    return { entries, end: at };
  }

  /**
   * Whether an entry can describe `parts` (at most 65,535 logs, under 4 GiB in all); a batch that
   * does not fit commits without `batch.log`.
   */
  static fits(parts: readonly { bytes: number }[]): boolean {
    let total = 0;
    for (const part of parts) total += part.bytes + 512;
    return parts.length <= 0xffff && total < 0xffffffff;
  }

  /**
   * Appends batch `seq`'s entry and syncs it: once this resolves, the batch is committed. On
   * failure part of the entry may be in the file past `size`: the caller cuts it (`truncate`).
   */
  async append(seq: number, parts: readonly BatchPart[]): Promise<void> {
    let describe = 2;
    const names = parts.map((p) => Buffer.from(p.file, 'utf8'));
    for (const name of names) describe += 2 + name.length + 10;
    const head = Buffer.alloc(HEADER + describe);
    let at = HEADER;
    head.writeUInt16LE(parts.length, at);
    at += 2;
    let length = describe;
    parts.forEach((part, i) => {
      const name = names[i]!;
      head.writeUInt16LE(name.length, at);
      name.copy(head, at + 2);
      at += 2 + name.length;
      head.writeUIntLE(part.offset, at, 6);
      head.writeUInt32LE(part.data.length, at + 6);
      at += 10;
      length += part.data.length;
    });
    head.writeUInt32LE(MAGIC, 0);
    head.writeUInt32LE(length, 4);
    head.writeUIntLE(seq, 8, 6);
    let crc = crc32(head.subarray(4, 16));
    crc = crc32(head.subarray(HEADER), crc);
    for (const part of parts) crc = crc32(part.data, crc);
    head.writeUInt32LE(crc, 16);
    this.faults?.('write', this.file);
    await writeAll(this.handle, [head, ...parts.map((p) => p.data)], this.size);
    this.faults?.('fsync', this.file);
    await this.handle.datasync();
    this.size += HEADER + length;
  }

  /** Cuts the file back to `size` bytes, durably. */
  async truncate(size: number): Promise<void> {
    this.faults?.('truncate', this.file);
    await this.handle.truncate(size);
    this.faults?.('fsync', this.file);
    await this.handle.datasync();
    this.size = size;
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}

/** The parts of an entry's body; undefined when the description does not fit the body. */
function decodeParts(body: Buffer): BatchPart[] | undefined {
  if (body.length < 2) return undefined;
  const count = body.readUInt16LE(0);
  const described: { file: string; offset: number; length: number }[] = [];
  let at = 2;
  for (let i = 0; i < count; i++) {
    if (at + 2 > body.length) return undefined;
    const nameLength = body.readUInt16LE(at);
    if (at + 2 + nameLength + 10 > body.length) return undefined;
    const file = body.toString('utf8', at + 2, at + 2 + nameLength);
    at += 2 + nameLength;
    described.push({ file, offset: body.readUIntLE(at, 6), length: body.readUInt32LE(at + 6) });
    at += 10;
  }
  const parts: BatchPart[] = [];
  for (const { file, offset, length } of described) {
    if (at + length > body.length) return undefined;
    parts.push({ file, offset, data: body.subarray(at, at + length) });
    at += length;
  }
  return at === body.length ? parts : undefined;
}

/** Writes `buffers` one after the other at `position`, whatever a short write leaves. */
export async function writeAll(handle: FileHandle, buffers: Buffer[], position: number): Promise<void> {
  let rest = buffers;
  let at = position;
  while (rest.length > 0) {
    const { bytesWritten } = await handle.writev(rest, at);
    at += bytesWritten;
    let skip = bytesWritten;
    const left: Buffer[] = [];
    for (const buf of rest) {
      if (skip >= buf.length) {
        skip -= buf.length;
        continue;
      }
      left.push(skip > 0 ? buf.subarray(skip) : buf);
      skip = 0;
    }
    rest = left;
  }
}
