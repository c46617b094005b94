import path from 'node:path';
import { Engine } from './engine/engine.js';
import { EngineStorage } from './engine/engine-storage.js';
import { FileBackend } from './file/file-backend.js';
import { fileExportReaderModule } from './file/reader-module.js';
import { asFileSnapshot } from './file/snapshot.js';
import { FileExportReader } from './file-export-reader.js';
import fs from 'node:fs/promises';
import type {
  ExportReader,
  ExportSnapshot,
  ExportSnapshotOptions,
  Storage,
  StorageDescriptor,
} from './types.js';
import { InvalidOptionError } from '../errors.js';

/** Options of {@link fileStorage}. */
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
}

class FileStorage extends EngineStorage {
  readonly exportReader: ExportReader;
  readonly descriptor: StorageDescriptor;

  constructor(
    engine: Engine,
    private readonly backend: FileBackend,
    dir: string,
  ) {
    super(engine);
    this.exportReader = new FileExportReader({ dir });
    this.descriptor = {
      module: fileExportReaderModule(),
      exportName: 'openFileExportReader',
      options: { dir },
    };
  }

  exportSnapshot(projectId: string, options?: ExportSnapshotOptions): Promise<ExportSnapshot> {
    // Planned in the writer between batches: the logs' sizes are exactly the committed ends.
    return this.engine.enqueueWrite((w) =>
      this.backend.snapshot(projectId, w.now().iso, this.engine.base, options),
    );
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
 * The embedded default store: everything in one directory, durable and crash-safe, with
 * per-write cost independent of the store's size. The small, rarely written directory data
 * (projects, clients, keys) lives in a lowdb JSON file; users, memberships, export jobs, one-time
 * values and FHIR resources live in append-only logs with an in-memory index; exports copy log
 * bytes straight into NDJSON.
 * Opening repairs a torn tail left by a crash. See docs/storage.md.
 *
 * @throws StorageLockedError when another process (or another open store in this process) uses `dir`.
 */
export async function fileStorage(options: FileStorageOptions): Promise<Storage> {
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
  const dir = path.resolve(options.dir);
  const backend = new FileBackend({ dir, sync: durability === 'fsync', compactionMinDeadBytes });
  const engine = new Engine(backend);
  await backend.open(engine.base, engine.clock);
  return new FileStorage(engine, backend, dir);
}
