import type { Readable } from 'node:stream';
import type { ExportJobRecord, NewExportJob, ExportJobChanges, ExportSnapshot } from './record-types.js';
import type { Tombstone } from './query-types.js';

/*
 * What exports read and write through the storage contract (see `./types.ts`): snapshots,
 * readers, export files, the job queue.
 */

/** Optional hints for `exportSnapshot`. */
export interface ExportSnapshotOptions {
  /** Patients whose compartments the export will read (Patient and Group exports). */
  patientIds?: string[];
}

export interface ExportReadOptions {
  resourceType: string;
  /** Only resources changed after this instant (epoch ms). */
  since?: number;
  /**
   * Only resources changed at or before this instant (epoch ms, fractional for sub-millisecond
   * precision); for `readDeleted`, only deletions at or before it. Absent: up to the snapshot.
   */
  until?: number;
  /** Only resources in the compartment of these patients (Patient resources themselves included). */
  patientIds?: string[];
  /**
   * The caller is done with each chunk's `data` before it asks for the next chunk, so the adapter
   * may write the next chunk into the same memory (the export runner does this to keep its memory
   * flat). Adapters may ignore it.
   * @default false
   */
  reuseChunks?: boolean;
}

/**
 * A chunk of NDJSON: whole lines, each a resource's JSON followed by `\n`; `count` is the number
 * of lines in it.
 */
export interface NdjsonChunk {
  data: string | Uint8Array;
  count: number;
}

/** The read side an export worker uses. */
export interface ExportReader {
  /** Latest version, as of the snapshot, of every live resource matching the options. */
  readResources(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<NdjsonChunk>;
  /**
   * Of `resourceTypes`, those with any version (live or deleted) at or before the snapshot: a
   * superset of the types the snapshot has anything of to export, so that the others are not read
   * at all. Optional: without it every type is read (cheap for a store in memory).
   */
  typesWithVersions?(
    projectId: string,
    snapshot: ExportSnapshot,
    resourceTypes: readonly string[],
  ): Promise<Set<string>>;
  /** Resources deleted after `since` and up to the snapshot (and not re-created by then). */
  readDeleted(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<Tombstone>;
  close(): Promise<void>;
}

/**
 * How a worker thread reopens a read-only view of a store: `import(module)[exportName](options)`
 * must return an `ExportReader`. Plain data only.
 */
export interface StorageDescriptor {
  module: string;
  exportName: string;
  options: Record<string, unknown>;
}

/** Which job (and which run of it) export files belong to. */
export interface ExportFilesRef {
  projectId: string;
  jobId: string;
  /**
   * The lease token of the run writing the files (see {@link ExportJobQueue}). A store that knows
   * leases refuses new files once another run holds the job. Absent: no lease check.
   */
  run?: string;
}

/** One export file being written: invisible under its name until `commit`. */
export interface ExportFileHandle {
  /** Appends bytes; resolves once they are accepted (memory holds at most one chunk). */
  write(data: string | Uint8Array): Promise<void>;
  /** Completes the file: it is then listed and served under its name. */
  commit(): Promise<void>;
  /** Removes the unfinished file. */
  abort(): Promise<void>;
}

/** Where one run of one export job writes its files. */
export interface ExportFileSink {
  /** Starts the file `name` (e.g. `Observation-1.ndjson`). */
  create(name: string): Promise<ExportFileHandle>;
}

/** A byte range of a file, both ends included (HTTP `Range`). */
export interface ExportFileRange {
  start: number;
  end: number;
}

/**
 * Where export files live: a local directory (the default) or a store every instance reaches (the
 * PostgreSQL store's `exportFiles`). Export workers reopen it from `descriptor` (or write into
 * `directory`); downloads read it in the main thread.
 */
export interface ExportFileStore {
  /** Root directory when the files are plain files (`{directory}/{job id}/{name}`). */
  readonly directory?: string;
  /**
   * How a worker thread reopens the store: `import(module)[exportName](options)` returns an
   * `ExportFileStore`. Absent (and no `directory`): exports run in the main thread.
   */
  readonly descriptor?: StorageDescriptor;
  /** Opens the writer of one job run, in this thread. */
  sink(ref: ExportFilesRef): ExportFileSink;
  /** Size in bytes of a completed file, or undefined when there is none. */
  size(ref: ExportFilesRef, name: string): Promise<number | undefined>;
  /** Streams a completed file (or a range of it) with backpressure. */
  read(ref: ExportFilesRef, name: string, range?: ExportFileRange): Readable;
  /**
   * Size in bytes of the gzip form (RFC 1952) of a completed file, when the store keeps the file
   * compressed; undefined when it keeps none for that file (a download that accepts gzip is then
   * compressed on the fly). Absent: the store keeps no compressed form.
   */
  gzipSize?(ref: ExportFilesRef, name: string): Promise<number | undefined>;
  /** Streams the gzip form of a completed file as stored: only after `gzipSize` gave its size. */
  readGzip?(ref: ExportFilesRef, name: string): Readable;
  /** Total bytes of a job's completed files. */
  bytes(ref: ExportFilesRef): Promise<number>;
  /** Removes every file of a job, complete or not. */
  remove(ref: ExportFilesRef): Promise<void>;
  /**
   * Ids of the jobs that have files here, for the retention sweep to remove those of jobs that no
   * longer exist. Absent when files cannot outlive their job (the PostgreSQL store deletes them with
   * the job).
   */
  jobIds?(): Promise<string[]>;
  /** Releases what the store holds (a worker's connections). */
  close(): Promise<void>;
}

/**
 * Export jobs shared by several instances of the service on one store: a job is run by the
 * instance holding its lease, renewed by a heartbeat; a job whose lease expired (its instance
 * died) may be claimed by any instance. Leases are tokens chosen by the claimer.
 */
export interface ExportJobQueue {
  /**
   * Creates a job already leased to `run` for `leaseMs`, so that the instance that accepted it runs
   * it: no other instance's heartbeat can claim it between its creation and its start.
   * `ConflictError` when the id exists.
   */
  createLeased(job: NewExportJob, run: string, leaseMs: number): Promise<ExportJobRecord>;
  /**
   * Leases a runnable job (accepted or in progress, with no lease or an expired one) to `run` for
   * `leaseMs`: the oldest, or only `only` when given. Undefined when there is none.
   */
  claim(
    run: string,
    leaseMs: number,
    only?: { projectId: string; id: string },
  ): Promise<ExportJobRecord | undefined>;
  /** Extends the lease of `run`; false when the job is gone, over, or leased to another run. */
  renew(projectId: string, id: string, run: string, leaseMs: number): Promise<boolean>;
  /** Ends the job with `changes` and frees its lease, if `run` still holds it; false otherwise. */
  finish(projectId: string, id: string, run: string, changes: ExportJobChanges): Promise<boolean>;
  /** Gives the lease of `run` up: the job stays runnable, for any instance. */
  release(projectId: string, id: string, run: string): Promise<void>;
  /**
   * Keeps a completed job from expiry sweeps for `ms` (a download of its files is in flight on
   * some instance); renewed while the download lasts.
   */
  holdForDownload(projectId: string, id: string, ms: number): Promise<void>;
  /**
   * Deletes an expired job (and with it the files the store keeps for it) unless a run or a
   * download holds it; false when it is held, true when deleted or already gone.
   */
  deleteIfUnheld(projectId: string, id: string): Promise<boolean>;
  /** Runs `fn` while holding the project's kick-off lock, shared by every instance. */
  withProjectLock<T>(projectId: string, fn: () => Promise<T>): Promise<T>;
}
