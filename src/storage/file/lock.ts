import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { StorageLockedError } from '../errors.js';
import type { FaultHook } from './faults.js';

export interface DirLock {
  file: string;
  token: string;
}

/**
 * The Linux scheduler state of a process (`/proc/<pid>/stat` field 3: `R`, `S`, `Z`, ...), or
 * undefined where `/proc` does not tell.
 */
function processState(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A killed process that its parent has not reaped yet (a zombie, `Z`, or dying, `X`) still
  // answers signal 0 for a while after kill -9; it holds no file open and writes nothing more.
  const state = processState(pid);
  return state !== 'Z' && state !== 'X';
}

/**
 * Who a pid is, beyond the number: boot id plus the process start time (Linux `/proc`), so a
 * lock left by a killed process is not mistaken for a live one when its pid was reused (a
 * restarted container often gets the same small pid). Empty where `/proc` is unavailable.
 */
function processIdentity(pid: number): string {
  try {
    const bootId = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces); start time is field 22.
    const startTime = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return startTime ? `${bootId}/${startTime}` : '';
  } catch {
    return '';
  }
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
