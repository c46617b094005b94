import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { StorageError } from '../errors.js';
import { syncDir } from './durable-json-file.js';
import { HEADER_LENGTH, scanRecords, SUPERSEDED_AT, supersededField, type ScannedRecord } from './record.js';

/**
 * One open file behind a log. Compaction replaces a log's segment; the old one stays open while
 * readers that pinned it finish, then closes.
 */
export class Segment {
  private refs = 0;
  private retired = false;
  private closing: Promise<void> | undefined;

  constructor(readonly handle: FileHandle) {}

  pin(): void {
    this.refs += 1;
  }

  unpin(): void {
    this.refs -= 1;
    this.closeIfUnused();
  }

  retire(): void {
    this.retired = true;
    this.closeIfUnused();
  }

  async closed(): Promise<void> {
    await this.closing;
  }

  private closeIfUnused(): void {
    if (this.retired && this.refs <= 0 && !this.closing) {
      this.closing = this.handle.close().catch(() => undefined);
    }
  }
}

/** Where a committed resource body lives. */
export interface FileRef {
  log: LogFile;
  segment: Segment;
  /** Offset of the record in the segment's file. */
  offset: number;
  /** Bytes of the JSON (without header and newline). */
  jsonLength: number;
}

/** An append-only log file (see `record.ts` for the record format). */
export class LogFile {
  /** Committed end: every byte before it belongs to complete, committed records. */
  size = 0;
  /** Bytes of records known to be superseded (compaction reclaims them). */
  deadBytes = 0;
  /** Number of records appended since the file was (re)written. */
  records = 0;

  private constructor(
    readonly file: string,
    public segment: Segment,
  ) {}

  static async open(file: string, options: { create: boolean; sync: boolean }): Promise<LogFile> {
    let handle: FileHandle;
    try {
      handle = await fs.open(file, 'r+');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || !options.create) throw error;
      await fs.mkdir(path.dirname(file), { recursive: true });
      handle = await fs.open(file, 'wx+');
      // The new entry, and directories `mkdir` may just have created (up to `projects/`).
      if (options.sync) {
        for (let dir = path.dirname(file), i = 0; i < 3; i++, dir = path.dirname(dir)) await syncDir(dir);
      }
    }
    const log = new LogFile(file, new Segment(handle));
    log.size = (await handle.stat()).size;
    return log;
  }

  /** Appends whole records at the committed end with one write; returns where they start. */
  async append(data: Buffer): Promise<number> {
    const at = this.size;
    let written = 0;
    try {
      while (written < data.length) {
        const { bytesWritten } = await this.segment.handle.write(
          data,
          written,
          data.length - written,
          at + written,
        );
        written += bytesWritten;
      }
    } catch (error) {
      await this.truncate(at);
      throw error;
    }
    this.size = at + data.length;
    return at;
  }

  /** Cuts the file back to `size` (a failed or uncommitted batch). */
  async truncate(size: number): Promise<void> {
    await this.segment.handle.truncate(size);
    this.size = size;
  }

  async sync(): Promise<void> {
    await this.segment.handle.datasync();
  }

  /** Writes a record's superseded-at field in place (no fsync: recovery recomputes them). */
  async markSuperseded(segment: Segment, offset: number, by: number): Promise<void> {
    await segment.handle.write(supersededField(by), 0, 12, offset + SUPERSEDED_AT);
  }

  async readJson(ref: FileRef): Promise<Buffer> {
    const buf = Buffer.allocUnsafe(ref.jsonLength);
    let got = 0;
    while (got < ref.jsonLength) {
      const { bytesRead } = await ref.segment.handle.read(
        buf,
        got,
        ref.jsonLength - got,
        ref.offset + HEADER_LENGTH + got,
      );
      if (bytesRead === 0)
        throw new StorageError('ERR_STORAGE_CORRUPT', `Short read in ${this.file} at ${ref.offset}`);
      got += bytesRead;
    }
    return buf;
  }

  scan(from: number, to: number, onRecord: (record: ScannedRecord) => boolean | void): Promise<number> {
    const handle = this.segment.handle;
    return scanRecords(
      async (buf, position) => (await handle.read(buf, 0, buf.length, position)).bytesRead,
      from,
      to,
      onRecord,
    );
  }

  /** Replaces the file with `temp` (complete and synced), keeping the old segment for pinned readers. */
  async replaceWith(temp: string, size: number, sync: boolean): Promise<Segment> {
    await fs.rename(temp, this.file);
    if (sync) await syncDir(path.dirname(this.file));
    const old = this.segment;
    this.segment = new Segment(await fs.open(this.file, 'r+'));
    this.size = size;
    this.deadBytes = 0;
    old.retire();
    return old;
  }

  async close(): Promise<void> {
    this.segment.retire();
    await this.segment.closed();
  }
}
