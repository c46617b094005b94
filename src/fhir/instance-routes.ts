import type { Router } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { contentTypeOf } from '../http/body.js';
import { methodNotAllowed, sendFhir } from '../http/protocol-responses.js';
import { readAccess } from './audit/audit-activity.js';
import { nativeBinaryContent, sendNativeBinary, wantsNativeBinary } from './binary-content.js';
import { authorize, deleteResource, readResource, updateResource } from './interactions.js';
import { patchResource } from './patch/patch-resource.js';
import { patchDocumentOf } from './patch/patch-document.js';
import { setVersionHeaders, stringParam, type FhirRouteDeps } from './route-deps.js';
import { notModified, parseIfMatch } from './versioning.js';

/**
 * Mounts the instance-level routes on the FHIR router: read (`If-None-Match`,
 * `If-Modified-Since`; a Binary in its own content type when the request asks for no FHIR format),
 * update, delete and patch of `[type]/[id]` (`If-Match` versioning). Other methods answer 405.
 */
export function mountInstanceRoutes(router: Router, deps: FhirRouteDeps): void {
  const { config, guard, secured, securedRead, contextOf, audit, auditAccess, sendUpdated } = deps;
  const { body, patchBody } = deps;

  // --- instance level: read, update, delete ---
  router
    .route('/:type/:id')
    .get(
      guard,
      ...securedRead,
      asyncHandler(async (req, res) => {
        const resource = await readResource(
          contextOf(req),
          stringParam(req.params.type),
          stringParam(req.params.id),
        );
        // A Binary asked for in its own format: refused (406) before anything is sent or recorded.
        const native = wantsNativeBinary(req) ? nativeBinaryContent(req, resource) : undefined;
        if (audit) auditAccess(req, res, readAccess('read', resource));
        setVersionHeaders(res, resource);
        if (notModified(resource, req.get('If-None-Match'), req.get('If-Modified-Since'))) {
          res.status(304).end();
          return;
        }
        if (native) sendNativeBinary(res, native);
        else sendFhir(res, 200, resource);
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
}
