import type { GrantStore } from '../grant-types.js';
import { grantsFileText, openFileGrants } from './file-grants.js';
import type { MemoryGrants } from '../memory-grants.js';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Engine } from '../engine/engine.js';
import { EngineStorage } from '../engine/engine-storage.js';
import { checkBackupTarget, removeStaleBackupTemps, writeBackup, type FileStoreBackup } from './backup.js';
import { FileBackend } from './file-backend.js';
import type { FaultHook } from './faults.js';
import { checkPatientCompartment, type WithCompartment } from '../patient-compartment.js';
import { asFileSnapshot } from './snapshot.js';
import { FileExportReader } from './export-reader.js';
import type {
  ExportReader,
  ExportSnapshot,
  ExportSnapshotOptions,
  HistoryPage,
  HistoryQuery,
  HistoryRetention,
  PatientCompartment,
  Storage,
  StorageDescriptor,
  StoredResource,
} from '../types.js';
import { checkHistoryRetention } from '../history-retention.js';
import { readFileHistory, readFileVersion } from './file-history.js';
import { InvalidOptionError } from '../../errors.js';
import { unavailable } from './faults.js';
import type { IndexerOption, WithMatcher } from '../search-index.js';
import { Indexing } from '../engine/indexing.js';
import { postSavedPostings } from './postings-file.js';

export type { FileStoreBackup } from './backup.js';

/** Options of `fileStorage`. */
export interface FileStorageOptions {
  /** Directory of the store; created when missing. One process at a time may open it. */
  dir: string;
  /**
   * `'fsync'`: a write is acknowledged once flushed to the disk (survives power loss).
   * `'write'`: once handed to the operating system (survives the process being killed, not a
   * power loss); much faster on slow disks.
   * @default 'fsync'
   */
  durability?: 'fsync' | 'write';
  /**
   * A resource log is compacted when its superseded records take more than this many bytes
   * and more than its live records.
   * @default 67108864 (64 MiB)
   */
  compactionMinDeadBytes?: number;
  /**
   * The patient compartment resources are indexed by. With another than the default, the store
   * has no `descriptor` (a worker could not rebuild it) and exports stream from the main thread.
   * @default R4_PATIENT_COMPARTMENT (FHIR R4 CompartmentDefinition "Patient")
   */
  compartment?: PatientCompartment;
  /**
   * Computes what versions are indexed by for search (the indexer itself, or a loader called once,
   * by the first search that builds a parameter's postings or at open when postings were saved).
   * Postings are built per type and parameter on demand: the first search filtering on a
   * parameter builds it, and every later write of the type posts its values. A clean close saves
   * them next to each log (`<Type>.log.postings`), so that reopening does not build them again
   * (docs/fhir.md, "The embedded search index"). `false`: no index, every search scans its type.
   * A host's own indexer must give the values `src/search` compares (`extractValues`) for every
   * parameter it is asked about: the store narrows searches by them. What they do not answer
   * exactly is tested by its `compileFilters`, or by the R4 matcher when it has none.
   * @default r4SearchIndexer (package entry: the FHIR R4 definitions)
   */
  indexer?: IndexerOption | false;
  /**
   * Which superseded versions are kept for `vread` and history (see `HistoryRetention`). With
   * `'all'` resource logs are never compacted (every byte in them is kept history); otherwise
   * compaction drops the rest (`compactionMinDeadBytes`). `{ versions: 1 }` is the store as it
   * was before history: only current versions survive a compaction.
   * @default 'all'
   */
  history?: HistoryRetention;
}

/** The file store: a {@link Storage} that can also copy itself while it runs. */
export interface FileStore extends Storage {
  /** SMART grants: refresh tokens and revoked token ids are kept in `grants.json` (see `openFileGrants`). */
  readonly grants: GrantStore;
  /**
   * Writes a backup of the store into `dir`, a new directory (its parent must exist), while the
   * store goes on serving: the store as it was between two batches (every write acknowledged
   * before the call, whole batches only; writes still under way may or may not be in it), which
   * `fileStorage({ dir })` opens as a store.
   * Writes are held only while the logs are listed, not while they are copied. Export snapshots,
   * index files and the lock are not copied; export jobs in flight then fail in the copy.
   * See docs/file-store.md, "Backups".
   * @throws InvalidOptionError when `dir` exists, is inside the store or has no parent directory.
   * @throws StorageUnavailableError when the copy cannot be written (a full disk): nothing is left
   *   at `dir`.
   */
  backup(dir: string): Promise<FileStoreBackup>;
  /**
   * Removes from `dir` the temporary directories (`.<name>.tmp-<pid>-<uuid>`) of backups killed
   * mid-copy: those of a process that no longer runs, or of this process's pid when no backup of
   * this process writes them (an earlier process had the pid). `backup` does it in its target's
   * parent; call it at start for a directory backups go to. Never touches a backup under way nor
   * any other name; one that cannot be removed is left for the next time.
   * @returns The directories removed (absolute); none when `dir` does not exist.
   */
  removeStaleBackupTemps(dir: string): Promise<string[]>;
}

class FileStorage extends EngineStorage implements FileStore {
  readonly exportReader: ExportReader;
  readonly descriptor: StorageDescriptor | undefined;

  constructor(
    readonly grants: MemoryGrants,
    engine: Engine,
    private readonly backend: FileBackend,
    dir: string,
    compartment: PatientCompartment,
    readerModule: string | undefined,
    private readonly faults: FaultHook | undefined,
    indexing: Indexing,
  ) {
    super(engine, compartment, indexing);
    this.exportReader = new FileExportReader({ dir }, compartment, faults);
    this.descriptor =
      readerModule === undefined
        ? undefined
        : { module: readerModule, exportName: 'openFileExportReader', options: { dir } };
  }

  exportSnapshot(projectId: string, options?: ExportSnapshotOptions): Promise<ExportSnapshot> {
    // Planned in the writer between batches: the logs' sizes are exactly the committed ends.
    return this.engine.enqueueWrite((w) =>
      this.backend.snapshot(projectId, w.now().iso, this.engine.base, options),
    );
  }

  async backup(dir: string): Promise<FileStoreBackup> {
    this.engine.assertOpen();
    const target = await checkBackupTarget(this.backend.dir, dir);
    // Before the store is frozen: the logs stay pinned only for the copy.
    await removeStaleBackupTemps(path.dirname(target));
    // The grants as they are at the freeze (they are written apart from the batches).
    const frozen = await this.engine.enqueueWrite((w) => ({
      ...this.backend.freeze(w.now().iso),
      grants: Buffer.from(grantsFileText(this.grants)),
    }));
    try {
      return await writeBackup(frozen, target, this.faults);
    } catch (error) {
      throw unavailable(error, `The file store could not write a backup into ${target}`);
    }
  }

  removeStaleBackupTemps(dir: string): Promise<string[]> {
    return removeStaleBackupTemps(path.resolve(dir));
  }

  /** Open, and its directory still there and writable (a removed or read-only mount is not ready). */
  override async ping(): Promise<void> {
    await super.ping();
    await fs.access(this.backend.dir, fs.constants.W_OK);
  }

  readResourceVersion(
    projectId: string,
    resourceType: string,
    id: string,
    versionId: string,
  ): Promise<StoredResource> {
    return readFileVersion(this.engine, this.backend, { projectId, resourceType, id, versionId });
  }

  readHistory(projectId: string, query: HistoryQuery): Promise<HistoryPage> {
    return readFileHistory(this.engine, this.backend, projectId, query);
  }

  async releaseSnapshot(snapshot: ExportSnapshot): Promise<void> {
    const snap = asFileSnapshot(snapshot.projectId as string, snapshot);
    await fs.rm(path.join(this.backend.dir, snap.dir), { recursive: true, force: true });
  }

  async close(): Promise<void> {
    if (this.engine.isClosed) return;
    await this.engine.close();
    await this.backend.close();
  }
}

/**
 * Opens the file store (see `fileStorage` in `src/stores.ts`, which fills in the compartment).
 * `readerModule` is a module whose `openFileExportReader(options)` reopens this store's export
 * reader with the same compartment, for export workers; without it the store has no
 * `descriptor` and exports stream from the main thread.
 *
 * `internal.faults` is a test seam (see `FaultHook`), never a public option; so is
 * `internal.checkpointBytes` (the size of `batch.log` that makes the writer checkpoint it).
 *
 * @throws StorageLockedError when another process (or another open store in this process) uses `dir`.
 * @throws StorageUnavailableError when `dir` cannot be created, locked or written (read-only, no
 *   permission, disk full), or repaired where a crash left a torn tail.
 */
export async function createFileStorage(
  options: WithMatcher<WithCompartment<FileStorageOptions>>,
  readerModule?: string,
  internal: { faults?: FaultHook; checkpointBytes?: number } = {},
): Promise<FileStore> {
  if (typeof options?.dir !== 'string' || options.dir.length === 0) {
    throw new InvalidOptionError('fileStorage: dir must be a non-empty string');
  }
  const durability = options.durability ?? 'fsync';
  if (durability !== 'fsync' && durability !== 'write') {
    throw new InvalidOptionError("fileStorage: durability must be 'fsync' or 'write'");
  }
  const compactionMinDeadBytes = options.compactionMinDeadBytes ?? 64 * 1024 * 1024;
  if (!Number.isSafeInteger(compactionMinDeadBytes) || compactionMinDeadBytes < 0) {
    throw new InvalidOptionError('fileStorage: compactionMinDeadBytes must be a non-negative integer');
  }
  const { compartment } = options;
  checkPatientCompartment(compartment, 'fileStorage');
  const history = checkHistoryRetention('fileStorage', options.history);
  const dir = path.resolve(options.dir);
  const indexing = new Indexing(options.indexer, options.matcher);
  const backend = new FileBackend({
    dir,
    sync: durability === 'fsync',
    compactionMinDeadBytes,
    compartment,
    history,
    faults: internal.faults,
    ...(internal.checkpointBytes !== undefined ? { checkpointBytes: internal.checkpointBytes } : {}),
    postingsIndexer: () => indexing.current?.fingerprint,
  });
  const engine = new Engine(backend);
  await backend.open(engine.base, engine.clock);
  let grants: MemoryGrants;
  try {
    const saved = backend.takeSavedPostings();
    if (saved.length > 0 && indexing.enabled) {
      // The indexer is loaded now only to check the saved postings are its own.
      const indexer = await indexing.load().catch(() => undefined);
      if (indexer) postSavedPostings(engine.base, saved, indexer);
    }
    grants = await openFileGrants(dir, durability === 'fsync');
  } catch (error) {
    await backend.close();
    throw error;
  }
  return new FileStorage(grants, engine, backend, dir, compartment, readerModule, internal.faults, indexing);
}
