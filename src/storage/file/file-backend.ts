import { createHash, randomUUID } from 'node:crypto';
import fsSync from 'node:fs';
import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { Low } from 'lowdb';
import { compartmentParams, patientCompartmentIds, patientCompartmentTypes } from '../../fhir/compartment.js';
import { assertNever } from '../assert-never.js';
import type { Clock } from '../engine/clock.js';
import type { EngineBackend } from '../engine/engine.js';
import { getOrCreate } from '../engine/map-entry.js';
import { pairKey, type Mutation, type ResourceEntry } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import { StorageError } from '../errors.js';
import { IDENTIFIER_KEYS_VERSION, identifierKeys } from '../identifier-keys.js';
import type {
  ClientRecord,
  ExportJobRecord,
  ExportSnapshotOptions,
  MembershipRecord,
  ProjectRecord,
  SigningKeyRecord,
  StoredResource,
  UserRecord,
} from '../types.js';
import { DurableJsonFile, syncDir } from './durable-json-file.js';
import { acquireLock, releaseLock, type DirLock } from './lock.js';
import { LogFile, type FileRef, type Segment } from './log-file.js';
import {
  encodeRecord,
  HEADER_LENGTH,
  isValidRecord,
  readLastUpdated,
  readOp,
  readSeq,
  readSuperseded,
  OP_DELETE,
  type ScannedRecord,
} from './record.js';
import type { FileSnapshot } from './snapshot.js';

/**
 * The directory data kept in `directory.json` (lowdb): only small, rarely written records. Records
 * written often, or many per project (users, memberships, export jobs), go to per-project logs.
 */
interface DirectoryData {
  /** Sequence number of the last batch that wrote this file. */
  seq: number;
  projects: Record<string, ProjectRecord>;
  /** project id -> its directory name under `projects/` (a fresh name per incarnation). */
  projectDirs: Record<string, string>;
  clients: Record<string, ClientRecord>;
  keys: Record<string, SigningKeyRecord>;
  /** Stores written before memberships had their own log: moved to the logs on open. */
  memberships?: Record<string, Record<string, MembershipRecord>>;
  /** Stores written before export jobs had their own log: moved to the logs on open. */
  jobs?: Record<string, Record<string, ExportJobRecord>>;
}

function emptyDirectory(): DirectoryData {
  return { seq: 0, projects: {}, projectDirs: {}, clients: {}, keys: {} };
}

/** The per-project logs of directory records (`<kind>.log` in the project's directory). */
type RecordKind = 'users' | 'memberships' | 'jobs';
const RECORD_KINDS: readonly RecordKind[] = ['users', 'memberships', 'jobs'];

export interface FileBackendOptions {
  dir: string;
  sync: boolean;
  compactionMinDeadBytes: number;
}

const COMMIT_RECORD = 22;
const LOG_NAME = /^([A-Z][A-Za-z0-9]{0,63})\.log$/;

function encodeCommit(seq: number): Buffer {
  const body = seq.toString(16).padStart(12, '0');
  return Buffer.from(`${body} ${crc32(body).toString(16).padStart(8, '0')}\n`, 'latin1');
}

/**
 * Identifies the compartment definition and the identifier keys in use: index files store
 * compartment patients and identifier keys, so one written by a version that computes either
 * differently must not be used.
 */
function indexFingerprint(): string {
  const definition = patientCompartmentTypes().map((type) => [type, compartmentParams(type)]);
  return createHash('sha256')
    .update(JSON.stringify(definition))
    .update(patientCompartmentIds.toString())
    .update(`identifier keys ${IDENTIFIER_KEYS_VERSION}`)
    .digest('hex')
    .slice(0, 16);
}

/** What `<Type>.log.idx` holds (see `readIndex`). */
interface LogIndex {
  /** 2 since entries hold identifier keys (a format 1 index is ignored: the log is scanned). */
  format: 2;
  /** `indexFingerprint()` of the writer. */
  compartment: string;
  /** Inode of the log file it describes. */
  ino: string;
  /** Log size it covers. */
  size: number;
  records: number;
  deadBytes: number;
  /** [id, versionId, lastUpdated µs, deleted 0/1, offset, jsonLength, compartment patients, identifier keys] */
  entries: [string, string, number, 0 | 1, number, number, string[], string[]][];
}

interface LogMeta {
  dirName: string;
  projectId: string;
  /** Set for resource logs. */
  resourceType?: string;
  /** Set for record logs. */
  kind?: RecordKind;
  /** Record logs: the record count at which to check whether a rewrite is due. */
  checkAt?: number;
}

interface Pending {
  log: LogFile;
  parts: Buffer[];
  bytes: number;
}

/**
 * The file store's persistence under the engine: see docs/storage.md ("The file store") for the
 * layout, the commit protocol and recovery.
 */
export class FileBackend implements EngineBackend {
  private db!: Low<DirectoryData>;
  private lock: DirLock | undefined;
  private commitLog!: FileHandle;
  private commitSize = 0;
  private seq = 0;
  private onceLog!: LogFile;
  /** dirName -> resource type -> log. */
  private readonly resourceLogs = new Map<string, Map<string, LogFile>>();
  /** dirName -> kind -> record log (users, memberships, export jobs). */
  private readonly recordLogs = new Map<string, Map<RecordKind, LogFile>>();
  /** Set for one batch: write directory.json even when no mutation changed it (migration). */
  private forceDirectoryWrite = false;
  private readonly meta = new Map<LogFile, LogMeta>();
  private readonly touched = new Set<LogFile>();
  private broken: Error | undefined;
  /** The engine's committed state (for the index files written on close). */
  private base: BaseState | undefined;
  private opened = false;
  private readonly fingerprint = indexFingerprint();

  constructor(private readonly options: FileBackendOptions) {}

  get dir(): string {
    return this.options.dir;
  }

  // Opening and recovery

  async open(base: BaseState, clock: Clock): Promise<void> {
    const { dir } = this.options;
    this.base = base;
    await fs.mkdir(path.join(dir, 'projects'), { recursive: true });
    this.lock = acquireLock(dir);
    try {
      this.db = new Low(
        new DurableJsonFile<DirectoryData>(path.join(dir, 'directory.json'), this.options.sync),
        emptyDirectory(),
      );
      await this.db.read();
      this.db.data = { ...emptyDirectory(), ...this.db.data };
      this.commitLog = await fs.open(path.join(dir, 'commit.log'), 'a+');
      const committed = Math.max(this.db.data.seq, await this.lastCommitted());
      this.seq = committed;
      this.loadDirectory(base);
      let maxLastUpdated = 0;
      for (const [projectId, dirName] of Object.entries(this.db.data.projectDirs)) {
        maxLastUpdated = Math.max(
          maxLastUpdated,
          await this.loadProject(base, projectId, dirName, committed),
        );
      }
      await this.loadOnce(base, committed);
      clock.advanceTo(maxLastUpdated);
      await this.migrateDirectory(base);
      await this.removeOrphans();
      await this.removeUnusedSnapshots(base);
      await this.resetCommitLog(this.seq);
      this.opened = true;
    } catch (error) {
      await this.close().catch(() => undefined);
      throw error;
    }
  }

  private loadDirectory(base: BaseState): void {
    const data = this.db.data;
    for (const record of Object.values(data.projects)) base.apply({ kind: 'project-put', record });
    for (const record of Object.values(data.clients)) base.apply({ kind: 'client-put', record });
    for (const [projectId, byId] of Object.entries(data.memberships ?? {})) {
      for (const record of Object.values(byId)) base.apply({ kind: 'membership-put', projectId, record });
    }
    for (const record of Object.values(data.keys)) base.apply({ kind: 'signing-key-put', record });
    for (const byId of Object.values(data.jobs ?? {}))
      for (const record of Object.values(byId)) base.apply({ kind: 'export-job-put', record });
  }

  /**
   * A store written before memberships and export jobs had their own logs keeps them in
   * directory.json: one batch appends them to the logs and rewrites directory.json without them.
   * The directory write commits the batch, so a crash before it leaves the old layout intact
   * (the appended records are then uncommitted and cut on the next open).
   */
  private async migrateDirectory(base: BaseState): Promise<void> {
    const data = this.db.data;
    if (data.memberships === undefined && data.jobs === undefined) return;
    const mutations: Mutation[] = [];
    for (const [projectId, byId] of Object.entries(data.memberships ?? {})) {
      for (const record of Object.values(byId)) mutations.push({ kind: 'membership-put', projectId, record });
    }
    for (const byId of Object.values(data.jobs ?? {})) {
      for (const record of Object.values(byId)) mutations.push({ kind: 'export-job-put', record });
    }
    delete data.memberships;
    delete data.jobs;
    this.forceDirectoryWrite = true;
    try {
      await this.persist(mutations, base);
    } finally {
      this.forceDirectoryWrite = false;
    }
  }

  /** The last committed batch in commit.log (a torn last record is ignored). */
  private async lastCommitted(): Promise<number> {
    const content = await this.commitLog.readFile();
    let last = 0;
    for (let at = 0; at + COMMIT_RECORD <= content.length; at += COMMIT_RECORD) {
      const body = content.toString('latin1', at, at + 12);
      const crc = content.toString('latin1', at + 13, at + 21);
      if (content[at + 21] !== 0x0a || crc !== crc32(body).toString(16).padStart(8, '0')) break;
      last = Math.max(last, Number.parseInt(body, 16));
    }
    return last;
  }

  /** Rewrites commit.log as a single record, so it does not grow across restarts. */
  private async resetCommitLog(seq: number): Promise<void> {
    const file = path.join(this.options.dir, 'commit.log');
    const temp = `${file}.tmp`;
    await fs.writeFile(temp, encodeCommit(seq));
    if (this.options.sync) {
      const handle = await fs.open(temp, 'r+');
      await handle.sync();
      await handle.close();
    }
    await this.commitLog.close();
    await fs.rename(temp, file);
    if (this.options.sync) await syncDir(this.options.dir);
    this.commitLog = await fs.open(file, 'r+');
    this.commitSize = COMMIT_RECORD;
  }

  /**
   * Scans a log, truncating it at the first torn, corrupt or uncommitted record, and fixing any
   * wrong superseded-at mark. `onRecord` returns the record's key (resource or user id).
   */
  private async recoverLog(
    log: LogFile,
    committed: number,
    onRecord: (record: ScannedRecord, json: string) => string | undefined,
    resume?: {
      from: number;
      records: number;
      deadBytes: number;
      latest: Map<string, { offset: number; length: number }>;
    },
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
      await log.truncate(validEnd);
      if (this.options.sync) await log.sync();
    }
    for (const { offset, by } of fixes) await log.markSuperseded(log.segment, offset, by);
    log.records = count;
    log.deadBytes = dead;
  }

  private async loadProject(
    base: BaseState,
    projectId: string,
    dirName: string,
    committed: number,
  ): Promise<number> {
    const projectDir = path.join(this.options.dir, 'projects', dirName);
    let maxLastUpdated = 0;
    for (const kind of RECORD_KINDS) {
      const file = path.join(projectDir, `${kind}.log`);
      await fs.rm(`${file}.compact`, { force: true });
      if (!fsSync.existsSync(file)) continue;
      const log = await this.openLog(file, { dirName, projectId, kind }, false);
      getOrCreate(this.recordLogs, dirName, () => new Map()).set(kind, log);
      await this.recoverLog(log, committed, (record, json) => {
        const value = JSON.parse(json) as { id: string };
        base.apply(recordMutation(kind, projectId, value, readOp(record.buf, record.start) === OP_DELETE));
        return value.id;
      });
    }
    let names: string[] = [];
    try {
      names = await fs.readdir(path.join(projectDir, 'resources'));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    for (const name of names) {
      if (name.endsWith('.compact')) {
        // A compaction interrupted before its rename: the log itself is intact.
        await fs.rm(path.join(projectDir, 'resources', name), { force: true });
        continue;
      }
      const match = LOG_NAME.exec(name);
      if (!match) continue;
      const resourceType = match[1]!;
      const log = await this.openLog(
        path.join(projectDir, 'resources', name),
        { dirName, projectId, resourceType },
        false,
      );
      getOrCreate(this.resourceLogs, dirName, () => new Map()).set(resourceType, log);
      const index = await this.readIndex(log);
      let resume: Parameters<FileBackend['recoverLog']>[3];
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
      await this.recoverLog(
        log,
        committed,
        (record, json) => {
          const { buf, start, end, offset } = record;
          const body = JSON.parse(json) as StoredResource;
          const deleted = readOp(buf, start) === OP_DELETE;
          const lastUpdatedMicros = readLastUpdated(buf, start);
          maxLastUpdated = Math.max(maxLastUpdated, lastUpdatedMicros);
          const ref: FileRef = {
            log,
            segment: log.segment,
            offset,
            jsonLength: end - start - HEADER_LENGTH - 1,
          };
          base.putEntry(projectId, {
            resourceType,
            id: body.id,
            versionId: body.meta.versionId,
            lastUpdatedMicros,
            deleted,
            patients: deleted ? [] : patientCompartmentIds(body),
            identifiers: deleted ? [] : identifierKeys(body),
            ref,
          });
          return body.id;
        },
        resume,
      );
    }
    if (names.some((name) => name.endsWith('.idx'))) {
      // Consumed: an index only ever describes the state between a clean close and the next open,
      // so it can never outlive a compaction (whose new file might even reuse the inode number).
      for (const name of await fs.readdir(path.join(projectDir, 'resources'))) {
        if (name.endsWith('.idx')) await fs.rm(path.join(projectDir, 'resources', name), { force: true });
      }
      // Even with durability 'write': an index coming back after a power loss would be wrong.
      await syncDir(path.join(projectDir, 'resources'));
    }
    return maxLastUpdated;
  }

  /**
   * The index file a clean close leaves next to a resource log (`<Type>.log.idx`): the index
   * entries as of a log size, so opening parses only records appended after it (none after a
   * clean shutdown). A cache: ignored, and the log scanned fully, unless it is for this very file
   * (same inode, so not compacted since) and the file still reaches that size.
   */
  private async readIndex(log: LogFile): Promise<LogIndex | undefined> {
    try {
      const index = JSON.parse(await fs.readFile(`${log.file}.idx`, 'utf8')) as LogIndex;
      const stat = await log.segment.handle.stat({ bigint: true });
      if (index.format !== 2 || index.ino !== String(stat.ino) || !(index.size <= log.size)) return undefined;
      if (index.compartment !== this.fingerprint) return undefined;
      if (!Array.isArray(index.entries)) return undefined;
      return index;
    } catch {
      return undefined;
    }
  }

  private async writeIndex(log: LogFile, meta: LogMeta): Promise<void> {
    if (!this.base || meta.resourceType === undefined) return;
    const entries: LogIndex['entries'] = [];
    for (const e of this.base.resources(meta.projectId, meta.resourceType)) {
      const ref = e.ref as FileRef;
      if (ref.log !== log) return; // Not this log's entries (project re-created): no index.
      entries.push([
        e.id,
        e.versionId,
        e.lastUpdatedMicros,
        e.deleted ? 1 : 0,
        ref.offset,
        ref.jsonLength,
        [...e.patients],
        [...e.identifiers],
      ]);
    }
    const stat = await log.segment.handle.stat({ bigint: true });
    const index: LogIndex = {
      format: 2,
      compartment: this.fingerprint,
      ino: String(stat.ino),
      size: log.size,
      records: log.records,
      deadBytes: log.deadBytes,
      entries,
    };
    const file = `${log.file}.idx`;
    const handle = await fs.open(`${file}.tmp`, 'w');
    try {
      await handle.writeFile(JSON.stringify(index));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(`${file}.tmp`, file);
  }

  private async loadOnce(base: BaseState, committed: number): Promise<void> {
    await fs.rm(path.join(this.options.dir, 'once.log.compact'), { force: true });
    this.onceLog = await LogFile.open(path.join(this.options.dir, 'once.log'), {
      create: true,
      sync: this.options.sync,
    });
    const now = Date.now();
    await this.recoverLog(this.onceLog, committed, (_record, json) => {
      const { k, e } = JSON.parse(json) as { k: string; e: number };
      if (e > now) base.apply({ kind: 'one-time-value-put', key: k, expiresAt: e });
      return k;
    });
  }

  /** Removes project directories no project refers to (deleted projects, uncommitted creations). */
  private async removeOrphans(): Promise<void> {
    const used = new Set(Object.values(this.db.data.projectDirs));
    for (const name of await fs.readdir(path.join(this.options.dir, 'projects'))) {
      if (!used.has(name))
        await fs.rm(path.join(this.options.dir, 'projects', name), { recursive: true, force: true });
    }
  }

  /**
   * Removes snapshot directories no export job refers to: taken by a kick-off that crashed
   * before saving its job, or left by a job deleted without `releaseSnapshot`.
   */
  private async removeUnusedSnapshots(base: BaseState): Promise<void> {
    const used = new Set<string>();
    for (const job of base.jobs()) {
      const dir = job.snapshot?.dir;
      if (typeof dir === 'string') used.add(dir);
    }
    let names: string[] = [];
    try {
      names = await fs.readdir(path.join(this.options.dir, 'snapshots'));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    for (const name of names) {
      if (!used.has(`snapshots/${name}`)) {
        await fs.rm(path.join(this.options.dir, 'snapshots', name), { recursive: true, force: true });
      }
    }
  }

  private async openLog(file: string, meta: LogMeta, create: boolean): Promise<LogFile> {
    const log = await LogFile.open(file, { create, sync: this.options.sync });
    this.meta.set(log, meta);
    return log;
  }

  // Writing

  private projectDir(projectId: string, dirty: { value: boolean }): string {
    let dirName = this.db.data.projectDirs[projectId];
    if (!dirName) {
      dirName = `p-${randomUUID()}`;
      this.db.data.projectDirs[projectId] = dirName;
      dirty.value = true;
    }
    return dirName;
  }

  private async recordLog(projectId: string, kind: RecordKind, dirty: { value: boolean }): Promise<LogFile> {
    const dirName = this.projectDir(projectId, dirty);
    const byKind = getOrCreate(this.recordLogs, dirName, () => new Map());
    let log = byKind.get(kind);
    if (!log) {
      log = await this.openLog(
        path.join(this.options.dir, 'projects', dirName, `${kind}.log`),
        { dirName, projectId, kind },
        true,
      );
      byKind.set(kind, log);
    }
    return log;
  }

  private async resourceLog(
    projectId: string,
    resourceType: string,
    dirty: { value: boolean },
  ): Promise<LogFile> {
    const dirName = this.projectDir(projectId, dirty);
    const byType = getOrCreate(this.resourceLogs, dirName, () => new Map());
    let log = byType.get(resourceType);
    if (!log) {
      const file = path.join(this.options.dir, 'projects', dirName, 'resources', `${resourceType}.log`);
      log = await this.openLog(file, { dirName, projectId, resourceType }, true);
      byType.set(resourceType, log);
    }
    return log;
  }

  /**
   * Group commit of one batch: append its records (one write per touched file), sync them, then
   * mark the batch committed (directory.json when it changed, else commit.log) and sync that;
   * only then write the superseded-at marks of the versions it replaced.
   */
  async persist(mutations: readonly Mutation[], base: BaseState): Promise<unknown[]> {
    if (this.broken)
      throw new StorageError('ERR_STORAGE_BROKEN', 'The store failed a write; reopen it', {
        cause: this.broken,
      });
    const seq = this.seq + 1;
    const data = this.db.data;
    const dirty = { value: this.forceDirectoryWrite };
    const pending = new Map<LogFile, Pending>();
    const refs: unknown[] = new Array<unknown>(mutations.length);
    /** Resource key -> its latest record in this batch. */
    const latest = new Map<string, { log: LogFile; offsetInBatch: number; length: number }>();
    /** Versions this batch supersedes; `segment` is set for committed ones (absolute offset). */
    const marks: {
      log: LogFile;
      segment: Segment | undefined;
      offset: number;
      byInBatch: number;
      length: number;
    }[] = [];
    const dropped = new Set<string>();
    const removedDirs: string[] = [];
    const add = (log: LogFile, record: Buffer): number => {
      const p = getOrCreate(pending, log, () => ({ log, parts: [], bytes: 0 }));
      const at = p.bytes;
      p.parts.push(record);
      p.bytes += record.length;
      return at;
    };

    for (const [i, m] of mutations.entries()) {
      switch (m.kind) {
        case 'project-put':
          data.projects[m.record.id] = m.record;
          dirty.value = true;
          break;
        case 'project-delete': {
          delete data.projects[m.id];
          for (const [id, c] of Object.entries(data.clients))
            if (c.projectId === m.id) delete data.clients[id];
          const dirName = data.projectDirs[m.id];
          if (dirName) removedDirs.push(dirName);
          delete data.projectDirs[m.id];
          dropped.add(m.id);
          for (const key of latest.keys()) if (key.startsWith(`${m.id}\u0000`)) latest.delete(key);
          dirty.value = true;
          break;
        }
        case 'membership-put':
          add(
            await this.recordLog(m.projectId, 'memberships', dirty),
            encodeRecord(seq, 0, 'U', JSON.stringify(m.record)),
          );
          break;
        case 'membership-delete':
          add(
            await this.recordLog(m.projectId, 'memberships', dirty),
            encodeRecord(seq, 0, 'D', JSON.stringify({ id: m.id })),
          );
          break;
        case 'client-put':
          data.clients[m.record.id] = m.record;
          dirty.value = true;
          break;
        case 'signing-key-put':
          data.keys[m.record.kid] = m.record;
          dirty.value = true;
          break;
        case 'export-job-put':
          add(
            await this.recordLog(m.record.projectId, 'jobs', dirty),
            encodeRecord(seq, 0, 'U', JSON.stringify(m.record)),
          );
          break;
        case 'export-job-delete':
          add(
            await this.recordLog(m.projectId, 'jobs', dirty),
            encodeRecord(seq, 0, 'D', JSON.stringify({ id: m.id })),
          );
          break;
        case 'one-time-value-put':
          add(this.onceLog, encodeRecord(seq, 0, 'U', JSON.stringify({ k: m.key, e: m.expiresAt })));
          break;
        case 'user-put':
          add(
            await this.recordLog(m.projectId, 'users', dirty),
            encodeRecord(seq, 0, 'U', JSON.stringify(m.record)),
          );
          break;
        case 'user-delete':
          add(
            await this.recordLog(m.projectId, 'users', dirty),
            encodeRecord(seq, 0, 'D', JSON.stringify({ id: m.id })),
          );
          break;
        case 'resource-put':
        case 'resource-delete': {
          const { entry } = m;
          const log = await this.resourceLog(m.projectId, entry.resourceType, dirty);
          const { json } = entry;
          const key = `${m.projectId}\u0000${pairKey(entry.resourceType, entry.id)}`;
          const inBatch = latest.get(key);
          const committed = dropped.has(m.projectId)
            ? undefined
            : base.resource(m.projectId, entry.resourceType, entry.id);
          const op = m.kind === 'resource-delete' ? 'D' : inBatch || committed ? 'U' : 'C';
          const record = encodeRecord(seq, entry.lastUpdatedMicros, op, json);
          const offsetInBatch = add(log, record);
          if (inBatch) {
            marks.push({
              log,
              segment: undefined,
              offset: inBatch.offsetInBatch,
              byInBatch: offsetInBatch,
              length: inBatch.length,
            });
          } else if (committed) {
            const ref = committed.ref as FileRef;
            const length = ref.jsonLength + HEADER_LENGTH + 1;
            marks.push({ log, segment: ref.segment, offset: ref.offset, byInBatch: offsetInBatch, length });
          }
          latest.set(key, { log, offsetInBatch, length: record.length });
          refs[i] = { log, offsetInBatch, jsonLength: record.length - HEADER_LENGTH - 1 };
          break;
        }
        default:
          assertNever(m);
      }
    }

    const batches = [...pending.values()];
    const starts = new Map<LogFile, number>();
    try {
      await Promise.all(
        batches.map(async (p) => {
          starts.set(p.log, p.log.size);
          await p.log.append(p.parts.length === 1 ? p.parts[0]! : Buffer.concat(p.parts, p.bytes));
        }),
      );
      if (this.options.sync) await Promise.all(batches.map((p) => p.log.sync()));
      if (!dirty.value) await this.appendCommit(seq);
    } catch (error) {
      // Not committed: undo. The seq is burned, so a commit.log record of this batch that did
      // reach the disk can never vouch for the records of a later batch.
      this.seq = seq;
      await this.rollback(starts, error);
      throw error;
    }
    if (dirty.value) {
      data.seq = seq;
      try {
        await this.db.write();
      } catch (error) {
        // The rename may or may not have happened: the outcome is unknown until the next open,
        // whose recovery settles it. Refuse further writes meanwhile.
        this.broken = error instanceof Error ? error : new Error(String(error));
        throw error;
      }
    }
    this.seq = seq;

    // Committed. Resolve in-batch offsets to file offsets and write the superseded-at marks.
    for (const [i, ref] of refs.entries()) {
      if (!ref) continue;
      const { log, offsetInBatch, jsonLength } = ref as {
        log: LogFile;
        offsetInBatch: number;
        jsonLength: number;
      };
      refs[i] = {
        log,
        segment: log.segment,
        offset: starts.get(log)! + offsetInBatch,
        jsonLength,
      } satisfies FileRef;
    }
    await Promise.all(
      marks.map(async (mark) => {
        const start = starts.get(mark.log)!;
        const offset = mark.segment ? mark.offset : start + mark.offset;
        mark.log.deadBytes += mark.length;
        try {
          await mark.log.markSuperseded(mark.segment ?? mark.log.segment, offset, start + mark.byInBatch);
        } catch {
          // Recovery recomputes marks; a failed one only matters until the next open.
        }
      }),
    );
    for (const p of batches) {
      p.log.records += p.parts.length;
      this.touched.add(p.log);
    }
    for (const dirName of removedDirs) await this.dropProjectDir(dirName);
    return refs;
  }

  private async appendCommit(seq: number): Promise<void> {
    const record = encodeCommit(seq);
    await this.commitLog.write(record, 0, record.length, this.commitSize);
    this.commitSize += record.length;
    if (this.options.sync) await this.commitLog.datasync();
  }

  /** Undoes a failed batch: cut every touched log back and reload the directory file. */
  private async rollback(starts: Map<LogFile, number>, cause: unknown): Promise<void> {
    try {
      for (const [log, start] of starts) await log.truncate(start);
      await this.db.read();
      this.db.data = { ...emptyDirectory(), ...this.db.data };
    } catch {
      // Cannot undo: refuse further writes rather than risk a corrupt store.
      this.broken = cause instanceof Error ? cause : new Error(String(cause));
    }
  }

  private async dropProjectDir(dirName: string): Promise<void> {
    const logs = [
      ...(this.resourceLogs.get(dirName)?.values() ?? []),
      ...(this.recordLogs.get(dirName)?.values() ?? []),
    ];
    this.resourceLogs.delete(dirName);
    this.recordLogs.delete(dirName);
    for (const log of logs) {
      this.meta.delete(log);
      this.touched.delete(log);
      log.segment.retire();
    }
    await fs
      .rm(path.join(this.options.dir, 'projects', dirName), { recursive: true, force: true })
      .catch(() => undefined);
  }

  // Reading

  pin(entries: readonly ResourceEntry[]): () => void {
    const segments = new Set<Segment>();
    for (const e of entries) segments.add((e.ref as FileRef).segment);
    for (const s of segments) s.pin();
    return () => {
      for (const s of segments) s.unpin();
    };
  }

  async readBody(entry: ResourceEntry): Promise<StoredResource> {
    const ref = entry.ref as FileRef;
    return JSON.parse((await ref.log.readJson(ref)).toString('utf8')) as StoredResource;
  }

  // Snapshots

  /** Runs in the writer between batches: links each type's log and records its committed end. */
  snapshot(
    projectId: string,
    takenAt: string,
    base: BaseState,
    options: ExportSnapshotOptions = {},
  ): FileSnapshot {
    const id = randomUUID();
    const rel = `snapshots/${id}`;
    const snapDir = path.join(this.options.dir, rel);
    fsSync.mkdirSync(snapDir, { recursive: true });
    const types: FileSnapshot['types'] = {};
    const dirName = this.db.data.projectDirs[projectId];
    for (const [resourceType, log] of (dirName && this.resourceLogs.get(dirName)) || []) {
      const file = `${resourceType}.log`;
      try {
        fsSync.linkSync(log.file, path.join(snapDir, file));
      } catch {
        // No hard links on this file system: a copy is a frozen, equally valid view.
        fsSync.copyFileSync(log.file, path.join(snapDir, file));
      }
      types[resourceType] = { file, end: log.size };
    }
    const snapshot: FileSnapshot = { takenAt, adapter: 'file', projectId, dir: rel, types };
    if (options.patientIds) {
      const patientIds = [...new Set(options.patientIds)].sort();
      const positions: Record<string, [number, number][]> = {};
      // A resource in several of these compartments is one entry object in each: identity is
      // enough to list it once (and much cheaper than building a key string per entry).
      const seen = new Set<ResourceEntry>();
      for (const patient of patientIds) {
        for (const e of base.compartment(projectId, patient)) {
          if (seen.has(e)) continue;
          seen.add(e);
          const ref = e.ref as FileRef;
          (positions[e.resourceType] ??= []).push([ref.offset, ref.jsonLength]);
        }
      }
      for (const list of Object.values(positions)) list.sort((a, b) => a[0] - b[0]);
      fsSync.writeFileSync(path.join(snapDir, 'positions.json'), JSON.stringify(positions));
      snapshot.patientIds = patientIds;
      snapshot.positions = 'positions.json';
    }
    return snapshot;
  }

  // Housekeeping

  async maintain(base: BaseState): Promise<void> {
    const logs = [...this.touched];
    this.touched.clear();
    for (const log of logs) {
      const meta = this.meta.get(log);
      // Constant-time checks: this runs after every batch.
      if (log === this.onceLog) {
        if (log.records > 2 * base.onceCount() + 1024) await this.rewriteOnce(base);
      } else if (meta?.kind !== undefined) {
        // Counting live memberships or jobs is linear, so it runs only when the log has grown
        // past the last count's threshold: amortised constant time per record.
        if (log.records > (meta.checkAt ?? 0)) {
          const live = [...liveRecords(base, meta.kind, meta.projectId)];
          if (log.records > 2 * live.length + 1024) await this.rewriteRecords(log, live);
          meta.checkAt = 2 * live.length + 1024;
        }
      } else if (meta?.resourceType !== undefined) {
        const live = log.size - log.deadBytes;
        if (log.deadBytes >= this.options.compactionMinDeadBytes && log.deadBytes > live) {
          await this.compact(log, meta.projectId, meta.resourceType, base);
        }
      }
    }
  }

  private async writeTemp(file: string, chunks: Iterable<Buffer>): Promise<{ temp: string; size: number }> {
    const temp = `${file}.compact`;
    const handle = await fs.open(temp, 'w');
    let size = 0;
    try {
      let parts: Buffer[] = [];
      let bytes = 0;
      for (const chunk of chunks) {
        parts.push(chunk);
        bytes += chunk.length;
        if (bytes >= 1024 * 1024) {
          await handle.write(Buffer.concat(parts, bytes));
          size += bytes;
          parts = [];
          bytes = 0;
        }
      }
      if (bytes > 0) await handle.write(Buffer.concat(parts, bytes));
      size += bytes;
      if (this.options.sync) await handle.sync();
    } finally {
      await handle.close();
    }
    return { temp, size };
  }

  private async rewriteOnce(base: BaseState): Promise<void> {
    const now = Date.now();
    const records: Buffer[] = [];
    for (const [k, e] of base.onceEntries()) {
      if (e > now) records.push(encodeRecord(this.seq, 0, 'U', JSON.stringify({ k, e })));
    }
    const { temp, size } = await this.writeTemp(this.onceLog.file, records);
    await this.onceLog.replaceWith(temp, size, this.options.sync);
    this.onceLog.records = records.length;
  }

  /** Rewrites a record log with only the current records. */
  private async rewriteRecords(log: LogFile, live: readonly { id: string }[]): Promise<void> {
    const records: Buffer[] = [];
    for (const record of live) records.push(encodeRecord(this.seq, 0, 'U', JSON.stringify(record)));
    const { temp, size } = await this.writeTemp(log.file, records);
    await log.replaceWith(temp, size, this.options.sync);
    log.records = records.length;
  }

  /**
   * Rewrites a resource log without superseded records. Exports reading a snapshot keep their
   * hard link to the old file; readers of this process keep the old segment until they finish.
   */
  private async compact(
    log: LogFile,
    projectId: string,
    resourceType: string,
    base: BaseState,
  ): Promise<void> {
    const entries = new Map<number, ResourceEntry>();
    for (const e of base.resources(projectId, resourceType)) {
      const ref = e.ref as FileRef;
      if (ref.log === log) entries.set(ref.offset, e);
    }
    const kept: Buffer[] = [];
    const moved = new Map<number, number>();
    let newOffset = 0;
    await log.scan(0, log.size, ({ buf, start, end, offset }) => {
      if (readSuperseded(buf, start) !== 0 || !entries.has(offset)) return;
      kept.push(Buffer.from(buf.subarray(start, end)));
      moved.set(offset, newOffset);
      newOffset += end - start;
    });
    if (moved.size !== entries.size) return; // Marks disagree with the index: leave the log alone.
    const { temp, size } = await this.writeTemp(log.file, kept);
    await log.replaceWith(temp, size, this.options.sync);
    log.records = kept.length;
    for (const [oldOffset, entry] of entries) {
      const ref = entry.ref as FileRef;
      base.putEntry(projectId, {
        ...entry,
        ref: { ...ref, segment: log.segment, offset: moved.get(oldOffset)! },
      });
    }
  }

  async close(): Promise<void> {
    const logs = [...this.meta.keys()];
    if (this.onceLog) logs.push(this.onceLog);
    for (const log of logs) {
      const meta = this.meta.get(log);
      // Only after a successful open: a failed open must not describe a half-loaded state.
      const index = meta?.resourceType !== undefined && this.opened && !this.broken;
      // The index skips scanning (and so re-checking) the records it covers: they and their
      // superseded-at marks must be on disk first, whatever the durability.
      if (this.options.sync || index) await log.sync().catch(() => undefined);
      if (index && meta) await this.writeIndex(log, meta).catch(() => undefined);
      await log.close();
    }
    this.meta.clear();
    await this.commitLog?.close().catch(() => undefined);
    if (this.lock) releaseLock(this.lock);
    this.lock = undefined;
  }
}

/** The mutation a record log's record replays. */
function recordMutation(
  kind: RecordKind,
  projectId: string,
  value: { id: string },
  deleted: boolean,
): Mutation {
  switch (kind) {
    case 'users':
      return deleted
        ? { kind: 'user-delete', projectId, id: value.id }
        : { kind: 'user-put', projectId, record: value as UserRecord };
    case 'memberships':
      return deleted
        ? { kind: 'membership-delete', projectId, id: value.id }
        : { kind: 'membership-put', projectId, record: value as MembershipRecord };
    case 'jobs':
      return deleted
        ? { kind: 'export-job-delete', projectId, id: value.id }
        : { kind: 'export-job-put', record: value as ExportJobRecord };
  }
}

/** The current records a record log must hold. */
function* liveRecords(base: BaseState, kind: RecordKind, projectId: string): Iterable<{ id: string }> {
  switch (kind) {
    case 'users':
      yield* base.users(projectId);
      break;
    case 'memberships':
      yield* base.memberships(projectId);
      break;
    case 'jobs':
      for (const job of base.jobs()) if (job.projectId === projectId) yield job;
      break;
  }
}
