import fs from 'node:fs/promises';
import path from 'node:path';
import type { Adapter } from 'lowdb';
import { StorageError } from '../errors.js';
import type { FaultHook } from './faults.js';

/**
 * A write renamed the new file into place, but the directory fsync failed: the new content is
 * what the file system shows, yet may not survive a power loss. The write's outcome is unknown
 * until `restore` puts the previous content back (or a later write succeeds).
 */
export class UnsyncedRenameError extends Error {
  constructor(cause: unknown) {
    super('The file was replaced but its directory could not be synced', { cause });
    this.name = 'UnsyncedRenameError';
  }
}

/**
 * A lowdb adapter like `JSONFile` that also makes each write durable: write a temp file, fsync
 * it, rename it over the target, fsync the directory. (lowdb's own `JSONFile` renames without
 * fsync, which survives kill -9 but not a power loss.) With `sync: false` it skips the fsyncs.
 */
export class DurableJsonFile<T> implements Adapter<T> {
  /** The content last read or written in full (undefined: no file), which `restore` puts back. */
  private committed: string | undefined;

  constructor(
    private readonly file: string,
    private readonly sync: boolean,
    private readonly faults?: FaultHook,
  ) {}

  async read(): Promise<T | null> {
    let text: string;
    try {
      text = await fs.readFile(this.file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      this.committed = undefined;
      return null;
    }
    let data: T;
    try {
      data = JSON.parse(text) as T;
    } catch (error) {
      // Nothing else holds what it held: refuse rather than open an empty store over it.
      throw new StorageError('ERR_STORAGE_CORRUPT', `${this.file} is not valid JSON (damaged)`, {
        cause: error,
      });
    }
    this.committed = text;
    return data;
  }

  /**
   * Replaces the file. A failure before the rename leaves the old file (and no temp file); one
   * after it throws `UnsyncedRenameError`.
   */
  async write(data: T): Promise<void> {
    const text = JSON.stringify(data);
    await this.replace(text);
    this.committed = text;
  }

  /** Puts back the content of the last complete read or write, durably (after `UnsyncedRenameError`). */
  async restore(): Promise<void> {
    if (this.committed !== undefined) {
      await this.replace(this.committed);
      return;
    }
    this.faults?.('rename', this.file);
    await fs.rm(this.file, { force: true });
    if (this.sync) await syncDir(path.dirname(this.file), this.faults);
  }

  private async replace(text: string): Promise<void> {
    const temp = `${this.file}.tmp`;
    try {
      this.faults?.('open', temp);
      const handle = await fs.open(temp, 'w');
      try {
        this.faults?.('write', temp);
        await handle.writeFile(text);
        if (this.sync) {
          this.faults?.('fsync', temp);
          await handle.sync();
        }
      } finally {
        await handle.close();
      }
      this.faults?.('rename', this.file);
      await fs.rename(temp, this.file);
    } catch (error) {
      // A partial temp file would only take space (a full disk's, perhaps).
      await fs.rm(temp, { force: true }).catch(() => undefined);
      throw error;
    }
    try {
      if (this.sync) await syncDir(path.dirname(this.file), this.faults);
    } catch (error) {
      throw new UnsyncedRenameError(error);
    }
  }
}

/** fsyncs a directory so a created, renamed or removed entry in it is durable. */
export async function syncDir(dir: string, faults?: FaultHook): Promise<void> {
  faults?.('fsync', dir);
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** True when `file` exists (false for ENOENT; other errors, a permission denied, are thrown). */
export async function pathExists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}
