import type { ExportJobRecord } from '../storage/types.js';
import type { ExportOutputFile, ExportTaskResult } from './export-task.js';
import type { ExportPlan } from './export-job-types.js';

/** One manifest entry (Bulk Data 2.0.0 "Complete Status" response body). */
export interface ManifestEntry {
  type: string;
  url: string;
  count: number;
}

/** The completion manifest. */
export interface ExportManifest {
  transactionTime: string;
  request: string;
  requiresAccessToken: true;
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
    (files ?? [])
      .filter((f) => f.count > 0)
      .map((f) => ({ type: f.type, url: fileUrl(f.file), count: f.count }));
  const manifest: ExportManifest = {
    transactionTime: job.transactionTime,
    request: job.request,
    requiresAccessToken: true,
    output: entries(result.output),
    error: entries(result.error),
  };
  if (plan.params.since !== undefined) manifest.deleted = entries(result.deleted);
  return manifest;
}

/** The manifest entry kind and type of `file` in a completed job, or undefined when not listed. */
export function findJobFile(
  job: ExportJobRecord,
  file: string,
): { kind: 'output' | 'error' | 'deleted'; type: string } | undefined {
  const result = (job.result ?? {}) as Partial<ExportTaskResult>;
  for (const kind of ['output', 'error', 'deleted'] as const) {
    const found = (result[kind] ?? []).find((f) => f.file === file);
    if (found) return { kind, type: found.type };
  }
  return undefined;
}
