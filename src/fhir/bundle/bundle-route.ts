import type { Request, Response, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { contentTypeOf } from '../../http/body.js';
import { HttpError } from '../../http/http-error.js';
import { FHIR_JSON, methodNotAllowed } from '../../http/protocol-responses.js';
import { sizeInBytes } from '../../common/options.js';
import { RequestActivity } from '../audit/audit-activity.js';
import { processBundle } from './batch.js';
import { bundleBytes } from './bundle-response.js';
import { readBundleStream } from './bundle-stream.js';
import { ndjsonUploadHandler } from '../upload/ndjson-upload.js';
import { parsePrefer, returnPreference } from '../prefer.js';
import type { FhirRouteDeps } from '../route-deps.js';

/**
 * A JSON body (of a type the router accepts, UTF-8, not compressed) whose declared length is over
 * `limit`: one the batch/transaction route parses as a stream.
 */
function isLargeJson(req: Request, limit: number): boolean {
  const length = Number(req.headers['content-length']);
  if (!(length > limit)) return false;
  const { type, charset } = contentTypeOf(req.headers['content-type']);
  if (type !== FHIR_JSON && type !== 'application/json') return false;
  const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
  return (charset === 'utf-8' || charset === 'utf8') && encoding === 'identity';
}

/**
 * Mounts `POST /` on the FHIR router: a `batch` or `transaction` Bundle (parsed as a stream when
 * over the body limit, up to `streamedBundleLimit`), or `multipart/form-data` NDJSON files. Other
 * methods answer 405.
 */
export function mountBundleRoute(router: Router, deps: FhirRouteDeps): void {
  const { config, secured, contextOf, audit, auditActivity } = deps;
  const bodyLimitBytes = sizeInBytes(config.bodyLimit);
  const upload = ndjsonUploadHandler(
    contextOf,
    {
      ...config.upload,
      maxJsonDepth: config.maxJsonDepth,
      ...(config.onError ? { onError: config.onError } : {}),
    },
    audit ? auditActivity : undefined,
  );

  async function answerBundle(req: Request, res: Response, bundle: unknown): Promise<void> {
    const prefer = parsePrefer(req.headers.prefer);
    const answer = returnPreference(prefer, config.defaultReturn);
    const activity = audit ? new RequestActivity() : undefined;
    const response = await processBundle(contextOf(req), config.storage, bundle, {
      baseUrl: deps.base(req),
      maxEntries: config.maxBundleEntries,
      returnMinimal: answer === 'minimal',
      returnOutcome: answer === 'OperationOutcome',
      conditionalDelete: config.conditionalDelete,
      maxJsonDepth: config.maxJsonDepth,
      patchLimits: config.patchLimits,
      search: { ...deps.search, lenient: prefer.handling === 'lenient' },
      ...(config.onError ? { onError: config.onError } : {}),
      ...(activity ? { activity } : {}),
    });
    if (activity) auditActivity(req, res, activity);
    // Ended directly, not through `send`: an ETag of a transaction's answer means nothing, and
    // hashing a response of many megabytes took as long as encoding it.
    const bytes = bundleBytes(response);
    res
      .status(200)
      .set({ 'Content-Type': `${FHIR_JSON}; charset=utf-8`, 'Content-Length': String(bytes.length) });
    res.end(bytes);
  }

  router
    .route('/')
    .post(
      ...secured,
      (req, res, next) => {
        if (req.is('multipart/form-data')) upload(req, res, next);
        else next();
      },
      asyncHandler(async (req, res, next) => {
        // A Bundle over the body limit is parsed as a stream (never held whole as text), up to its own limit.
        if (!isLargeJson(req, bodyLimitBytes)) return next();
        if (Number(req.headers['content-length']) > config.streamedBundleLimit) {
          throw new HttpError(413, 'ERR_BODY_TOO_LARGE', 'The Bundle is over the streamed Bundle limit');
        }
        const bundle = await readBundleStream(req, {
          maxBytes: config.streamedBundleLimit,
          maxDepth: config.maxJsonDepth,
          maxEntries: config.maxBundleEntries,
        });
        await answerBundle(req, res, bundle);
      }),
      deps.body,
      asyncHandler(async (req, res) => answerBundle(req, res, req.body)),
    )
    .all(methodNotAllowed('POST'));
}
