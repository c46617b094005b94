import type { Request, RequestHandler, Response, Router } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { contentTypeOf } from '../http/body.js';
import { methodNotAllowed, sendFhir } from '../http/protocol-responses.js';
import { AUDITED_REFERENCES, readAccess, searchAccess } from './audit/audit-activity.js';
import { formBody } from './search/form-body.js';
import { authorize, conditionalDelete, conditionalUpdate, createResource } from './interactions.js';
import { conditionalPatch } from './patch/patch-resource.js';
import { searchResources } from './search/search-resources.js';
import { patchDocumentOf } from './patch/patch-document.js';
import { parsePrefer } from './prefer.js';
import { queryString, stringParam, type FhirRouteDeps } from './route-deps.js';
import { buildSearchBundle } from './search/search-bundle.js';
import { parseIfMatch } from './versioning.js';

/**
 * Mounts the type-level routes on the FHIR router: search (`GET [type]?…`, `POST [type]/_search`
 * with a form body), create (`If-None-Exist`), and the conditional update, delete and patch of
 * `[type]?criteria`. Other methods answer 405.
 */
export function mountTypeRoutes(router: Router, deps: FhirRouteDeps): void {
  const { config, guard, secured, contextOf, base, audit, auditAccess, sendWrite, sendUpdated } = deps;
  const { body, patchBody } = deps;
  const searchOptions = deps.search;

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

  /** A type-level search of `params` (`query`: what the audit trail records), answered as a searchset. */
  async function answerSearch(
    req: Request,
    res: Response,
    params: Iterable<readonly [string, string]>,
    query: string,
  ): Promise<void> {
    const type = stringParam(req.params.type);
    const prefer = parsePrefer(req.headers.prefer);
    // It takes a turn of the project once parsed and checked (`searchResources`).
    const result = await searchResources(contextOf(req), type, params, {
      ...searchOptions,
      lenient: prefer.handling === 'lenient',
    });
    if (audit)
      auditAccess(req, res, searchAccess(type, query, [...result.page.resources, ...result.included]));
    sendFhir(res, 200, buildSearchBundle(base(req), type, result));
  }

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
}
