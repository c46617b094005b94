import type { MessagePort } from 'node:worker_threads';
import type { ExportSnapshot, StorageDescriptor } from '../storage/types.js';
import type { ExportParams, KickoffIssue } from './kickoff-params.js';

/**
 * One export job as handed to a worker thread. Plain data only (structured-cloneable), plus the
 * transferred progress port.
 */
export interface ExportTask {
  jobId: string;
  projectId: string;
  params: ExportParams;
  /** Resource types to export, already narrowed to `_type` and to what the caller's scopes cover. */
  types: string[];
  /**
   * Patients whose compartments are exported (Group members, or the `patient` parameter). Absent at
   * system level, and at Patient level without `patient` (then every Patient of the snapshot).
   */
  patientIds?: string[];
  /**
   * Group members added after `_since` (their `member.period.start` is later): their whole
   * compartments are exported, whatever `_since` says.
   */
  newPatientIds?: string[];
  snapshot: ExportSnapshot;
  /** How the worker reopens the store. */
  descriptor?: StorageDescriptor;
  /** The job's own directory, when the files are plain files (and `files` is absent). */
  outputDir?: string;
  /**
   * How the worker reopens the export file store (an `ExportFileStore`'s `descriptor`); the
   * files then go there rather than to `outputDir`.
   */
  files?: StorageDescriptor;
  /** The lease token of this run of the job (the file store refuses files of a superseded run). */
  run?: string;
  /** Files are split before they would exceed this many bytes. */
  maxFileSize: number;
  /**
   * The export stops (result `tooLarge`) before its files would exceed this many bytes in all.
   * Absent: no limit.
   */
  maxExportSize?: number;
  /** Problems ignored at kick-off (lenient handling), written to the error file. */
  issues: KickoffIssue[];
  /** Receives {@link ExportProgress} messages. */
  progressPort?: MessagePort;
}

/** Progress of a running export, posted while it runs. */
export interface ExportProgress {
  resources: number;
  typesDone: number;
  typesTotal: number;
  /** Bytes written to the job's files so far (counted against `maxProjectExportSize`). */
  bytes?: number;
  /**
   * With `allowPartialManifests`: the `output` and `deleted` files committed so far, in commit
   * order (a file is listed once it is whole and served).
   */
  committed?: CommittedFile[];
}

/** A file committed while the export runs, for the partial manifests. */
export interface CommittedFile extends ExportOutputFile {
  kind: 'output' | 'deleted';
}

/** One manifest entry as written (relative file name; the router builds the URL). */
export interface ExportOutputFile {
  /** The resource type of the file; absent for a file of `organizeOutputBy` blocks. */
  type?: string;
  file: string;
  count: number;
  /** `organizeOutputBy`: the file where this file's last resource block continues. */
  continuesInFile?: string;
}

/** What a finished export wrote. */
export interface ExportTaskResult {
  output: ExportOutputFile[];
  deleted: ExportOutputFile[];
  error: ExportOutputFile[];
  /** Resources exported per type, when the files do not say (`organizeOutputBy`). */
  counts?: Record<string, number>;
  /**
   * Bytes of all the files written (counted against `maxProjectExportSize`; when absent, the
   * job's files are measured on disk).
   */
  bytes?: number;
  /**
   * The export stopped because it would have written more than `maxExportSize` bytes: the lists
   * are empty and the files written so far are to be removed. Returned rather than thrown so that
   * it crosses the worker boundary unchanged.
   */
  tooLarge?: true;
}
