import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { StorageError } from '../errors.js';
import { syncDir } from './durable-json-file.js';
import type { FaultHook } from './faults.js';
import {
  HEADER_LENGTH,
  isValidRecord,
  scanRecords,
  SUPERSEDED_AT,
  supersededField,
  type ScannedRecord,
} from './record.js';

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
  /** A compaction renamed a new file into place but could not fsync the directory (see `sync`). */
  renameUnsynced = false;

  private constructor(
    readonly file: string,
    public segment: Segment,
    private readonly faults: FaultHook | undefined,
  ) {}

  static async open(
    file: string,
    options: { create: boolean; sync: boolean; faults?: FaultHook | undefined },
  ): Promise<LogFile> {
    const { faults } = options;
    let handle: FileHandle;
    try {
      faults?.('open', file);
      handle = await fs.open(file, 'r+');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || !options.create) throw error;
      faults?.('mkdir', path.dirname(file));
      await fs.mkdir(path.dirname(file), { recursive: true });
      faults?.('open', file);
      handle = await fs.open(file, 'wx+');
      // The new entry, and directories `mkdir` may just have created (up to `projects/`).
      if (options.sync) {
        try {
          for (let dir = path.dirname(file), i = 0; i < 3; i++, dir = path.dirname(dir))
            await syncDir(dir, faults);
        } catch (error) {
          await handle.close().catch(() => undefined);
          throw error;
        }
      }
    }
    const log = new LogFile(file, new Segment(handle), faults);
    log.size = (await handle.stat()).size;
    return log;
  }

  /**
   * Appends whole records at the committed end; returns where they start. On failure the file may
   * hold part of them past `size`: the caller cuts it back (`truncate`).
   */
  async append(data: Buffer): Promise<number> {
    const at = this.size;
    let written = 0;
    while (written < data.length) {
      this.faults?.('write', this.file);
      const { bytesWritten } = await this.segment.handle.write(
        data,
        written,
        data.length - written,
        at + written,
      );
      written += bytesWritten;
    }
    this.size = at + data.length;
    return at;
  }

  /** Cuts the file back to `size` (a failed or uncommitted batch). */
  async truncate(size: number): Promise<void> {
    this.faults?.('truncate', this.file);
    await this.segment.handle.truncate(size);
    this.size = size;
  }

  /**
   * Makes what was written durable; after a compaction whose directory fsync failed, the rename
   * too, so that no record appended to the new file is acknowledged while a power loss could bring
   * the old file back.
   */
  async sync(): Promise<void> {
    this.faults?.('fsync', this.file);
    await this.segment.handle.datasync();
    if (this.renameUnsynced) {
      await syncDir(path.dirname(this.file), this.faults);
      this.renameUnsynced = false;
    }
  }

  /** Writes a record's superseded-at field in place (no fsync: recovery recomputes them). */
  async markSuperseded(segment: Segment, offset: number, by: number): Promise<void> {
    await segment.handle.write(supersededField(by), 0, 12, offset + SUPERSEDED_AT);
  }

  /**
   * The JSON of a record, read with its header in one read and checked against its CRC: a record
   * damaged on disk since it was written (which an index file lets the open skip) fails with
   * `ERR_STORAGE_CORRUPT` rather than answering wrong data.
   */
  async readJson(ref: FileRef): Promise<Buffer> {
    const length = HEADER_LENGTH + ref.jsonLength + 1;
    const buf = Buffer.allocUnsafe(length);
    this.faults?.('read', this.file);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await ref.segment.handle.read(buf, got, length - got, ref.offset + got);
      if (bytesRead === 0)
        throw new StorageError('ERR_STORAGE_CORRUPT', `Short read in ${this.file} at ${ref.offset}`);
      got += bytesRead;
    }
    if (!isValidRecord(buf, 0, length))
      throw new StorageError('ERR_STORAGE_CORRUPT', `${this.file} is damaged at byte ${ref.offset}`);
    return buf.subarray(HEADER_LENGTH, length - 1);
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

  /**
   * Replaces the file with `temp` (complete and synced), keeping the old segment for pinned
   * readers. Throws only while the file is still the old one (`temp` is then removed): once
   * renamed, the new file is in use, even when the directory fsync fails (`sync` retries it).
   */
  async replaceWith(temp: string, size: number, sync: boolean): Promise<Segment> {
    // Opened before the rename, so that nothing can fail between the rename and the switch.
    let handle: FileHandle | undefined;
    try {
      this.faults?.('open', temp);
      handle = await fs.open(temp, 'r+');
      this.faults?.('rename', this.file);
      await fs.rename(temp, this.file);
    } catch (error) {
      await handle?.close().catch(() => undefined);
      await fs.rm(temp, { force: true }).catch(() => undefined);
      throw error;
    }
    const old = this.segment;
    this.segment = new Segment(handle);
    this.size = size;
    this.deadBytes = 0;
    old.retire();
    if (sync) {
      try {
        await syncDir(path.dirname(this.file), this.faults);
      } catch {
        this.renameUnsynced = true;
      }
    }
    return old;
  }

  async close(): Promise<void> {
    this.segment.retire();
    await this.segment.closed();
  }
}
