import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { StorageLockedError } from '../errors.js';

export interface DirLock {
  file: string;
  token: string;
}

function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes `<dir>/lock`: a file holding `<pid> <token>`, put in place atomically with `link` so it
 * is never seen half-written. A lock whose process is gone (kill -9) is taken over at once.
 */
export function acquireLock(dir: string): DirLock {
  const file = path.join(dir, 'lock');
  const token = randomUUID();
  const temp = path.join(dir, `.lock-${token}`);
  fs.writeFileSync(temp, `${process.pid} ${token}\n`);
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        fs.linkSync(temp, file);
        return { file, token };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      let content = '';
      try {
        content = fs.readFileSync(file, 'utf8');
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw error;
      }
      const pid = Number.parseInt(content.split(' ')[0] ?? '', 10);
      if (processAlive(pid)) {
        throw new StorageLockedError(`The storage directory ${dir} is in use by process ${pid}`);
      }
      try {
        // Stale: its process is gone. Remove it only if it is still the same lock.
        if (fs.readFileSync(file, 'utf8') === content) fs.unlinkSync(file);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
    throw new StorageLockedError(`Could not lock the storage directory ${dir}`);
  } finally {
    fs.rmSync(temp, { force: true });
  }
}

export function releaseLock(lock: DirLock): void {
  try {
    if (fs.readFileSync(lock.file, 'utf8').includes(lock.token)) fs.unlinkSync(lock.file);
  } catch {
    // Already gone.
  }
}
