import type { ExportJobRecord } from '../storage/types.js';
import type { ExportOutputFile, ExportTaskResult } from './export-task.js';
import type { ExportPlan } from './export-job-types.js';

/**
 * One manifest entry (Bulk Data 2.0.0 "Complete Status" response body; 3.0.0 for `organizeOutputBy`:
 * no `type`, and `continuesInFile` when the file's last block goes on in another file).
 */
export interface ManifestEntry {
  type?: string;
  url: string;
  continuesInFile?: string;
  count: number;
}

/** The completion manifest. */
export interface ExportManifest {
  transactionTime: string;
  request: string;
  requiresAccessToken: true;
  /** The `organizeOutputBy` of the kick-off (Bulk Data 3.0.0). */
  outputOrganizedBy?: string;
  output: ManifestEntry[];
  error: ManifestEntry[];
  deleted?: ManifestEntry[];
}

/**
 * Builds the manifest of a completed job; `fileUrl(file)` gives a file's absolute download URL.
 * `deleted` is present when the export had `_since`.
 */
export function buildManifest(job: ExportJobRecord, fileUrl: (file: string) => string): ExportManifest {
  const result = (job.result ?? {}) as Partial<ExportTaskResult>;
  const plan = job.params as unknown as ExportPlan;
  const entries = (files: ExportOutputFile[] | undefined): ManifestEntry[] =>
    (files ?? []).filter((f) => f.count > 0).map((f) => manifestEntry(f, fileUrl));
  const manifest: ExportManifest = {
    transactionTime: job.transactionTime,
    request: job.request,
    requiresAccessToken: true,
    ...(plan.params.organizeOutputBy ? { outputOrganizedBy: plan.params.organizeOutputBy } : {}),
    output: entries(result.output),
    error: entries(result.error),
  };
  if (plan.params.since !== undefined) manifest.deleted = entries(result.deleted);
  return manifest;
}

/** The manifest entry of a file written. */
export function manifestEntry(file: ExportOutputFile, fileUrl: (file: string) => string): ManifestEntry {
  return {
    ...(file.type !== undefined ? { type: file.type } : {}),
    url: fileUrl(file.file),
    ...(file.continuesInFile !== undefined ? { continuesInFile: fileUrl(file.continuesInFile) } : {}),
    count: file.count,
  };
}

/**
 * The manifest entry kind and type of `file` in a completed job, or undefined when not listed. A
 * file of `organizeOutputBy` blocks has the organizing type (`Patient`).
 */
export function findJobFile(
  job: ExportJobRecord,
  file: string,
): { kind: 'output' | 'error' | 'deleted'; type: string } | undefined {
  const result = (job.result ?? {}) as Partial<ExportTaskResult>;
  for (const kind of ['output', 'error', 'deleted'] as const) {
    const found = (result[kind] ?? []).find((f) => f.file === file);
    if (found) return { kind, type: found.type ?? organizingType(job) };
  }
  return undefined;
}

/** The type an export's output is organized by (`Patient` when it names none). */
export function organizingType(job: ExportJobRecord): string {
  return (job.params as unknown as Partial<ExportPlan>).params?.organizeOutputBy ?? 'Patient';
}
