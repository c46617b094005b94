import { StorageClosedError, StorageError } from '../errors.js';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../engine/clock.js';
import type { EngineBackend } from '../engine/engine.js';
import type { Mutation, ResourceEntry } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import type { ExportSnapshotOptions, PatientCompartment, StoredResource } from '../types.js';
import { BatchLog } from './batch-log.js';
import { freezeStore, type FrozenStore } from './backup.js';
import { CommitLog } from './commit-log.js';
import { compactTouchedLogs } from './compaction.js';
import { pathExists } from './durable-json-file.js';
import { takeLegacyRecords } from './directory.js';
import { unavailable, type FaultHook } from './faults.js';
import { GroupCommit } from './group-commit.js';
import { acquireLock, releaseLock, type DirLock } from './lock.js';
import { indexFingerprint, writeIndex } from './log-index.js';
import { writePostingsFile, type SavedPostings } from './postings-file.js';
import type { FileRef, LogFile, Segment } from './log-file.js';
import { recoverStore, removeOrphanProjectDirs, removeUnusedSnapshots, replayBatchLog } from './recovery.js';
import { takeSnapshot, type FileSnapshot } from './snapshot.js';
import { StoreFiles } from './store-files.js';
import { FileVersionIndex, type FileVersion, type FileVersionList } from './version-index.js';
import type { HistoryRetention } from '../types.js';

export interface FileBackendOptions {
  dir: string;
  sync: boolean;
  compactionMinDeadBytes: number;
  compartment: PatientCompartment;
  history: HistoryRetention;
  /** Tests only: see `FaultHook`. */
  faults?: FaultHook | undefined;
  /**
   * Size of `batch.log` past which the writer checkpoints it (see `GroupCommit.checkpoint`); each
   * open writes it all into the logs again. @default 32 MiB
   */
  checkpointBytes?: number;
  /**
   * The fingerprint of the search indexer, once loaded: a clean close saves the search postings
   * with it (`postings-file.ts`). Undefined: none saved.
   */
  postingsIndexer?: () => string | undefined;
}

/**
 * The file store's persistence under the engine: see docs/file-store.md for the
 * layout, the commit protocol and recovery. Each concern has its module: `recovery.ts` (open),
 * `group-commit.ts` (writes), `compaction.ts` (housekeeping), `snapshot.ts` (exports); this class
 * holds them together and owns the lock.
 */
export class FileBackend implements EngineBackend {
  private readonly files: StoreFiles;
  private lock: DirLock | undefined;
  private commitLog: CommitLog | undefined;
  private batchLog: BatchLog | undefined;
  private commit: GroupCommit | undefined;
  /** The engine's committed state (for the index files written on close). */
  private base: BaseState | undefined;
  private opened = false;
  private readonly fingerprint: string;
  /** The version lists of the logs whose history was read (see `FileVersionIndex`). */
  private readonly versions = new FileVersionIndex();
  /** Search postings saved by the last clean close, until `takeSavedPostings`. */
  private savedPostings: SavedPostings[] = [];

  constructor(private readonly options: FileBackendOptions) {
    this.files = new StoreFiles(options.dir, options.sync, options.faults);
    this.fingerprint = indexFingerprint(options.compartment);
  }

  get dir(): string {
    return this.options.dir;
  }

  private get writer(): GroupCommit {
    if (!this.commit) throw new StorageClosedError('The file store is not open');
    return this.commit;
  }

  /**
   * Takes the lock and loads the store into `base`, repairing what a crash left. A directory that
   * cannot be created, locked or written (read-only, no permission, disk full) rejects with
   * `StorageUnavailableError` naming it and the errno code.
   */
  async open(base: BaseState, clock: Clock): Promise<void> {
    try {
      await this.openFiles(base, clock);
    } catch (error) {
      throw unavailable(error, `Cannot open the file store in ${this.options.dir}`);
    }
  }

  private async openFiles(base: BaseState, clock: Clock): Promise<void> {
    const { dir, sync, faults } = this.options;
    this.base = base;
    faults?.('mkdir', path.join(dir, 'projects'));
    await fs.mkdir(path.join(dir, 'projects'), { recursive: true });
    this.lock = acquireLock(dir, faults);
    try {
      // Every committed project is in directory.json, written when a store is created: without
      // it, the projects' logs would be taken for leftovers of uncommitted creations and removed.
      const hadDirectory = await pathExists(path.join(dir, 'directory.json'));
      if (!hadDirectory && (await fs.readdir(path.join(dir, 'projects'))).length > 0) {
        throw new StorageError(
          'ERR_STORAGE_CORRUPT',
          `${path.join(dir, 'directory.json')} is missing but projects/ holds project logs: restore it ` +
            'from a backup (the store was not opened, nothing was removed)',
        );
      }
      await this.files.openDirectory();
      if (!hadDirectory) await this.files.directory.write();
      this.commitLog = await CommitLog.open(dir, sync, faults);
      // Opened whatever the durability: a store last used with 'fsync' may have entries to replay.
      const batchLog = await BatchLog.open(dir, faults);
      this.batchLog = batchLog;
      const { entries, end } = await batchLog.read();
      if (end < batchLog.size) await batchLog.truncate(end);
      await replayBatchLog(this.files, entries);
      const committed = Math.max(
        this.files.directory.data.seq,
        await this.commitLog.lastCommitted(),
        ...entries.map((e) => e.seq),
      );
      this.commit = new GroupCommit(this.files, this.commitLog, sync ? batchLog : undefined);
      this.commit.seq = committed;
      const { compartment } = this.options;
      const { files, fingerprint } = this;
      const postings: SavedPostings[] = [];
      clock.advanceTo(await recoverStore({ files, base, committed, compartment, fingerprint, postings }));
      this.savedPostings = postings;
      await this.migrateDirectory(base);
      await removeOrphanProjectDirs(this.files);
      await removeUnusedSnapshots(this.files, base);
      // The replayed logs are synced, and commit.log now holds the last seq: batch.log is done with.
      await this.commitLog.reset(this.commit.seq);
      if (batchLog.size > 0) await batchLog.truncate(0);
      this.opened = true;
    } catch (error) {
      await this.close().catch(() => undefined);
      throw error;
    }
  }

  /** The search postings read on open (then forgotten here): see `postSavedPostings`. */
  takeSavedPostings(): SavedPostings[] {
    const saved = this.savedPostings;
    this.savedPostings = [];
    return saved;
  }

  /**
   * A store written before memberships and export jobs had their own logs keeps them in
   * directory.json: one batch appends them to the logs and rewrites directory.json without them.
   * The directory write commits the batch, so a crash before it leaves the old layout intact
   * (the appended records are then uncommitted and cut on the next open).
   */
  private async migrateDirectory(base: BaseState): Promise<void> {
    const data = this.files.directory.data;
    if (data.memberships === undefined && data.jobs === undefined) return;
    await this.writer.persist(takeLegacyRecords(data), base, true);
  }

  async persist(mutations: readonly Mutation[], base: BaseState): Promise<unknown[]> {
    const refs = await this.writer.persist(mutations, base);
    this.versions.record(mutations, refs, this.files.meta);
    return refs;
  }

  /** The resource logs of a project, of one type when given, with their version lists if built. */
  versionLists(
    projectId: string,
    resourceType?: string,
  ): { resourceType: string; log: LogFile; list: FileVersionList | undefined }[] {
    const found = [];
    for (const [type, log] of this.files.resourceLogsOf(projectId)) {
      if (resourceType === undefined || type === resourceType)
        found.push({ resourceType: type, log, list: this.versions.get(log) });
    }
    return found;
  }

  /** Builds the version list of `log`: only in the writer, between batches. */
  buildVersionList(log: LogFile): Promise<FileVersionList> {
    return this.versions.build(log).catch((error: unknown) => {
      throw unavailable(error, 'The file store could not read a resource log');
    });
  }

  /** Reads an old version's body (its segment pinned by the caller). */
  async readVersion(list: FileVersionList, version: FileVersion): Promise<StoredResource> {
    let json: Buffer;
    try {
      json = await list.log.readJson(list.ref(version));
    } catch (error) {
      throw unavailable(error, 'The file store could not read a resource');
    }
    return JSON.parse(json.toString('utf8')) as StoredResource;
  }

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
    let json: Buffer;
    try {
      json = await ref.log.readJson(ref);
    } catch (error) {
      // A failed read (EIO) is transient: 503, and the next read tries the disk again. A damaged
      // record stays ERR_STORAGE_CORRUPT.
      throw unavailable(error, 'The file store could not read a resource');
    }
    return JSON.parse(json.toString('utf8')) as StoredResource;
  }

  /** Runs in the writer between batches (see `takeSnapshot`). */
  snapshot(
    projectId: string,
    takenAt: string,
    base: BaseState,
    options?: ExportSnapshotOptions,
  ): FileSnapshot {
    try {
      return takeSnapshot(this.files, projectId, takenAt, base, options);
    } catch (error) {
      throw unavailable(error, 'The file store could not write an export snapshot');
    }
  }

  /** Runs in the writer between batches (see `freezeStore`): the store as a backup copies it. */
  freeze(takenAt: string): FrozenStore {
    try {
      return freezeStore(this.files, this.writer.seq, takenAt);
    } catch (error) {
      throw unavailable(error, 'The file store could not start a backup');
    }
  }

  async maintain(base: BaseState): Promise<void> {
    const { writer } = this;
    await writer.checkpoint(this.options.checkpointBytes ?? 32 * 1024 * 1024);
    await compactTouchedLogs(
      this.files,
      base,
      writer.seq,
      { minDeadBytes: this.options.compactionMinDeadBytes, history: this.options.history },
      () => writer.checkpoint(),
    );
  }

  async close(): Promise<void> {
    const { files } = this;
    // The logs must hold all the data on their own before index files describe them.
    const checkpointed =
      this.opened && this.commit
        ? await this.commit.checkpoint().then(
            () => true,
            () => false,
          )
        : false;
    const logs: LogFile[] = [...files.meta.keys()];
    if (files.onceLog) logs.push(files.onceLog);
    for (const log of logs) {
      const meta = files.meta.get(log);
      // Only after a successful open: a failed open must not describe a half-loaded state.
      const index = meta?.resourceType !== undefined && this.opened && checkpointed && !this.commit?.broken;
      // The index skips scanning (and so re-checking) the records it covers: they and their
      // superseded-at marks must be on disk first, whatever the durability.
      if (this.options.sync || index) await log.sync().catch(() => undefined);
      if (index && meta && this.base) {
        const written = await writeIndex(log, meta, this.base, this.fingerprint).then(
          () => true,
          () => false,
        );
        const indexer = this.options.postingsIndexer?.();
        if (written && indexer !== undefined)
          await writePostingsFile(log, meta, this.base, indexer).catch(() => undefined);
      }
      await log.close();
    }
    files.meta.clear();
    await this.commitLog?.close().catch(() => undefined);
    await this.batchLog?.close().catch(() => undefined);
    this.batchLog = undefined;
    if (this.lock) releaseLock(this.lock);
    this.lock = undefined;
  }
}
