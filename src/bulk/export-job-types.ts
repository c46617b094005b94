// The shapes of export jobs, in a module of their own: the job manager, its runs, the plan, the
// manifest and the downloads name them, and none of those imports another for a type.
import type { AuditTrail } from '../audit/trail.js';
import type { Principal } from '../http/principal.js';
import type { ExportFileStore, ExportJobQueue, Storage } from '../storage/types.js';
import type { ExportPool } from './export-pool.js';
import type { KickoffLimits } from './kickoff-limits.js';
import type { ExportParams, KickoffIssue } from './kickoff-params.js';
import type { ImportDeps } from './import/import-run.js';

/** What a job runs, persisted as `ExportJobRecord.params` so that a restart can run it again. */
export interface ExportPlan {
  params: ExportParams;
  types: string[];
  patientIds?: string[];
  newPatientIds?: string[];
  issues: KickoffIssue[];
  /**
   * The export directory of the manager that created the job: without a shared queue, a manager
   * resumes and expires only its own jobs, so that two mounts on one store do not interfere.
   */
  exportDir?: string;
  /**
   * The kind of principal that kicked the job off (`ownerId` is its id): the agent of the
   * completion and failure events. Absent on jobs created before it was kept: `client`.
   */
  ownerKind?: Principal['kind'];
}

/** Options of {@link ExportJobManager}. */
export interface ExportJobManagerOptions {
  storage: Storage;
  pool: ExportPool;
  /** Root directory of the export files (one sub-directory per job) when `files` is absent. */
  exportDir: string;
  /** Where the files go. @default a `DirectoryExportFiles` on `exportDir` */
  files?: ExportFileStore;
  /**
   * The job queue shared by every instance on the store: jobs are then claimed with a lease and
   * run by whichever instance holds it. Absent: this manager runs the jobs of its `exportDir`.
   */
  queue?: ExportJobQueue;
  /** Milliseconds a claimed job's lease lasts without renewal. @default 30000 */
  leaseDuration?: number;
  /**
   * Milliseconds between two lease renewals of a running job, which also look for jobs to take
   * over (queue only). @default 10000
   */
  heartbeatInterval?: number;
  /** Split size of output files in bytes. */
  maxFileSize: number;
  /** A job fails (`too-costly`) before its files would exceed this many bytes. @default Infinity */
  maxExportSize?: number;
  /** How long a finished job and its files are kept, ms. */
  retention: number;
  /** How often expired jobs are looked for, ms. */
  cleanupInterval: number;
  /** Limits every kick-off must pass. @default none */
  limits?: KickoffLimits;
  /** Receives unexpected failures (a job failing is not one). */
  onError: (error: unknown) => void;
  /**
   * Records the completion and the failure of each job (the kick-off and the cancel are recorded
   * by the router, which has the request). @default undefined (nothing recorded)
   */
  auditTrail?: AuditTrail;
  /** What `$import` jobs need (absent: no imports). */
  importer?: ImportDeps & { maxRunning: number };
}

/** What a kick-off asks for. */
export interface KickoffInput {
  projectId: string;
  ownerId: string;
  /** The kind of principal `ownerId` names (kept with the job for its audit events). @default 'client' */
  ownerKind?: Principal['kind'];
  /** The kick-off request URL (the manifest's `request`). */
  request: string;
  plan: ExportPlan;
}
