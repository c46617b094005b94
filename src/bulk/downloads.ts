import { createReadStream } from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type { NextFunction, Request, Response } from 'express';
import type { Principal } from '../auth/principal.js';
import { requireProjectId } from '../http/authenticate.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type { ExportJobManager } from './export-jobs.js';
import { canExport } from './export-plan.js';
import { findJobFile } from './manifest.js';

const FILE_NAME = /^[A-Za-z]+-[0-9]+\.ndjson$/;

/** One file of a completed export that a principal may download. */
export interface ExportFile {
  jobId: string;
  /** The job's directory. */
  dir: string;
  /** The file name, as listed in the manifest. */
  file: string;
}

/**
 * The file `file` of job `jobId` when `principal` may download it (Bulk Data "File request"): a
 * file listed in the manifest of a completed job of the principal's project, of a type the
 * principal may export (error and deleted files also to the job's owner). Otherwise
 * `NotFoundError`, or 403 `forbidden` for a type the token does not cover.
 */
export async function findExportFile(
  jobs: ExportJobManager,
  principal: Principal,
  jobId: string,
  file: string,
): Promise<ExportFile> {
  const job = await jobs.visibleJob(requireProjectId(principal), undefined, jobId);
  // Only a name listed in the job's manifest is ever joined to the job directory.
  const entry = job.status === 'completed' && FILE_NAME.test(file) ? findJobFile(job, file) : undefined;
  if (!entry) throw new NotFoundError('No such export file');
  const allowed =
    entry.kind === 'output'
      ? canExport(principal, entry.type)
      : principal.id === job.ownerId || canExport(principal, entry.type);
  if (!allowed) throw new FhirError(403, 'forbidden', `The access token does not cover ${entry.type}`);
  return { jobId: job.id, dir: jobs.jobDir(job.id), file };
}

/**
 * Streams an export file as `application/fhir+ndjson`: gzip-compressed when the client accepts it
 * and asks for the whole file, otherwise as stored, with `Range` support. The download counts as
 * in flight (retention does not remove the job) until the response closes. A file gone meanwhile
 * is a `NotFoundError`, thrown or passed to `next`.
 */
export async function sendExportFile(
  req: Request,
  res: Response,
  next: NextFunction,
  jobs: ExportJobManager,
  { jobId, dir, file }: ExportFile,
): Promise<void> {
  const end = jobs.beginDownload(jobId);
  res.on('close', end);
  res.type('application/fhir+ndjson').set('Cache-Control', 'private, no-store');
  // gzip is applied to whole-file downloads only; a Range request is answered uncompressed, so
  // that byte offsets always refer to the stored file.
  if (req.headers.range === undefined && req.acceptsEncodings('gzip', 'identity') === 'gzip') {
    const stream = createReadStream(path.join(dir, file));
    await new Promise<void>((resolve, reject) => {
      stream.once('open', () => resolve());
      stream.once('error', reject);
    }).catch(() => {
      end();
      throw new NotFoundError('No such export file');
    });
    res.status(200).set('Content-Encoding', 'gzip').set('Vary', 'Accept-Encoding');
    await pipeline(stream, createGzip(), res).catch(() => undefined);
    return;
  }
  res.set('Vary', 'Accept-Encoding');
  res.sendFile(file, { root: dir, dotfiles: 'deny', cacheControl: false }, (error?: Error) => {
    if (!error || res.headersSent) return;
    end();
    next(new NotFoundError('No such export file'));
  });
}
