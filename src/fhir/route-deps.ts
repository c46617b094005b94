import type { Request, RequestHandler, Response } from 'express';
import { requirePrincipal } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { defaultErrorLogger } from '../http/error-rendering.js';
import { fhirJsonOnly } from '../http/fhir-format.js';
import { FhirError } from '../http/http-error.js';
import { outcomeOf } from '../http/outcome.js';
import { FHIR_JSON, sendFhir } from '../http/protocol-responses.js';
import { requestRecorder, type RequestRecorder } from '../http/request-recorder.js';
import { isResourceType, isValidId } from '../common/resource-types.js';
import type { StoredResource } from '../storage/types.js';
import type { FhirAccessDetails, RequestActivity } from './audit/audit-activity.js';
import { wantsNativeBinary } from './binary-content.js';
import type { FhirContext } from './context.js';
import { JSON_PATCH } from './patch/patch-document.js';
import { parsePrefer, returnPreference } from './prefer.js';
import { requestContexts } from './request-context.js';
import type { ResolvedFhirRouterOptions } from './router-options.js';
import { etagOf } from './versioning.js';

/** What the route modules of the FHIR router share: built once per router by {@link fhirRouteDeps}. */
export interface FhirRouteDeps {
  config: ResolvedFhirRouterOptions;
  /** Checks the type and id in the URL (unknown type: 404, or passed on with `fallthrough`; bad id: 400). */
  guard: RequestHandler;
  /** Refuses a request that wants no JSON (406), authenticates the caller and builds its FHIR context. */
  secured: RequestHandler[];
  /**
   * `secured` for a read or vread: a Binary read that asks for the Binary's own content type is let
   * through, for its handler to answer or refuse (src/fhir/binary-content.ts).
   */
  securedRead: RequestHandler[];
  /** The FHIR context `secured` built for a request. */
  contextOf: (req: Request) => FhirContext;
  /** Absolute URL of the FHIR base of a request. */
  base: (req: Request) => string;
  /** `_count` without one, and its largest value. */
  search: { defaultCount: number; maxCount: number };
  /** A FHIR JSON body, within the router's size and depth limits. */
  body: RequestHandler;
  /** A PATCH body: JSON Patch or a FHIRPath Patch `Parameters`. */
  patchBody: RequestHandler;
  /** Records an event; undefined when no audit trail records (the events are then not even built). */
  audit: RequestRecorder | undefined;
  /** Records a read of data, when there is one to record. */
  auditAccess: (req: Request, res: Response, access: FhirAccessDetails | undefined) => void;
  /** Records the events of a Bundle or an upload. */
  auditActivity: (req: Request, res: Response, activity: RequestActivity) => void;
  /** Answers a write: version headers, `Location`, and the body `Prefer: return` asks for. */
  sendWrite: (req: Request, res: Response, status: number, resource: StoredResource) => void;
  /** Records an update (plain, conditional or PATCH) in the audit trail, then answers it. */
  sendUpdated: (req: Request, res: Response, result: { status: number; resource: StoredResource }) => void;
}

/** A route parameter as a string (`''` when absent). */
export function stringParam(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** The query string of the request as sent, without `?`. */
export function queryString(req: Request): string {
  const at = req.originalUrl.indexOf('?');
  return at === -1 ? '' : req.originalUrl.slice(at + 1);
}

/** `ETag` and `Last-Modified` of a stored resource. */
export function setVersionHeaders(res: Response, resource: StoredResource): void {
  res.setHeader('ETag', etagOf(resource.meta.versionId));
  const modified = new Date(resource.meta.lastUpdated);
  if (!Number.isNaN(modified.getTime())) res.setHeader('Last-Modified', modified.toUTCString());
}

/** Unknown types (and `$operation` ids) are 404 here, or passed on with `fallthrough`. */
function resourceGuard(fallthrough: boolean): RequestHandler {
  return (req, _res, next) => {
    const type = stringParam(req.params.type);
    const id = req.params.id === undefined ? undefined : stringParam(req.params.id);
    const foreign = !isResourceType(type) || (id !== undefined && id.startsWith('$'));
    if (foreign) {
      if (fallthrough) return next('router');
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
}

/** The shared parts of a FHIR router: its guards, bodies, contexts, audit recorders and write answers. */
export function fhirRouteDeps(config: ResolvedFhirRouterOptions): FhirRouteDeps {
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
  const base = (req: Request): string => absoluteUrl(req, '', config.baseUrl);
  const audit = requestRecorder(config.auditTrail, config.onError ?? defaultErrorLogger);
  const auditAccess = (req: Request, res: Response, access: FhirAccessDetails | undefined): void => {
    if (access) audit?.(req, res, access);
  };
  const auditActivity = (req: Request, res: Response, activity: RequestActivity): void => {
    for (const details of activity.events()) audit?.(req, res, details);
  };
  const { withContext, contextOf } = requestContexts(config);

  const sendWrite = (req: Request, res: Response, status: number, resource: StoredResource): void => {
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
      // The validation's warnings (binding findings), which only this answer shows.
      const warnings = contextOf(req).validationWarnings ?? [];
      sendFhir(
        res,
        status,
        outcomeOf([{ severity: 'information', code: 'informational', details: { text } }, ...warnings]),
      );
    } else {
      sendFhir(res, status, resource);
    }
  };
  const sendUpdated = (
    req: Request,
    res: Response,
    result: { status: number; resource: StoredResource },
  ): void => {
    audit?.(req, res, {
      kind: 'fhir-write',
      interaction: 'update',
      references: [`${result.resource.resourceType}/${result.resource.id}`],
    });
    sendWrite(req, res, result.status, result.resource);
  };

  return {
    config,
    guard: resourceGuard(config.fallthrough),
    secured: [fhirJsonOnly(), authenticate, withContext],
    securedRead: [fhirJsonOnly(wantsNativeBinary), authenticate, withContext],
    contextOf,
    base,
    search: { defaultCount: config.defaultCount, maxCount: config.maxCount },
    body,
    patchBody,
    audit,
    auditAccess,
    auditActivity,
    sendWrite,
    sendUpdated,
  };
}
