import { R4_PATIENT_COMPARTMENT } from './fhir/compartment.js';
import { checkOptionKeys, type OptionKeys } from './common/option-keys.js';
import { descriptorModule } from './package-entry.js';
import { createFileExportReader, type FileExportReaderOptions } from './storage/file/export-reader.js';
import { createFileStorage, type FileStorageOptions, type FileStore } from './storage/file/file-storage.js';
import { createMemoryStorage, type MemoryStorageOptions } from './storage/memory.js';
import type { ExportReader, Storage } from './storage/types.js';
import { loadR4Indexer } from './search/index-resource.js';
import type { ResourceIndexer, SearchMatcher } from './storage/search-index.js';

// The storage adapters with this package's FHIR R4 defaults. `src/storage` knows nothing of
// FHIR: the patient compartment reaches it as an option, filled in here (see docs/storage.md,
// "The patient compartment").

/**
 * The module export workers import to reopen a file store (`StorageDescriptor.module`): one whose
 * `openFileExportReader` supplies the default compartment. From source (vitest, tsx) that is
 * `src/stores.ts`; from the build, the package entry (`dist/index.js` or `dist/index.cjs`),
 * which re-exports `openFileExportReader`. Exported for tests that open a file store with its
 * internal settings; the package entry does not re-export it.
 */
export function fileStoreModule(): string {
  return descriptorModule('./stores.ts', 'index');
}

/**
 * The FHIR R4 search indexer of the embedded stores (without composites: they do not post them):
 * the default `indexer` of `fileStorage` and `memoryStorage` (`indexer: false` turns the index
 * off). Postings are built per type and parameter by the first search filtering on it, so ingest
 * pays only for the parameters searched (docs/fhir.md, "The embedded search index").
 */
export const r4SearchIndexer = (): Promise<ResourceIndexer> => loadR4Indexer({ composites: false });

/**
 * What the embedded stores test of a search that their postings do not answer exactly, whatever
 * their `indexer` (none, or a host's own without `compileFilters`): the R4 matcher.
 */
const r4SearchMatcher = (): Promise<SearchMatcher> =>
  loadR4Indexer({ composites: false }) as Promise<SearchMatcher>;

const FILE_STORAGE_KEYS: OptionKeys<FileStorageOptions> = {
  dir: true,
  durability: true,
  compactionMinDeadBytes: true,
  compartment: true,
  indexer: true,
  history: true,
};

const MEMORY_STORAGE_KEYS: OptionKeys<MemoryStorageOptions> = {
  exportChunkBytes: true,
  compartment: true,
  indexer: true,
  history: true,
};

/**
 * The embedded default store: everything in one directory, durable and crash-safe, with
 * per-write cost independent of the store's size. The small, rarely written directory data
 * (projects, clients, keys) lives in a lowdb JSON file; users, memberships, export jobs, one-time
 * values and FHIR resources live in append-only logs with an in-memory index; exports copy log
 * bytes straight into NDJSON, in worker threads that reopen the store from its `descriptor`.
 * Opening repairs a torn tail left by a crash. See docs/storage.md.
 *
 * Async, unlike `memoryStorage` and `postgresStorage`: it takes the directory's lock and replays
 * the logs before it answers anything, so that a store that cannot be opened fails here rather
 * than at the first request. `await` it: factories given the promise refuse it.
 *
 * @throws StorageLockedError when another process (or another open store in this process) uses `dir`.
 * @throws InvalidOptionError (`ERR_INVALID_OPTION`, as a rejection) on a bad or unknown option.
 * @throws StorageUnavailableError when `dir` cannot be created, locked or written (a read-only or
 *   inaccessible directory, a full disk).
 */
export async function fileStorage(options: FileStorageOptions): Promise<FileStore> {
  checkOptionKeys('fileStorage', options, FILE_STORAGE_KEYS);
  const compartment = options?.compartment ?? R4_PATIENT_COMPARTMENT;
  // Workers rebuild only the default compartment: with another, exports run in this thread.
  const readerModule = compartment === R4_PATIENT_COMPARTMENT ? fileStoreModule() : undefined;
  return createFileStorage(
    { ...options, compartment, indexer: options.indexer ?? r4SearchIndexer, matcher: r4SearchMatcher },
    readerModule,
  );
}

/**
 * Opens a read-only export reader on a file store's directory: the `exportName` of the file
 * store's `descriptor`, imported by export workers. It needs no lock and touches only snapshot
 * files, so it may run while the store is open in another thread. Uses the FHIR R4 patient
 * compartment.
 */
export function openFileExportReader(options: FileExportReaderOptions): ExportReader {
  return createFileExportReader(options, R4_PATIENT_COMPARTMENT);
}

/**
 * A store that keeps everything in this process's memory: for tests, demos and hosts that bring
 * their own persistence. It keeps the old versions its `history` retention asks for (every one by
 * default) and, whatever that says, every version while an export snapshot is open (exports read a
 * consistent snapshot): release snapshots when exports end. Exports
 * stream from the main thread (`descriptor` is undefined). Synchronous (there is nothing to
 * open); `await memoryStorage()` is harmless, so code may await every factory alike.
 */
export function memoryStorage(options: MemoryStorageOptions = {}): Storage {
  checkOptionKeys('memoryStorage', options, MEMORY_STORAGE_KEYS);
  return createMemoryStorage({
    ...options,
    compartment: options.compartment ?? R4_PATIENT_COMPARTMENT,
    indexer: options.indexer ?? r4SearchIndexer,
    matcher: r4SearchMatcher,
  });
}
