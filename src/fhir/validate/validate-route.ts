import type { Request, RequestHandler, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { methodNotAllowed, sendFhir } from '../../http/protocol-responses.js';
import { isResourceType } from '../../common/resource-types.js';
import type { FhirRouteDeps } from '../route-deps.js';
import { validateOperation, type ValidateRequest } from './validate-operation.js';

/** The canonical URL of the R4 OperationDefinition of `$validate`. */
export const VALIDATE_DEFINITION = 'http://hl7.org/fhir/OperationDefinition/Resource-validate';

// RegExp routes, as for `$everything`: Express 4 reads `$` in a route string as an anchor, and
// `req.path` keeps `%24` undecoded.
const TYPE_PATH = /^\/([^/]+)\/(?:\$|%24)validate\/?$/;
const INSTANCE_PATH = /^\/([^/]+)\/([^/]+)\/(?:\$|%24)validate\/?$/;

interface Parameter {
  name?: unknown;
  resource?: unknown;
  valueCode?: unknown;
  valueString?: unknown;
  valueUri?: unknown;
  valueCanonical?: unknown;
}

const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/** A `Parameters` body's `resource`, `mode` and `profile`; undefined when the body is the resource. */
function parametersOf(body: unknown, type: string): Partial<ValidateRequest> | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const { resourceType, parameter } = body as { resourceType?: unknown; parameter?: unknown };
  if (resourceType !== 'Parameters' || !Array.isArray(parameter)) return undefined;
  const named = (name: string): Parameter | undefined =>
    (parameter as Parameter[]).find((p) => typeof p === 'object' && p !== null && p.name === name);
  const resource = named('resource')?.resource;
  // A Parameters resource validated as itself, unless it wraps one.
  if (type === 'Parameters' && resource === undefined) return undefined;
  const mode = named('mode');
  const profile = named('profile');
  const out: Partial<ValidateRequest> = {};
  if (resource !== undefined) out.resource = resource;
  const modeValue = text(mode?.valueCode) ?? text(mode?.valueString);
  if (modeValue !== undefined) out.mode = modeValue;
  const profileValue = text(profile?.valueUri) ?? text(profile?.valueCanonical) ?? text(profile?.valueString);
  if (profileValue !== undefined) out.profile = profileValue;
  return out;
}

/** The `$validate` request of an HTTP request: URL, query (`mode`, `profile`) and body. */
function requestOf(req: Request, instance: boolean): ValidateRequest {
  const captures = req.params as unknown as Record<string, string | undefined>;
  const type = captures['0'] ?? '';
  const query = new URL(req.originalUrl, 'http://x').searchParams;
  const request: ValidateRequest = { type };
  if (instance) request.id = captures['1'] ?? '';
  const mode = query.get('mode');
  const profile = query.get('profile');
  if (mode !== null) request.mode = mode;
  if (profile !== null) request.profile = profile;
  if (req.method !== 'POST') return request;
  const body: unknown = req.body;
  const wrapped = parametersOf(body, type);
  return wrapped ? { ...request, ...wrapped } : { ...request, resource: body };
}

/**
 * Mounts `POST /{type}/$validate`, `POST /{type}/{id}/$validate` and `GET /{type}/{id}/$validate`
 * (also spelled `%24validate`) on `router`, before its `/:type/:id` routes. The body is the
 * resource, or a `Parameters` with `resource`, `mode` and `profile` (also read from the query).
 * Validation that ran answers 200 with its OperationOutcome, valid or not, as the operation's
 * definition says; a request that cannot be validated answers its 4xx.
 * @see https://hl7.org/fhir/R4/resource-operation-validate.html
 */
export function mountValidate(router: Router, deps: FhirRouteDeps): void {
  const { secured, contextOf, body } = deps;
  // An unknown type is another router's URL when the FHIR router falls through.
  const known: RequestHandler = (req, _res, next) => {
    const type = (req.params as unknown as Record<string, string | undefined>)['0'] ?? '';
    if (!isResourceType(type) && deps.config.fallthrough) return next('router');
    next();
  };
  const handle = (instance: boolean): RequestHandler =>
    asyncHandler(async (req, res) => {
      sendFhir(res, 200, await validateOperation(contextOf(req), requestOf(req, instance)));
    });
  router
    .route(TYPE_PATH)
    .post(known, ...secured, body, handle(false))
    .all(known, methodNotAllowed('POST'));
  router
    .route(INSTANCE_PATH)
    .get(known, ...secured, handle(true))
    .post(known, ...secured, body, handle(true))
    .all(known, methodNotAllowed('GET, POST'));
}
