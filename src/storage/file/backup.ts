/**
 * An online backup of a file store (docs/file-store.md, "Backups"): a copy of the store as it was
 * between two batches, taken while it keeps serving, that opens as a store of its own.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, type Dirent } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { InvalidOptionError } from '../../errors.js';
import { CommitLog } from './commit-log.js';
import { pathExists, syncDir } from './durable-json-file.js';
import type { FaultHook } from './faults.js';
import { processAlive } from './live-process.js';
import type { LogFile, Segment } from './log-file.js';
import type { StoreFiles } from './store-files.js';

/** What `backup` wrote. */
export interface FileStoreBackup {
  /** The backup's directory (absolute). */
  dir: string;
  /** When the store was frozen for it (ISO 8601): the backup holds every write committed before. */
  takenAt: string;
  /** Logs copied. */
  logs: number;
  /** Bytes copied (logs, `directory.json` and `grants.json`). */
  bytes: number;
}

/** One log as it was between two batches. */
interface FrozenLog {
  /** Path relative to the store directory. */
  rel: string;
  segment: Segment;
  /** Its committed end then. */
  size: number;
}

/** The store between two batches: what a backup copies. */
export interface FrozenStore {
  logs: FrozenLog[];
  directory: Buffer;
  /** `grants.json` as it was (SMART refresh tokens and revoked token ids); none: not written. */
  grants?: Buffer;
  seq: number;
  takenAt: string;
}

/**
 * Checks a backup's target and answers it absolute (resolved against the working directory):
 * outside the store, not there yet (a backup never writes over anything), its parent existing.
 */
export async function checkBackupTarget(storeDir: string, target: unknown): Promise<string> {
  if (typeof target !== 'string' || target.length === 0) {
    throw new InvalidOptionError('backup: the target must be a directory path', 'dir');
  }
  const dir = path.resolve(target);
  const inside = path.relative(storeDir, dir);
  const outside = inside === '..' || inside.startsWith(`..${path.sep}`) || path.isAbsolute(inside);
  if (!outside) {
    throw new InvalidOptionError('backup: the target must be outside the store directory', 'dir');
  }
  if (await pathExists(dir)) {
    throw new InvalidOptionError(`backup: ${dir} already exists (a backup writes a new directory)`, 'dir');
  }
  if (!(await pathExists(path.dirname(dir)))) {
    throw new InvalidOptionError(`backup: the parent directory of ${dir} does not exist`, 'dir');
  }
  return dir;
}

/**
 * A backup's temporary directory, next to its target: `.<target name>.tmp-<pid>-<uuid>`, the pid
 * of the process writing it.
 */
const TEMP_NAME = /^\..+\.tmp-(\d+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The temporary directories backups of this process are writing (of every store). */
const writing = new Set<string>();

/**
 * Removes the temporary directories that backups killed mid-copy left in `parent` (a backup that
 * fails otherwise removes its own): those named for a process that no longer runs, or for this
 * process when no backup of it writes there (an earlier process had the pid, as a restarted
 * container does). Another live process's are kept: it may be writing them. Best effort: one
 * that cannot be removed is left for the next time. Answers the paths removed.
 */
export async function removeStaleBackupTemps(parent: string): Promise<string[]> {
  let entries: Dirent[];
  try {
    entries = await fs.readdir(parent, { withFileTypes: true });
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const entry of entries) {
    const pid = entry.isDirectory() ? TEMP_NAME.exec(entry.name)?.[1] : undefined;
    if (pid === undefined) continue;
    const temp = path.join(parent, entry.name);
    const live = Number(pid) === process.pid ? writing.has(temp) : processAlive(Number(pid));
    if (live) continue;
    try {
      await fs.rm(temp, { recursive: true, force: true });
      removed.push(temp);
    } catch {
      // Left for the next backup.
    }
  }
  return removed;
}

/**
 * Runs in the writer between batches (synchronously: no batch may commit meanwhile), so every
 * log's size is its committed end and `seq` the last committed batch: pins each log's open file
 * (compaction and project deletion then leave it open until the copy is done) and reads
 * `directory.json`. Appends past those sizes belong to later
 * batches and are left out; superseded-at marks written in place meanwhile may reach the copy,
 * and opening the backup recomputes them all (it has no index files).
 */
export function freezeStore(files: StoreFiles, seq: number, takenAt: string): FrozenStore {
  const logs: LogFile[] = [...files.meta.keys()];
  if (files.onceLog) logs.push(files.onceLog);
  const frozen = logs.map((log) => {
    log.segment.pin();
    return { rel: path.relative(files.dir, log.file), segment: log.segment, size: log.size };
  });
  try {
    const directory = readFileSync(path.join(files.dir, 'directory.json'));
    return { logs: frozen, directory, seq, takenAt };
  } catch (error) {
    for (const log of frozen) log.segment.unpin();
    throw error;
  }
}

/**
 * Writes the frozen store into `target`: into a temporary sibling directory first (see
 * `TEMP_NAME`), every file and directory synced, then renamed into place (a backup that fails
 * half-way leaves no `target`, and removes its temporary directory unless killed).
 * `commit.log` holds the frozen seq; there is no `batch.log` (the logs hold every committed record),
 * no index files and no export snapshots. Nor saved search postings: a store that is open has
 * none (they are written by a clean close and consumed on open, with the index files they need),
 * so the backup opens with none and each parameter is built again by the first search on it.
 * `grants.json` is the grants as they were at the freeze. Unpins the logs whatever happens.
 */
export async function writeBackup(
  frozen: FrozenStore,
  target: string,
  faults?: FaultHook,
): Promise<FileStoreBackup> {
  const temp = path.join(
    path.dirname(target),
    `.${path.basename(target)}.tmp-${process.pid}-${randomUUID()}`,
  );
  writing.add(temp);
  let bytes = frozen.directory.length;
  try {
    faults?.('mkdir', temp);
    await fs.mkdir(path.join(temp, 'projects'), { recursive: true });
    const dirs = new Set<string>([temp, path.join(temp, 'projects')]);
    const buffer = Buffer.allocUnsafe(1024 * 1024);
    for (const log of frozen.logs) {
      const file = path.join(temp, log.rel);
      for (let dir = path.dirname(file); !dirs.has(dir); dir = path.dirname(dir)) dirs.add(dir);
      await fs.mkdir(path.dirname(file), { recursive: true });
      await copyPrefix(log.segment, log.size, file, buffer, faults);
      bytes += log.size;
    }
    await writeSynced(path.join(temp, 'directory.json'), frozen.directory, faults);
    if (frozen.grants) {
      await writeSynced(path.join(temp, 'grants.json'), frozen.grants, faults);
      bytes += frozen.grants.length;
    }
    const commitLog = await CommitLog.open(temp, true, faults);
    try {
      await commitLog.reset(frozen.seq);
    } finally {
      await commitLog.close();
    }
    // Deepest first, so each directory's own entry in its parent is synced after its contents.
    for (const dir of [...dirs].sort((a, b) => b.length - a.length)) await syncDir(dir, faults);
    faults?.('rename', target);
    await fs.rename(temp, target);
    await syncDir(path.dirname(target), faults);
  } catch (error) {
    await fs.rm(temp, { recursive: true, force: true }).catch(() => undefined);
    throw error;
  } finally {
    writing.delete(temp);
    for (const log of frozen.logs) log.segment.unpin();
  }
  return { dir: target, takenAt: frozen.takenAt, logs: frozen.logs.length, bytes };
}

/** Copies the first `size` bytes of an open log into a new file, synced. */
async function copyPrefix(
  segment: Segment,
  size: number,
  file: string,
  buffer: Buffer,
  faults: FaultHook | undefined,
): Promise<void> {
  faults?.('open', file);
  const out = await fs.open(file, 'wx');
  try {
    for (let at = 0; at < size;) {
      const want = Math.min(buffer.length, size - at);
      const { bytesRead } = await segment.handle.read(buffer, 0, want, at);
      if (bytesRead === 0) throw new Error(`${file}: the log ended at ${at} of ${size} bytes`);
      faults?.('write', file);
      await out.write(buffer, 0, bytesRead);
      at += bytesRead;
    }
    faults?.('fsync', file);
    await out.sync();
  } finally {
    await out.close();
  }
}

async function writeSynced(file: string, data: Buffer, faults: FaultHook | undefined): Promise<void> {
  faults?.('open', file);
  const out = await fs.open(file, 'wx');
  try {
    faults?.('write', file);
    await out.writeFile(data);
    faults?.('fsync', file);
    await out.sync();
  } finally {
    await out.close();
  }
}
