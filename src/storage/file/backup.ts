/**
 * An online backup of a file store (docs/storage.md, "Backups"): a copy of the store as it was
 * between two batches, taken while it keeps serving, that opens as a store of its own.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { InvalidOptionError } from '../../errors.js';
import { CommitLog } from './commit-log.js';
import { pathExists, syncDir } from './durable-json-file.js';
import type { FaultHook } from './faults.js';
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
  /** Bytes copied (logs and `directory.json`). */
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
 * Writes the frozen store into `target`: into a temporary sibling directory first, every file and
 * directory synced, then renamed into place (a backup that fails half-way leaves no `target`).
 * `commit.log` holds the frozen seq; there is no `batch.log` (the logs hold every committed record),
 * no index files and no export snapshots. Unpins the logs whatever happens.
 */
export async function writeBackup(
  frozen: FrozenStore,
  target: string,
  faults?: FaultHook,
): Promise<FileStoreBackup> {
  const temp = path.join(path.dirname(target), `.${path.basename(target)}.tmp-${randomUUID()}`);
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
