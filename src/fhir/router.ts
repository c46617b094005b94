import { admitted } from './costly-reads.js';
import express, {
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
  type Router,
} from 'express';
import { requestRecorder } from '../http/request-recorder.js';
import { asyncHandler } from '../http/async-handler.js';
import { requirePrincipal } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { contentTypeOf, jsonBody } from '../http/body.js';
import { defaultErrorLogger, fhirErrorHandler } from '../http/error-rendering.js';
import { FhirError, HttpError } from '../http/http-error.js';
import { FHIR_JSON, methodNotAllowed, sendFhir } from '../http/protocol-responses.js';
import { loadSearchRegistry } from '../search/definitions.js';
import type { StoredResource } from '../storage/types.js';
import {
  AUDITED_REFERENCES,
  readAccess,
  RequestActivity,
  searchAccess,
  type FhirAccessDetails,
} from './audit-activity.js';
import { processBundle } from './batch.js';
import { bundleBytes } from './bundle-response.js';
import { readBundleStream } from './bundle-stream.js';
import { mountEverything } from './everything-route.js';
import {
  authorize,
  conditionalDelete,
  conditionalPatch,
  conditionalUpdate,
  createResource,
  deleteResource,
  patchResource,
  readResource,
  searchResources,
  updateResource,
} from './interactions.js';
import { formBody } from './form-body.js';
import { mountHistoryRoutes } from './history-routes.js';
import { ndjsonUploadHandler } from './ndjson-upload.js';
import { outcomeOf } from '../http/outcome.js';
import { JSON_PATCH, patchDocumentOf } from './patch-document.js';
import { parsePrefer, returnPreference } from './prefer.js';
import { isResourceType, isValidId } from '../common/resource-types.js';
import { sizeInBytes } from '../common/options.js';
import { resolveFhirRouterOptions, type FhirRouterOptions } from './router-options.js';
import { mountMetadata } from './metadata-route.js';
import { requestContexts } from './request-context.js';
import { buildSearchBundle } from './search-bundle.js';
import { r4StructureValidator } from './structure-validator.js';
import { etagOf, notModified, parseIfMatch } from './versioning.js';

function setVersionHeaders(res: Response, resource: StoredResource): void {
  res.setHeader('ETag', etagOf(resource.meta.versionId));
  const modified = new Date(resource.meta.lastUpdated);
  if (!Number.isNaN(modified.getTime())) res.setHeader('Last-Modified', modified.toUTCString());
}

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

function stringParam(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** The query string of the request as sent, without `?`. */
function queryString(req: Request): string {
  const at = req.originalUrl.indexOf('?');
  return at === -1 ? '' : req.originalUrl.slice(at + 1);
}

/**
 * The FHIR R4 data plane, mounted by default at `/fhir/R4`:
 *
 * - `GET /metadata`: the CapabilityStatement (public, no authentication).
 * - `POST /{type}` (server-assigned id; `If-None-Exist` conditional create), `GET|PUT|PATCH|DELETE
 *   /{type}/{id}` (`ETag` / `If-Match` versioning; `If-None-Match` / `If-Modified-Since` conditional
 *   read; JSON Patch or FHIRPath Patch), `PUT|DELETE /{type}?…` (conditional update and delete),
 *   `GET /{type}?…` and `POST /{type}/_search` (form body) searchset Bundles (a `total` when `_total`
 *   asks for one, an exact one at most `searchLimits.maxAccurateTotal`), included resources and
 *   keyset paging links.
 * - `GET /{type}/{id}/_history/{vid}` (vread of any version the store keeps; 410 for a deletion) and
 *   the `history` Bundles of `GET /_history`, `/{type}/_history` and `/{type}/{id}/_history`
 *   (`_since`, `_at`, `_count`, `next` links by cursor).
 * - `POST /` with a `batch` or `transaction` Bundle (JSON), or with `multipart/form-data` NDJSON files.
 *
 * Every request acts in the principal's project (403 without one) and asks `canAccess` per type and
 * action; every error is an OperationOutcome. Projects with `strictMode` validate writes against the
 * R4 structure definitions. See docs/fhir.md.
 * @see https://hl7.org/fhir/R4/http.html
 */
export function fhirRouter(options: FhirRouterOptions): Router {
  const config = resolveFhirRouterOptions(options, r4StructureValidator);
  const { storage } = config;
  // Warmed now, so that the first search or `/metadata` does not wait for it (about 0.4 s). Not
  // awaited; a failure is retried, and reported, by the first request that needs the registry.
  loadSearchRegistry().catch(() => undefined);
  const router = express.Router();
  const authenticate = requirePrincipal(config.authenticate, config.storage);
  const body = jsonBody({
    types: [FHIR_JSON, 'application/json'],
    limit: config.bodyLimit,
    maxDepth: config.maxJsonDepth,
  });
  const patchBody = jsonBody({
    types: [JSON_PATCH, FHIR_JSON, 'application/json'],
    limit: config.bodyLimit,
    maxDepth: config.maxJsonDepth,
  });
  const bodyLimitBytes = sizeInBytes(config.bodyLimit);
  const searchOptions = { defaultCount: config.defaultCount, maxCount: config.maxCount };
  const base = (req: Request): string => absoluteUrl(req, '', config.baseUrl);
  // Undefined when no trail records: the events are then not even built.
  const audit = requestRecorder(config.auditTrail, config.onError ?? defaultErrorLogger);
  const auditAccess = (req: Request, res: Response, access: FhirAccessDetails | undefined): void => {
    if (access) audit?.(req, res, access);
  };
  const auditActivity = (req: Request, res: Response, activity: RequestActivity): void => {
    for (const details of activity.events()) audit?.(req, res, details);
  };

  /** Unknown types (and `$operation` ids) are 404 here, or passed on with `fallthrough`. */
  const guard: RequestHandler = (req, _res, next) => {
    const type = stringParam(req.params.type);
    const id = req.params.id === undefined ? undefined : stringParam(req.params.id);
    const foreign = !isResourceType(type) || (id !== undefined && id.startsWith('$'));
    if (foreign) {
      if (config.fallthrough) return next('router');
      if (!isResourceType(type))
        return next(new FhirError(404, 'not-found', `Unknown resource type ${type}`));
      return next(new FhirError(404, 'not-found', `Unknown operation ${id}`));
    }
    if (id !== undefined && !isValidId(id)) {
      return next(
        new FhirError(400, 'invalid', 'The id does not match the FHIR id syntax', { expression: ['id'] }),
      );
    }
    next();
  };

  /** A type-level PUT or DELETE is conditional: without a query there is nothing to address (405). */
  const withCriteria: RequestHandler = (req, res, next) => {
    if (queryString(req) === '') return methodNotAllowed('GET, POST')(req, res, next);
    next();
  };

  /** With `conditionalDelete: 'off'`, `DELETE [type]?criteria` is not a route (405). */
  const conditionalDeleteOn: RequestHandler = (req, res, next) => {
    if (config.conditionalDelete === 'off') return methodNotAllowed('GET, POST')(req, res, next);
    next();
  };

  const { withContext, contextOf } = requestContexts(config);
  const secured = [authenticate, withContext];

  // --- metadata (public) ---
  mountMetadata(router, config, base);

  // --- vread and history: before the type and instance routes, which would take `_history` for a type or id ---
  mountHistoryRoutes(router, {
    storage,
    guard,
    secured,
    contextOf,
    base,
    search: searchOptions,
    auditAccess: audit ? auditAccess : undefined,
    setVersionHeaders,
  });

  // --- system level: batch / transaction Bundle, or multipart NDJSON upload ---
  const upload = ndjsonUploadHandler(
    contextOf,
    {
      ...config.upload,
      maxJsonDepth: config.maxJsonDepth,
      ...(config.onError ? { onError: config.onError } : {}),
    },
    audit ? auditActivity : undefined,
  );
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
      body,
      asyncHandler(async (req, res) => answerBundle(req, res, req.body)),
    )
    .all(methodNotAllowed('POST'));

  async function answerBundle(req: Request, res: Response, bundle: unknown): Promise<void> {
    const prefer = parsePrefer(req.headers.prefer);
    const answer = returnPreference(prefer, config.defaultReturn);
    const activity = audit ? new RequestActivity() : undefined;
    const response = await processBundle(contextOf(req), storage, bundle, {
      baseUrl: base(req),
      maxEntries: config.maxBundleEntries,
      returnMinimal: answer === 'minimal',
      returnOutcome: answer === 'OperationOutcome',
      conditionalDelete: config.conditionalDelete,
      maxJsonDepth: config.maxJsonDepth,
      patchLimits: config.patchLimits,
      search: { ...searchOptions, lenient: prefer.handling === 'lenient' },
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

  /** A type-level search of `params` (`query`: what the audit trail records), answered as a searchset. */
  async function answerSearch(
    req: Request,
    res: Response,
    params: Iterable<readonly [string, string]>,
    query: string,
  ): Promise<void> {
    const type = stringParam(req.params.type);
    const prefer = parsePrefer(req.headers.prefer);
    const result = await admitted(contextOf(req), (ctx) =>
      searchResources(ctx, type, params, { ...searchOptions, lenient: prefer.handling === 'lenient' }),
    );
    if (audit)
      auditAccess(req, res, searchAccess(type, query, [...result.page.resources, ...result.included]));
    sendFhir(res, 200, buildSearchBundle(base(req), type, result));
  }

  // --- Patient/$everything and Patient/{id}/$everything (before `/:type/:id`) ---
  mountEverything(router, {
    secured,
    contextOf,
    base,
    paging: searchOptions,
    bodyLimit: config.bodyLimit,
    audit: audit && ((req, res, details) => auditAccess(req, res, details)),
  });

  // --- type level: search (GET, or POST _search with a form body), create ---
  router
    .route('/:type/_search')
    .post(
      guard,
      ...secured,
      formBody(config.bodyLimit),
      asyncHandler(async (req, res) => {
        // The URL's parameters and the form's together, as R4 allows.
        const params = [
          ...new URL(req.originalUrl, 'http://x').searchParams,
          ...(req.body as URLSearchParams),
        ];
        await answerSearch(req, res, params, new URLSearchParams(params).toString());
      }),
    )
    .all(guard, methodNotAllowed('POST'));
  router
    .route('/:type')
    .get(
      guard,
      ...secured,
      asyncHandler(async (req, res) => {
        await answerSearch(req, res, new URL(req.originalUrl, 'http://x').searchParams, queryString(req));
      }),
    )
    .post(
      guard,
      ...secured,
      body,
      asyncHandler(async (req, res) => {
        const type = stringParam(req.params.type);
        const ifNoneExist = req.get('If-None-Exist');
        const result = await createResource(contextOf(req), type, req.body, {
          ...(ifNoneExist !== undefined ? { ifNoneExist } : {}),
        });
        const { resource } = result;
        // A conditional create that found its match wrote nothing: it answered an existing resource.
        if (result.status === 200) auditAccess(req, res, audit && readAccess('read', resource));
        else
          audit?.(req, res, {
            kind: 'fhir-write',
            interaction: 'create',
            references: [`${resource.resourceType}/${resource.id}`],
          });
        sendWrite(req, res, result.status, result.resource);
      }),
    )
    .put(
      guard,
      ...secured,
      withCriteria,
      body,
      asyncHandler(async (req, res) => {
        const ifMatch = parseIfMatch(req.get('If-Match'));
        const result = await conditionalUpdate(
          contextOf(req),
          stringParam(req.params.type),
          queryString(req),
          req.body,
          ifMatch !== undefined ? { ifMatch } : {},
        );
        sendUpdated(req, res, result);
      }),
    )
    .delete(
      guard,
      // Who is calling first: a caller without credentials gets 401 whatever the URL's shape.
      ...secured,
      withCriteria,
      conditionalDeleteOn,
      asyncHandler(async (req, res) => {
        const references = await conditionalDelete(
          contextOf(req),
          stringParam(req.params.type),
          queryString(req),
          {
            mode: config.conditionalDelete === 'multiple' ? 'multiple' : 'single',
            maxMatches: config.maxBundleEntries,
          },
        );
        if (references.length > 0) {
          audit?.(req, res, {
            kind: 'fhir-write',
            interaction: 'delete',
            references: references.slice(0, AUDITED_REFERENCES),
            count: references.length,
          });
        }
        res.status(204).end();
      }),
    )
    .patch(
      guard,
      ...secured,
      withCriteria,
      patchBody,
      asyncHandler(async (req, res) => {
        const ifMatch = parseIfMatch(req.get('If-Match'));
        const type = stringParam(req.params.type);
        // A caller without the right to update gets 403, whatever its patch document holds.
        authorize(contextOf(req), type, 'update');
        const patch = patchDocumentOf(
          contentTypeOf(req.headers['content-type']).type,
          req.body,
          config.patchLimits,
        );
        const result = await conditionalPatch(
          contextOf(req),
          type,
          queryString(req),
          patch,
          ifMatch !== undefined ? { ifMatch } : {},
        );
        sendUpdated(req, res, result);
      }),
    )
    .all(guard, methodNotAllowed('GET, POST'));

  // --- instance level: read, update, delete ---
  router
    .route('/:type/:id')
    .get(
      guard,
      ...secured,
      asyncHandler(async (req, res) => {
        const resource = await readResource(
          contextOf(req),
          stringParam(req.params.type),
          stringParam(req.params.id),
        );
        if (audit) auditAccess(req, res, readAccess('read', resource));
        setVersionHeaders(res, resource);
        if (notModified(resource, req.get('If-None-Match'), req.get('If-Modified-Since'))) {
          res.status(304).end();
          return;
        }
        sendFhir(res, 200, resource);
      }),
    )
    .put(
      guard,
      ...secured,
      body,
      asyncHandler(async (req, res) => {
        const ifMatch = parseIfMatch(req.get('If-Match'));
        const result = await updateResource(
          contextOf(req),
          stringParam(req.params.type),
          stringParam(req.params.id),
          req.body,
          ifMatch !== undefined ? { ifMatch } : {},
        );
        sendUpdated(req, res, result);
      }),
    )
    .delete(
      guard,
      ...secured,
      asyncHandler(async (req, res) => {
        const ifMatch = parseIfMatch(req.get('If-Match'));
        const type = stringParam(req.params.type);
        const id = stringParam(req.params.id);
        await deleteResource(contextOf(req), type, id, ifMatch !== undefined ? { ifMatch } : {});
        audit?.(req, res, { kind: 'fhir-write', interaction: 'delete', references: [`${type}/${id}`] });
        res.status(204).end();
      }),
    )
    .patch(
      guard,
      ...secured,
      patchBody,
      asyncHandler(async (req, res) => {
        const ifMatch = parseIfMatch(req.get('If-Match'));
        // A caller without the right to update gets 403, whatever its patch document holds.
        authorize(contextOf(req), stringParam(req.params.type), 'update');
        const patch = patchDocumentOf(
          contentTypeOf(req.headers['content-type']).type,
          req.body,
          config.patchLimits,
        );
        const result = await patchResource(
          contextOf(req),
          stringParam(req.params.type),
          stringParam(req.params.id),
          patch,
          ifMatch !== undefined ? { ifMatch } : {},
        );
        sendUpdated(req, res, result);
      }),
    )
    .all(guard, methodNotAllowed('GET, PUT, PATCH, DELETE'));

  /** Records an update (plain, conditional or PATCH) in the audit trail, then answers it. */
  function sendUpdated(
    req: Request,
    res: Response,
    result: { status: number; resource: StoredResource },
  ): void {
    audit?.(req, res, {
      kind: 'fhir-write',
      interaction: 'update',
      references: [`${result.resource.resourceType}/${result.resource.id}`],
    });
    sendWrite(req, res, result.status, result.resource);
  }

  function sendWrite(req: Request, res: Response, status: number, resource: StoredResource): void {
    setVersionHeaders(res, resource);
    res.setHeader(
      'Location',
      `${base(req)}/${resource.resourceType}/${resource.id}/_history/${resource.meta.versionId}`,
    );
    const answer = returnPreference(parsePrefer(req.headers.prefer), config.defaultReturn);
    if (answer === 'minimal') {
      res.status(status).end();
    } else if (answer === 'OperationOutcome') {
      const text = status === 201 ? 'Created' : 'OK';
      sendFhir(
        res,
        status,
        outcomeOf([{ severity: 'information', code: 'informational', details: { text } }]),
      );
    } else {
      sendFhir(res, status, resource);
    }
  }

  if (!config.fallthrough) {
    router.use((_req: Request, _res: Response, next: NextFunction) => {
      next(new FhirError(404, 'not-found', 'No FHIR route for this URL'));
    });
  }
  router.use(fhirErrorHandler(config.onError));
  return router;
}
