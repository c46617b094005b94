import { isSmartUser } from '../auth/access/access.js';
import { requireProjectId } from '../http/authenticate.js';
import { FhirError } from '../http/http-error.js';
import type { Principal } from '../http/principal.js';
import type { ExportFile } from './downloads.js';
import type { ExportJobManager } from './export-jobs.js';
import { canExport } from './export-plan.js';
import { NotFoundError } from '../storage/errors.js';
import type { ExportJobRecord } from '../storage/types.js';
import type { ExportPlan } from './export-job-types.js';
import type { CommittedFile, ExportTaskResult } from './export-task.js';
import { buildManifest, manifestEntry, organizingType, type ExportManifest } from './manifest.js';

/*
 * Partial manifests (Bulk Data 3.0.0 `allowPartialManifests`, "Response - In-Progress Status" and
 * the manifest's `link`): while the job runs, the status URL answers 202 with a manifest of files
 * already whole; each page, once answered, never changes but for a `next` link added when more
 * files are ready. Pages are sealed by the run that writes the files, when it persists its
 * progress (see `export-job-run.ts`), so every instance answers the same pages.
 */

/** What a run persists in its progress for the partial manifests. */
export interface PartialManifestState {
  /** Files committed so far, in commit order (as of the last persisted progress). */
  committed?: CommittedFile[];
  /** The end (exclusive index into `committed`) of each sealed page. */
  pageEnds?: number[];
}

/** One page of the manifest, or what to answer instead. */
export type ManifestPage =
  | { status: 200 | 202; manifest: ExportManifest & { link?: { relation: 'next'; url: string }[] } }
  /** Nothing is whole yet: the plain in-progress answer. */
  | { status: 202; manifest?: undefined };

/**
 * The page `page` (from 1) of the manifest of a job kicked off with `allowPartialManifests`:
 * `fileUrl` gives a file's download URL, `pageUrl` a page's URL. A running job answers 202 and its
 * sealed pages (the first, before any is sealed, without a body); a completed one 200, its sealed
 * pages and then a last page of every file not on them. `NotFoundError` for a page that does not
 * exist (yet).
 */
export function manifestPage(
  job: ExportJobRecord,
  page: number,
  fileUrl: (file: string) => string,
  pageUrl: (page: number) => string,
): ManifestPage {
  const state = (job.progress ?? {}) as PartialManifestState;
  const committed = state.committed ?? [];
  const sealed: CommittedFile[][] = [];
  let start = 0;
  for (const end of state.pageEnds ?? []) {
    sealed.push(committed.slice(start, end));
    start = end;
  }
  const running = job.status !== 'completed';
  const pages = running ? sealed : [...sealed, ...lastPage(job, sealed)];
  if (page > pages.length) {
    if (running && page === 1) return { status: 202 };
    throw new NotFoundError('No such manifest page');
  }
  const files = pages[page - 1]!;
  const whole = buildManifest(job, fileUrl);
  const entries = (kind: CommittedFile['kind']) =>
    files.filter((f) => f.kind === kind).map(({ kind: _kind, ...file }) => manifestEntry(file, fileUrl));
  const manifest: ManifestPage['manifest'] & object = {
    ...whole,
    output: entries('output'),
    ...(whole.deleted ? { deleted: entries('deleted') } : {}),
    // The error files are written last: known once the job is done.
    error: running ? [] : whole.error,
  };
  if (page < pages.length) manifest.link = [{ relation: 'next', url: pageUrl(page + 1) }];
  return { status: running ? 202 : 200, manifest };
}

/**
 * The files of a completed job on no sealed page, as a last page: none when every file was on a
 * sealed page (the last sealed page is then the last), one (maybe empty) when none was sealed.
 */
function lastPage(job: ExportJobRecord, sealed: CommittedFile[][]): CommittedFile[][] {
  const result = (job.result ?? {}) as Partial<ExportTaskResult>;
  const listed = new Set(sealed.flat().map((f) => f.file));
  const rest: CommittedFile[] = [];
  for (const kind of ['output', 'deleted'] as const) {
    for (const file of result[kind] ?? []) {
      if (file.count > 0 && !listed.has(file.file)) rest.push({ ...file, kind });
    }
  }
  return rest.length > 0 || sealed.length === 0 ? [rest] : [];
}

/** The `page` query parameter of a status request: a positive integer, 1 when absent. */
export function pageParameter(value: unknown): number {
  if (value === undefined) return 1;
  if (typeof value !== 'string' || !/^[1-9][0-9]{0,8}$/.test(value))
    throw new FhirError(400, 'invalid', 'page must be a positive integer', { expression: ['page'] });
  return Number(value);
}

/**
 * A file on a sealed page of a running job's manifest that `principal` may download, on the rules
 * of `findExportFile` (./downloads.ts) for a completed job's files; undefined when there is none.
 */
export async function findPartialFile(
  jobs: ExportJobManager,
  principal: Principal,
  jobId: string,
  file: string,
): Promise<ExportFile | undefined> {
  const owner = isSmartUser(principal) ? principal.id : undefined;
  const job = await jobs.visibleJob(requireProjectId(principal), owner, jobId);
  if (owner !== undefined && (job.params as Partial<ExportPlan>).ownerKind !== 'user') return undefined;
  const entry = committedFile(job, file);
  if (!entry) return undefined;
  if (!(canExport(principal, entry.type) || (entry.kind === 'deleted' && principal.id === job.ownerId)))
    throw new FhirError(403, 'forbidden', `The access token does not cover ${entry.type}`);
  return { ref: { projectId: job.projectId, jobId: job.id }, file };
}

/** A file committed on a sealed page of a running job's manifest, with its kind and type. */
function committedFile(
  job: ExportJobRecord,
  file: string,
): { kind: CommittedFile['kind']; type: string } | undefined {
  const plan = job.params as unknown as ExportPlan;
  if (!plan.params.allowPartialManifests || job.status === 'completed') return undefined;
  const state = (job.progress ?? {}) as PartialManifestState;
  const sealedEnd = state.pageEnds?.at(-1) ?? 0;
  const found = (state.committed ?? []).slice(0, sealedEnd).find((f) => f.file === file);
  return found && { kind: found.kind, type: found.type ?? organizingType(job) };
}
