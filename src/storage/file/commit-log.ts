import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { syncDir } from './durable-json-file.js';
import type { FaultHook } from './faults.js';

/** `<seq 12 hex> <crc32 8 hex>\n` */
const COMMIT_RECORD = 22;

function encodeCommit(seq: number): Buffer {
  const body = seq.toString(16).padStart(12, '0');
  return Buffer.from(`${body} ${crc32(body).toString(16).padStart(8, '0')}\n`, 'latin1');
}

/**
 * `commit.log`: one fixed-width record per batch committed without a `directory.json` write (see
 * docs/file-store.md, "Writes: group commit").
 */
export class CommitLog {
  private size = 0;

  private constructor(
    private readonly dir: string,
    private readonly sync: boolean,
    private handle: FileHandle,
    private readonly faults: FaultHook | undefined,
  ) {}

  static async open(dir: string, sync: boolean, faults?: FaultHook): Promise<CommitLog> {
    const file = path.join(dir, 'commit.log');
    faults?.('open', file);
    return new CommitLog(dir, sync, await fs.open(file, 'a+'), faults);
  }

  /** Bytes of complete records (where the next one goes). */
  get end(): number {
    return this.size;
  }

  /**
   * The last committed batch in the file. A torn last record is ignored; so is a damaged record
   * before intact ones (records are fixed-width, so those after it still count: stopping there
   * would cut the records of the batches they committed).
   */
  async lastCommitted(): Promise<number> {
    const content = await this.handle.readFile();
    let last = 0;
    for (let at = 0; at + COMMIT_RECORD <= content.length; at += COMMIT_RECORD) {
      const body = content.toString('latin1', at, at + 12);
      const crc = content.toString('latin1', at + 13, at + 21);
      if (content[at + 21] !== 0x0a || crc !== crc32(body).toString(16).padStart(8, '0')) continue;
      last = Math.max(last, Number.parseInt(body, 16));
    }
    return last;
  }

  /** Rewrites the file as a single record, so it does not grow across restarts. */
  async reset(seq: number): Promise<void> {
    const file = path.join(this.dir, 'commit.log');
    const temp = `${file}.tmp`;
    this.faults?.('write', temp);
    await fs.writeFile(temp, encodeCommit(seq));
    if (this.sync) {
      const handle = await fs.open(temp, 'r+');
      await handle.sync();
      await handle.close();
    }
    await this.handle.close();
    this.faults?.('rename', file);
    await fs.rename(temp, file);
    if (this.sync) await syncDir(this.dir, this.faults);
    this.handle = await fs.open(file, 'r+');
    this.size = COMMIT_RECORD;
  }

  /**
   * Records batch `seq` as committed (durable once this resolves, with `sync`). On failure the
   * record may be in the file past `end`: the caller cuts it (`truncate`) before anything else.
   */
  async append(seq: number): Promise<void> {
    const record = encodeCommit(seq);
    this.faults?.('write', path.join(this.dir, 'commit.log'));
    await this.handle.write(record, 0, record.length, this.size);
    if (this.sync) {
      this.faults?.('fsync', path.join(this.dir, 'commit.log'));
      await this.handle.datasync();
    }
    this.size += record.length;
  }

  /** Cuts the file back to `size` bytes (a failed `append`), durably with `sync`. */
  async truncate(size: number): Promise<void> {
    this.faults?.('truncate', path.join(this.dir, 'commit.log'));
    await this.handle.truncate(size);
    if (this.sync) await this.handle.datasync();
    this.size = size;
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}
