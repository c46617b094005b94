/**
 * Whether a process recorded in a file still runs (the store's lock, a backup's temporary
 * directory): a pid left by a killed process must not be mistaken for a live one.
 */
import fs from 'node:fs';

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

/**
 * True while `pid` runs (another user's process counts: `EPERM`); a zombie counts as gone.
 */
export function processAlive(pid: number): boolean {
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
export function processIdentity(pid: number): string {
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
