import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { StorageLockedError } from '../errors.js';
import type { FaultHook } from './faults.js';
import { processAlive, processIdentity } from './live-process.js';

export interface DirLock {
  file: string;
  token: string;
}

/** True when the lock's owner still runs: same pid alive and, when known, the same process. */
function ownerAlive(content: string): boolean {
  const [pidText, , identity] = content.trim().split(' ');
  const pid = Number.parseInt(pidText ?? '', 10);
  if (!processAlive(pid)) return false;
  if (!identity) return true;
  const current = processIdentity(pid);
  return current === '' || current === identity;
}

/**
 * Takes `<dir>/lock`: a file holding `<pid> <token> <identity>`, put in place atomically with `link` so it
 * is never seen half-written. A lock whose process is gone (kill -9) is taken over at once.
 */
export function acquireLock(dir: string, faults?: FaultHook): DirLock {
  const file = path.join(dir, 'lock');
  const token = randomUUID();
  const temp = path.join(dir, `.lock-${token}`);
  try {
    faults?.('write', temp);
    fs.writeFileSync(temp, `${process.pid} ${token} ${processIdentity(process.pid)}\n`);
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        faults?.('link', file);
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
      if (ownerAlive(content)) {
        const pid = content.split(' ')[0] ?? '?';
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
    try {
      fs.rmSync(temp, { force: true });
    } catch {
      // Not created (a read-only directory): nothing to remove.
    }
  }
}

export function releaseLock(lock: DirLock): void {
  try {
    if (fs.readFileSync(lock.file, 'utf8').includes(lock.token)) fs.unlinkSync(lock.file);
  } catch {
    // Already gone.
  }
}
