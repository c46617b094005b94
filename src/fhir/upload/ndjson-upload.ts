import type { Request, RequestHandler, Response } from 'express';
import multer from 'multer';
import { isSmartUser } from '../../auth/access/access.js';
import { FhirError } from '../../http/http-error.js';
import { RequestActivity } from '../audit/audit-activity.js';
import type { FhirContext } from '../context.js';
import { loadNdjson, type NdjsonFileReport, type NdjsonLoadOptions } from './ndjson-loader.js';
import { outcomeOf, type OperationOutcome, type OutcomeIssue } from '../../http/outcome.js';

/** Limits of the multipart NDJSON upload. */
export interface NdjsonUploadOptions extends NdjsonLoadOptions {
  /** Largest file, in bytes (413 above; lines before the limit stay loaded). @default 1073741824 (1 GiB) */
  maxFileSize?: number;
  /** Most files per request (413 above). @default 20 */
  maxFiles?: number;
}

const REPORT = 'fhirPlatformKitNdjsonReport';

type UploadedFile = Express.Multer.File & { [REPORT]?: NdjsonFileReport };

function multerError(error: unknown): unknown {
  if (error instanceof multer.MulterError) {
    const tooMuch = [
      'LIMIT_FILE_SIZE',
      'LIMIT_FILE_COUNT',
      'LIMIT_PART_COUNT',
      'LIMIT_FIELD_COUNT',
      'LIMIT_FIELD_VALUE',
    ];
    return tooMuch.includes(error.code)
      ? new FhirError(413, 'too-costly', `Upload limit reached: ${error.message}`, { cause: error })
      : new FhirError(400, 'invalid', `Malformed upload: ${error.message}`, { cause: error });
  }
  if (
    error instanceof Error &&
    !(error instanceof FhirError) &&
    /multipart|form|boundary/i.test(error.message)
  ) {
    return new FhirError(400, 'invalid', 'Malformed multipart/form-data body', { cause: error });
  }
  return error;
}

/** The OperationOutcome answering an upload: one information issue per file, then every bad line. */
export function uploadOutcome(reports: NdjsonFileReport[]): OperationOutcome {
  const issues: OutcomeIssue[] = [];
  for (const r of reports) {
    issues.push({
      severity: r.failed > 0 ? 'warning' : 'information',
      code: r.failed > 0 ? 'incomplete' : 'informational',
      details: { text: `${r.file}: ${r.lines} lines, ${r.loaded} loaded, ${r.failed} failed` },
      location: [r.file],
    });
  }
  for (const r of reports) issues.push(...r.issues);
  return outcomeOf(issues);
}

/**
 * Middleware for `POST [base]` with `multipart/form-data`: every file part (any field name) is an NDJSON
 * file streamed into the project through a multer storage engine that never holds a file in memory.
 * Answers 200 with an OperationOutcome reporting each file and each rejected line
 * (`location: ["<file>:<line>"]`). `contextOf` gives the request's FHIR context. A SMART user other
 * than a Practitioner is refused (403); a Practitioner's lines stay within its scopes' reach. With `audit`, the
 * writes of the whole upload are collected and handed to it once, before the answer.
 */
export function ndjsonUploadHandler(
  contextOf: (req: Request) => FhirContext,
  options: NdjsonUploadOptions = {},
  audit?: (req: Request, res: Response, activity: RequestActivity) => void,
): RequestHandler {
  // This handler's own map: the writes of each upload in flight.
  const activities = new WeakMap<Request, RequestActivity>();
  const engine: multer.StorageEngine = {
    _handleFile(req, file, callback) {
      let ctx: FhirContext;
      try {
        ctx = contextOf(req);
      } catch (error) {
        file.stream.resume();
        callback(error);
        return;
      }
      const activity = activities.get(req);
      const load = activity ? { ...options, activity } : options;
      loadNdjson(ctx, file.originalname || file.fieldname, file.stream, load).then(
        (report) => callback(null, { size: report.lines, [REPORT]: report } as Partial<Express.Multer.File>),
        (error: unknown) => {
          file.stream.resume();
          callback(error);
        },
      );
    },
    _removeFile(_req, _file, callback) {
      // Loaded lines are committed resources, not temporary files: nothing to remove.
      callback(null);
    },
  };
  const upload = multer({
    storage: engine,
    limits: {
      fileSize: options.maxFileSize ?? 1024 * 1024 * 1024,
      files: options.maxFiles ?? 20,
      fields: 50,
      fieldSize: 64 * 1024,
    },
  }).any();
  return (req, res, next) => {
    let principal;
    try {
      principal = contextOf(req).principal;
    } catch (error) {
      next(error);
      return;
    }
    // Loading data in bulk is a Practitioner's job: a patient or related person adds resources one
    // by one (their writes are limited to their patients' compartments either way).
    if (isSmartUser(principal) && !principal.fhirUser.startsWith('Practitioner/')) {
      next(new FhirError(403, 'forbidden', 'NDJSON upload is not open to this user'));
      return;
    }
    const activity = audit ? new RequestActivity() : undefined;
    if (activity) activities.set(req, activity);
    upload(req, res, (error?: unknown) => {
      // Lines loaded before a failure (a file over the limit) are written: recorded either way.
      if (activity) audit?.(req, res, activity);
      if (error) {
        next(multerError(error));
        return;
      }
      const files = (Array.isArray(req.files) ? req.files : []) as UploadedFile[];
      const reports = files.flatMap((f) => (f[REPORT] ? [f[REPORT]] : []));
      if (reports.length === 0) {
        next(new FhirError(400, 'required', 'The upload holds no file'));
        return;
      }
      res
        .status(200)
        .type('application/fhir+json')
        .send(JSON.stringify(uploadOutcome(reports)));
    });
  };
}
