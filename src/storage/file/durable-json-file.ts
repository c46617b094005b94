import fs from 'node:fs/promises';
import path from 'node:path';
import type { Adapter } from 'lowdb';

/**
 * A lowdb adapter like `JSONFile` that also makes each write durable: write a temp file, fsync
 * it, rename it over the target, fsync the directory. (lowdb's own `JSONFile` renames without
 * fsync, which survives kill -9 but not a power loss.) With `sync: false` it skips the fsyncs.
 */
export class DurableJsonFile<T> implements Adapter<T> {
  constructor(
    private readonly file: string,
    private readonly sync: boolean,
  ) {}

  async read(): Promise<T | null> {
    try {
      return JSON.parse(await fs.readFile(this.file, 'utf8')) as T;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }

  async write(data: T): Promise<void> {
    const temp = `${this.file}.tmp`;
    const handle = await fs.open(temp, 'w');
    try {
      await handle.writeFile(JSON.stringify(data));
      if (this.sync) await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temp, this.file);
    if (this.sync) await syncDir(path.dirname(this.file));
  }
}

/** fsyncs a directory so a created, renamed or removed entry in it is durable. */
export async function syncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
