import { createHash } from 'node:crypto';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type { Request, Response } from 'express';
import { isSmartUser } from '../auth/access/access.js';
import type { Principal } from '../http/principal.js';
import { requireProjectId } from '../http/authenticate.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type { ExportFileRange, ExportFilesRef } from '../storage/types.js';
import type { ExportPlan } from './export-job-types.js';
import type { ExportJobManager } from './export-jobs.js';
import { canExport } from './export-plan.js';
import { findJobFile } from './manifest.js';
import { inBackground } from '../http/foreground-requests.js';

const FILE_NAME = /^[A-Za-z]+-[0-9]+\.ndjson$/;

/** One file of a completed export that a principal may download. */
export interface ExportFile {
  /** The job the file belongs to. */
  ref: ExportFilesRef;
  /** The file name, as listed in the manifest. */
  file: string;
}

/**
 * The file `file` of job `jobId` when `principal` may download it (Bulk Data "File request"): a
 * file listed in the manifest of a completed job of the principal's project, of a type the
 * principal may export (error and deleted files also to the job's owner); a SMART user's own job
 * only (anyone else's is a 404 to it). Otherwise
 * `NotFoundError`, or 403 `forbidden` for a type the token does not cover.
 */
export async function findExportFile(
  jobs: ExportJobManager,
  principal: Principal,
  jobId: string,
  file: string,
): Promise<ExportFile> {
  // A SMART user downloads only the files of its own exports (they hold its patients' data only).
  const owner = isSmartUser(principal) ? principal.id : undefined;
  const job = await jobs.visibleJob(requireProjectId(principal), owner, jobId);
  if (owner !== undefined && (job.params as Partial<ExportPlan>).ownerKind !== 'user')
    throw new NotFoundError('No such export file');
  // Only a name listed in the job's manifest is ever looked up in the file store.
  const entry = job.status === 'completed' && FILE_NAME.test(file) ? findJobFile(job, file) : undefined;
  if (!entry) throw new NotFoundError('No such export file');
  const allowed =
    entry.kind === 'output'
      ? canExport(principal, entry.type)
      : principal.id === job.ownerId || canExport(principal, entry.type);
  if (!allowed) throw new FhirError(403, 'forbidden', `The access token does not cover ${entry.type}`);
  return { ref: { projectId: job.projectId, jobId: job.id }, file };
}

/** How a download ended, for its audit event. */
export interface DownloadOutcome {
  /** Bytes of the body handed to the connection (compressed ones when gzip was applied). */
  bytes: number;
  /** The range served (`bytes=0-1023`), or asked for when it could not be served. */
  range?: string;
  /** Why the download did not complete: the client went away, or the range was not satisfiable. */
  error?: string;
}

/**
 * The strong validator of an export file (RFC 9110 §8.8.3): its project, job, name and size, which
 * never change once the job completed (a job's files are written once, before it completes). The
 * gzip coding is another representation, so it has its own tag.
 */
function fileTag(ref: ExportFilesRef, file: string, size: number, gzip: boolean): string {
  const digest = createHash('sha256')
    .update(`${ref.projectId}/${ref.jobId}/${file}/${size}`)
    .digest('base64url')
    .slice(0, 22);
  return `"${digest}${gzip ? '-gzip' : ''}"`;
}

/**
 * The single byte range a request asks for (RFC 9110 §14): undefined for the whole file (no
 * `Range`, an `If-Range` other than the file's own entity tag (a date, a weak or another tag: the
 * representation may have changed, so the whole file is sent, §13.1.5), several ranges, or a
 * malformed header), `'unsatisfiable'` when no range overlaps the file.
 */
function requestedRange(
  req: Request,
  size: number,
  tag: string,
): ExportFileRange | 'unsatisfiable' | undefined {
  if (req.headers.range === undefined) return undefined;
  const ifRange = req.get('If-Range');
  if (ifRange !== undefined && ifRange.trim() !== tag) return undefined;
  const ranges = req.range(size, { combine: true });
  if (ranges === -1) return 'unsatisfiable';
  if (ranges === undefined || ranges === -2 || ranges.type !== 'bytes' || ranges.length !== 1)
    return undefined;
  const [range] = ranges;
  return range ? { start: range.start, end: range.end } : undefined;
}

/**
 * Streams an export file as `application/fhir+ndjson` from the job manager's file store, with
 * backpressure (memory holds a chunk or so, whatever the file's size): gzip-compressed when the
 * client accepts it and asks for the whole file (as the store keeps it when it keeps it compressed,
 * else compressed on the fly), otherwise the NDJSON bytes, with `Range` and `If-Range` support (a
 * strong `ETag` per file and coding), so that a cut download resumes. The
 * download counts as in flight (retention does not remove the job) until the response closes. A
 * file gone meanwhile is a `NotFoundError`. `onEnd` (the audit trail's) learns how many bytes went
 * out: just before the client can hold the whole answer, or when it went away before.
 */
export async function sendExportFile(
  req: Request,
  res: Response,
  jobs: ExportJobManager,
  { ref, file }: ExportFile,
  onEnd?: (outcome: DownloadOutcome) => void,
): Promise<void> {
  const end = await jobs.beginDownload(ref);
  // The client may have gone while the mark was taken: no 'close' event would come then.
  if (res.closed || res.destroyed) {
    end();
    return;
  }
  res.on('close', end);
  const size = await jobs.files.size(ref, file).catch(() => undefined);
  if (size === undefined) {
    end();
    throw new NotFoundError('No such export file');
  }
  let sent = 0;
  let served: string | undefined;
  let reported = false;
  // The event is recorded before the client can hold the whole answer (see docs/audit.md
  // "Durability"): before the chunk that completes a Content-Length body is passed on, before the
  // end of a gzip (chunked) body, before an empty or refused answer is sent; an abort at close.
  const report = (outcome: DownloadOutcome): void => {
    if (reported || !onEnd) return;
    reported = true;
    onEnd(outcome);
  };
  const reportSent = (error?: string) =>
    report({ bytes: sent, ...(served !== undefined ? { range: served } : {}), ...(error ? { error } : {}) });
  // HEAD sends no body: nothing was downloaded.
  const audited = onEnd !== undefined && req.method !== 'HEAD';
  if (audited) {
    res.once('close', () =>
      reportSent(res.writableFinished ? undefined : 'aborted before the end of the file'),
    );
  }
  res
    .type('application/fhir+ndjson')
    .set('Cache-Control', 'private, no-store')
    .set('Vary', 'Accept-Encoding')
    .set('Accept-Ranges', 'bytes');
  const tag = fileTag(ref, file, size, false);
  const range = requestedRange(req, size, tag);
  if (range === 'unsatisfiable') {
    if (audited) report({ bytes: 0, range: req.headers.range ?? '', error: 'range not satisfiable' });
    res.status(416).set('Content-Range', `bytes */${size}`).end();
    return;
  }
  // gzip is applied to whole-file downloads only; a Range request is answered uncompressed, so
  // that byte offsets always refer to the stored file.
  const gzip =
    range === undefined &&
    req.headers.range === undefined &&
    req.acceptsEncodings('gzip', 'identity') === 'gzip';
  // A store that keeps the file compressed sends it as stored (with its length); otherwise the
  // file is compressed on the fly.
  const storedGzip = gzip ? await jobs.files.gzipSize?.(ref, file).catch(() => undefined) : undefined;
  res.set('ETag', gzip ? fileTag(ref, file, size, true) : tag);
  if (gzip) {
    res.status(200).set('Content-Encoding', 'gzip');
    if (storedGzip !== undefined) res.set('Content-Length', String(storedGzip));
  } else if (range) {
    served = `bytes=${range.start}-${range.end}`;
    res
      .status(206)
      .set('Content-Range', `bytes ${range.start}-${range.end}/${size}`)
      .set('Content-Length', String(range.end - range.start + 1));
  } else res.status(200).set('Content-Length', String(size));
  if (req.method === 'HEAD' || (range === undefined && size === 0 && !gzip)) {
    if (audited) reportSent();
    res.end();
    return;
  }
  const body =
    storedGzip !== undefined && jobs.files.readGzip
      ? jobs.files.readGzip(ref, file)
      : jobs.files.read(ref, file, range);
  const stages: NodeJS.ReadWriteStream[] = gzip && storedGzip === undefined ? [createGzip()] : [];
  // Counts what goes to the connection (only when someone asks: no extra stage otherwise).
  if (audited) {
    // A Content-Length body is whole for the client with its last byte; a chunked one with its end.
    const expected = gzip ? storedGzip : range ? range.end - range.start + 1 : size;
    stages.push(
      new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          sent += chunk.length;
          if (expected !== undefined && sent >= expected) reportSent();
          callback(null, chunk);
        },
        flush(callback) {
          reportSent();
          callback();
        },
      }),
    );
  }
  // A client going away ends the pipeline; nothing more can be answered then. A long transfer
  // paced by the client is background work: searches need not give way to it.
  await inBackground(req, () => pipeline([body, ...stages, res]).catch(() => undefined));
}
