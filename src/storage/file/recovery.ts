import fsSync from 'node:fs';
import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { getOrCreate } from '../engine/map-entry.js';
import type { BaseState } from '../engine/state.js';
import { identifierKeys } from '../identifier-keys.js';
import type { PatientCompartment, StoredResource } from '../types.js';
import { StorageError } from '../errors.js';
import { writeAll, type BatchEntry } from './batch-log.js';
import { directoryMutations } from './directory.js';
import { syncDir } from './durable-json-file.js';
import { readIndex } from './log-index.js';
import { readPostingsFile, type SavedPostings } from './postings-file.js';
import { LogFile, type FileRef } from './log-file.js';
import {
  HEADER_LENGTH,
  isValidRecord,
  OP_DELETE,
  readLastUpdated,
  readOp,
  readSeq,
  readSuperseded,
  type ScannedRecord,
} from './record.js';
import { decodeOneTimeValue, RECORD_LOG_NAMES, recordLogMutation } from './record-logs.js';
import type { StoreFiles } from './store-files.js';

const LOG_NAME = /^([A-Z][A-Za-z0-9]{0,63})\.log$/;

/** Where a scan of a resource log starts when an index file describes the beginning. */
interface Resume {
  from: number;
  records: number;
  deadBytes: number;
  /** Key -> position of its latest record, as the index knows it. */
  latest: Map<string, { offset: number; length: number }>;
}

/** What opening a store works with. */
export interface Recovery {
  files: StoreFiles;
  /** The engine state to load into. */
  base: BaseState;
  /** The last committed batch: records of later batches are an uncommitted tail. */
  committed: number;
  compartment: PatientCompartment;
  /** `indexFingerprint(compartment)`: index files written with another are not used. */
  fingerprint: string;
  /** Where the search postings saved with the index files used are put (`postings-file.ts`). */
  postings?: SavedPostings[];
}

/**
 * Loads the committed state of the store into `base` (the directory, every project's logs, the
 * one-time values), repairing what a crash left: see docs/file-store.md, "Recovery on open".
 * Returns the latest `lastUpdated` (µs) found, for the clock.
 */
export async function recoverStore(recovery: Recovery): Promise<number> {
  const { files, base } = recovery;
  for (const m of directoryMutations(files.directory.data)) base.apply(m);
  let maxLastUpdated = 0;
  for (const [projectId, dirName] of Object.entries(files.directory.data.projectDirs)) {
    maxLastUpdated = Math.max(maxLastUpdated, await loadProject(recovery, projectId, dirName));
  }
  await loadOnce(recovery);
  return maxLastUpdated;
}

/**
 * Writes every intact `batch.log` entry into the logs it names again, in order, and syncs them: a
 * crash may have kept an entry (a batch's commit) without all that the batch appended to its logs.
 * Logs of projects no longer in the directory (deleted since) are skipped. Superseded-at marks the
 * entries carry are stale; the scans that follow recompute them.
 */
export async function replayBatchLog(files: StoreFiles, entries: readonly BatchEntry[]): Promise<void> {
  if (entries.length === 0) return;
  const live = new Set(Object.values(files.directory.data.projectDirs));
  const handles = new Map<string, FileHandle>();
  try {
    for (const { parts } of entries) {
      for (const { file, offset, data } of parts) {
        const [top, dirName] = file.split(path.sep);
        if (path.isAbsolute(file) || top === '..' || (top === 'projects' && !live.has(dirName!))) continue;
        const full = path.join(files.dir, file);
        let handle = handles.get(full);
        if (!handle) {
          files.faults?.('open', full);
          await fs.mkdir(path.dirname(full), { recursive: true });
          handle = await fs.open(full, fsSync.constants.O_RDWR | fsSync.constants.O_CREAT);
          handles.set(full, handle);
        }
        files.faults?.('write', full);
        await writeAll(handle, [data], offset);
      }
    }
    for (const [full, handle] of handles) {
      files.faults?.('fsync', full);
      await handle.datasync();
    }
  } finally {
    for (const handle of handles.values()) await handle.close().catch(() => undefined);
  }
}

/**
 * Scans a log, truncating it at the first torn, corrupt or uncommitted record, and fixing any
 * wrong superseded-at mark. `onRecord` returns the record's key (resource or user id).
 *
 * Only a tail can be torn or uncommitted (one writer appends, and a batch commits only once its
 * records are synced). So when an intact record of a committed batch follows the first bad one,
 * the damage is in the middle of committed data, and cutting there would drop acknowledged writes:
 * the open is refused with `ERR_STORAGE_CORRUPT` naming the file and offset instead.
 */
async function recoverLog(
  log: LogFile,
  committed: number,
  sync: boolean,
  onRecord: (record: ScannedRecord, json: string) => string | undefined,
  resume?: Resume,
): Promise<void> {
  // Versions already known from an index file: their on-disk mark is unknown (-1), so it is
  // rewritten when a tail record supersedes them.
  const latest = new Map<string, { offset: number; onDisk: number; length: number }>();
  for (const [key, { offset, length }] of resume?.latest ?? [])
    latest.set(key, { offset, onDisk: -1, length });
  const fixes: { offset: number; by: number }[] = [];
  const from = resume?.from ?? 0;
  let validEnd = from;
  let count = resume?.records ?? 0;
  let dead = resume?.deadBytes ?? 0;
  await log.scan(from, log.size, (record) => {
    const { buf, start, end, offset } = record;
    if (!isValidRecord(buf, start, end) || readSeq(buf, start) > committed) return false;
    let key: string | undefined;
    try {
      key = onRecord(record, buf.toString('utf8', start + HEADER_LENGTH, end - 1));
    } catch {
      return false;
    }
    validEnd = offset + (end - start);
    count += 1;
    if (key !== undefined) {
      const previous = latest.get(key);
      if (previous) {
        if (previous.onDisk !== offset) fixes.push({ offset: previous.offset, by: offset });
        dead += previous.length;
      }
      latest.set(key, { offset, onDisk: readSuperseded(buf, start), length: end - start });
    }
    return true;
  });
  for (const { offset, onDisk } of latest.values()) if (onDisk > 0) fixes.push({ offset, by: 0 });
  if (validEnd < log.size) {
    await refuseCommittedAfter(log, validEnd, committed);
    await log.truncate(validEnd);
    if (sync) await log.sync();
  }
  for (const { offset, by } of fixes) await log.markSuperseded(log.segment, offset, by);
  log.records = count;
  log.deadBytes = dead;
}

/** Throws when a record of a committed batch lies after the bad record at `damagedAt`. */
async function refuseCommittedAfter(log: LogFile, damagedAt: number, committed: number): Promise<void> {
  let found = false;
  await log.scan(damagedAt, log.size, ({ buf, start, end }) => {
    found = isValidRecord(buf, start, end) && readSeq(buf, start) <= committed;
    return !found;
  });
  if (found) {
    throw new StorageError(
      'ERR_STORAGE_CORRUPT',
      `${log.file} is damaged at byte ${damagedAt}, before records of committed writes: opening would ` +
        `lose them. Restore it from a backup, or cut it there (truncate -s ${damagedAt}) to open without them.`,
    );
  }
}

/** Loads one project's record logs and resource logs; returns its latest `lastUpdated` (µs). */
async function loadProject(recovery: Recovery, projectId: string, dirName: string): Promise<number> {
  const { files, base, committed } = recovery;
  for (const name of RECORD_LOG_NAMES) {
    const file = files.projectPath(dirName, `${name}.log`);
    await fs.rm(`${file}.compact`, { force: true });
    if (!fsSync.existsSync(file)) continue;
    const log = await files.openLog(file, { dirName, projectId, recordLog: name }, false);
    getOrCreate(files.recordLogs, dirName, () => new Map()).set(name, log);
    await recoverLog(log, committed, files.sync, (record, json) => {
      const value = JSON.parse(json) as { id: string };
      const deleted = readOp(record.buf, record.start) === OP_DELETE;
      base.apply(recordLogMutation(name, projectId, value, deleted));
      return value.id;
    });
  }
  const resourcesDir = files.projectPath(dirName, 'resources');
  let names: string[] = [];
  try {
    names = await fs.readdir(resourcesDir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  let maxLastUpdated = 0;
  for (const name of names) {
    if (name.endsWith('.compact')) {
      // A compaction interrupted before its rename: the log itself is intact.
      await fs.rm(path.join(resourcesDir, name), { force: true });
      continue;
    }
    const match = LOG_NAME.exec(name);
    if (!match) continue;
    const resourceType = match[1]!;
    const log = await files.openLog(
      path.join(resourcesDir, name),
      { dirName, projectId, resourceType },
      false,
    );
    getOrCreate(files.resourceLogs, dirName, () => new Map()).set(resourceType, log);
    const logMax = await loadResourceLog(recovery, log, projectId, resourceType);
    maxLastUpdated = Math.max(maxLastUpdated, logMax);
  }
  const consumed = (name: string): boolean => name.endsWith('.idx') || name.endsWith('.postings');
  if (names.some(consumed)) {
    // Consumed: an index (and the postings saved with it) only ever describes the state between
    // a clean close and the next open, so it can never outlive a compaction (whose new file might
    // even reuse the inode number).
    for (const name of await fs.readdir(resourcesDir)) {
      if (consumed(name)) await fs.rm(path.join(resourcesDir, name), { force: true });
    }
    // Even with durability 'write': an index coming back after a power loss would be wrong.
    await syncDir(resourcesDir);
  }
  return maxLastUpdated;
}

/**
 * Loads a resource log into the index: from its index file when there is a usable one, then the
 * records after it. Returns the latest `lastUpdated` (µs).
 */
async function loadResourceLog(
  recovery: Recovery,
  log: LogFile,
  projectId: string,
  resourceType: string,
): Promise<number> {
  const { base, compartment } = recovery;
  let maxLastUpdated = 0;
  const index = await readIndex(log, recovery.fingerprint);
  let resume: Resume | undefined;
  if (index) {
    resume = { from: index.size, records: index.records, deadBytes: index.deadBytes, latest: new Map() };
    for (const [
      id,
      versionId,
      lastUpdatedMicros,
      deleted,
      offset,
      jsonLength,
      patients,
      identifiers,
    ] of index.entries) {
      maxLastUpdated = Math.max(maxLastUpdated, lastUpdatedMicros);
      const ref: FileRef = { log, segment: log.segment, offset, jsonLength };
      base.putEntry(projectId, {
        resourceType,
        id,
        versionId,
        lastUpdatedMicros,
        deleted: deleted === 1,
        patients,
        identifiers,
        ref,
      });
      resume.latest.set(id, { offset, length: HEADER_LENGTH + jsonLength + 1 });
    }
  }
  await recoverLog(
    log,
    recovery.committed,
    recovery.files.sync,
    (record, json) => {
      const { buf, start, end, offset } = record;
      const body = JSON.parse(json) as StoredResource;
      const deleted = readOp(buf, start) === OP_DELETE;
      const lastUpdatedMicros = readLastUpdated(buf, start);
      maxLastUpdated = Math.max(maxLastUpdated, lastUpdatedMicros);
      const ref: FileRef = { log, segment: log.segment, offset, jsonLength: end - start - HEADER_LENGTH - 1 };
      base.putEntry(projectId, {
        resourceType,
        id: body.id,
        versionId: body.meta.versionId,
        lastUpdatedMicros,
        deleted,
        patients: deleted ? [] : compartment.patientIds(body),
        identifiers: deleted ? [] : identifierKeys(body),
        ref,
      });
      return body.id;
    },
    resume,
  );
  if (index && recovery.postings) {
    const file = await readPostingsFile(log, index);
    if (file) recovery.postings.push({ projectId, resourceType, file });
  }
  return maxLastUpdated;
}

async function loadOnce({ files, base, committed }: Recovery): Promise<void> {
  const file = path.join(files.dir, 'once.log');
  await fs.rm(`${file}.compact`, { force: true });
  files.onceLog = await LogFile.open(file, { create: true, sync: files.sync, faults: files.faults });
  const now = Date.now();
  await recoverLog(files.onceLog, committed, files.sync, (_record, json) => {
    const { key, expiresAt } = decodeOneTimeValue(json);
    if (expiresAt > now) base.apply({ kind: 'one-time-value-put', key, expiresAt });
    return key;
  });
}

/** Removes project directories no project refers to (deleted projects, uncommitted creations). */
export async function removeOrphanProjectDirs(files: StoreFiles): Promise<void> {
  const used = new Set(Object.values(files.directory.data.projectDirs));
  for (const name of await fs.readdir(path.join(files.dir, 'projects'))) {
    if (!used.has(name))
      await fs.rm(path.join(files.dir, 'projects', name), { recursive: true, force: true });
  }
}

/**
 * Removes snapshot directories no export job refers to: taken by a kick-off that crashed
 * before saving its job, or left by a job deleted without `releaseSnapshot`.
 */
export async function removeUnusedSnapshots(files: StoreFiles, base: BaseState): Promise<void> {
  const used = new Set<string>();
  for (const job of base.jobs()) {
    const dir = job.snapshot?.dir;
    if (typeof dir === 'string') used.add(dir);
  }
  let names: string[] = [];
  try {
    names = await fs.readdir(path.join(files.dir, 'snapshots'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  for (const name of names) {
    if (!used.has(`snapshots/${name}`)) {
      await fs.rm(path.join(files.dir, 'snapshots', name), { recursive: true, force: true });
    }
  }
}
