import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { syncDir } from './durable-json-file.js';

/** `<seq 12 hex> <crc32 8 hex>\n` */
const COMMIT_RECORD = 22;

function encodeCommit(seq: number): Buffer {
  const body = seq.toString(16).padStart(12, '0');
  return Buffer.from(`${body} ${crc32(body).toString(16).padStart(8, '0')}\n`, 'latin1');
}

/**
 * `commit.log`: one fixed-width record per batch committed without a `directory.json` write (see
 * docs/storage.md, "Writes: group commit").
 */
export class CommitLog {
  private size = 0;

  private constructor(
    private readonly dir: string,
    private readonly sync: boolean,
    private handle: FileHandle,
  ) {}

  static async open(dir: string, sync: boolean): Promise<CommitLog> {
    return new CommitLog(dir, sync, await fs.open(path.join(dir, 'commit.log'), 'a+'));
  }

  /** The last committed batch in the file (a torn last record is ignored). */
  async lastCommitted(): Promise<number> {
    const content = await this.handle.readFile();
    let last = 0;
    for (let at = 0; at + COMMIT_RECORD <= content.length; at += COMMIT_RECORD) {
      const body = content.toString('latin1', at, at + 12);
      const crc = content.toString('latin1', at + 13, at + 21);
      if (content[at + 21] !== 0x0a || crc !== crc32(body).toString(16).padStart(8, '0')) break;
      last = Math.max(last, Number.parseInt(body, 16));
    }
    return last;
  }

  /** Rewrites the file as a single record, so it does not grow across restarts. */
  async reset(seq: number): Promise<void> {
    const file = path.join(this.dir, 'commit.log');
    const temp = `${file}.tmp`;
    await fs.writeFile(temp, encodeCommit(seq));
    if (this.sync) {
      const handle = await fs.open(temp, 'r+');
      await handle.sync();
      await handle.close();
    }
    await this.handle.close();
    await fs.rename(temp, file);
    if (this.sync) await syncDir(this.dir);
    this.handle = await fs.open(file, 'r+');
    this.size = COMMIT_RECORD;
  }

  /** Records batch `seq` as committed (durable once this resolves, with `sync`). */
  async append(seq: number): Promise<void> {
    const record = encodeCommit(seq);
    await this.handle.write(record, 0, record.length, this.size);
    this.size += record.length;
    if (this.sync) await this.handle.datasync();
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}
