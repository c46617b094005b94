import { admitted } from '../search/costly-reads.js';
import type { Request, RequestHandler, Response, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { methodNotAllowed, sendFhir } from '../../http/protocol-responses.js';
import type { StoredResource } from '../../storage/types.js';
import { searchAccess, type FhirAccessDetails } from '../audit/audit-activity.js';
import { allPatientsEverything, patientEverything } from './everything.js';
import { everythingBundle, everythingQuery } from './everything-bundle.js';
import { parseEverythingParams, type EverythingParamOptions } from './everything-params.js';
import { formBody } from '../search/form-body.js';
import type { FhirContext } from '../context.js';
import { parsePrefer } from '../prefer.js';

/** The canonical URL of the R4 OperationDefinition of `Patient/$everything`. */
export const PATIENT_EVERYTHING_DEFINITION = 'http://hl7.org/fhir/OperationDefinition/Patient-everything';

/** The CapabilityStatement contribution of `$everything` (on Patient). */
export const EVERYTHING_CAPABILITY = {
  operations: [{ name: 'everything', definition: PATIENT_EVERYTHING_DEFINITION, resourceTypes: ['Patient'] }],
};

// RegExp routes: Express 4 reads `$` in a route string as a regex anchor, and `req.path` keeps
// `%24` undecoded, so both spellings are matched.
const TYPE_PATH = /^\/Patient\/(?:\$|%24)everything\/?$/;
const INSTANCE_PATH = /^\/Patient\/([^/]+)\/(?:\$|%24)everything\/?$/;

/** What the `$everything` routes need of the FHIR router. */
export interface EverythingRouteDeps {
  /** Authentication and the request's FHIR context, run before the handler. */
  secured: RequestHandler[];
  contextOf(req: Request): FhirContext;
  /** Absolute URL of the FHIR base of a request. */
  base(req: Request): string;
  /** `_count` without one, and its largest value. */
  paging: { defaultCount: number; maxCount: number };
  bodyLimit: number | string;
  /** Records a read of patient data in the audit trail (undefined: no trail). */
  audit: ((req: Request, res: Response, details: FhirAccessDetails) => void) | undefined;
}

/** The parameters of the query string and, for a POST, of the form body. */
function paramsOf(req: Request): [string, string][] {
  const params = [...new URL(req.originalUrl, 'http://x').searchParams];
  if (req.method === 'POST') params.push(...(req.body as URLSearchParams));
  return params;
}

/**
 * Mounts `GET|POST /Patient/$everything` and `GET|POST /Patient/{id}/$everything` (also spelled
 * `%24everything`) on `router`: before the router's `/:type/:id` routes. A POST carries its
 * parameters as a form (`application/x-www-form-urlencoded`), like `_search`. Each page is recorded
 * in the audit trail as a search of Patient whose query is `$everything` and the parameters.
 * @see https://hl7.org/fhir/R4/patient-operation-everything.html
 */
export function mountEverything(router: Router, deps: EverythingRouteDeps): void {
  const form = formBody(deps.bodyLimit);
  const handle = (instance: boolean): RequestHandler =>
    asyncHandler(async (req, res) => {
      const options: EverythingParamOptions = {
        ...deps.paging,
        lenient: parsePrefer(req.headers.prefer).handling === 'lenient',
      };
      const params = parseEverythingParams(paramsOf(req), options);
      const captures = req.params as unknown as Record<string, string | undefined>;
      const id = instance ? (captures['0'] ?? '') : undefined;
      const page = await admitted(deps.contextOf(req), (ctx) =>
        id === undefined ? allPatientsEverything(ctx, params) : patientEverything(ctx, id, params),
      );
      const resources: StoredResource[] = page.entries.map((e) => e.resource);
      const details = searchAccess('Patient', everythingQuery(params), resources);
      if (details) deps.audit?.(req, res, details);
      const baseUrl = deps.base(req);
      const url = `${baseUrl}/Patient/${id === undefined ? '' : `${id}/`}$everything`;
      sendFhir(res, 200, everythingBundle(url, params, page, baseUrl));
    });
  for (const [path, instance] of [
    [TYPE_PATH, false],
    [INSTANCE_PATH, true],
  ] as const) {
    router
      .route(path)
      .get(...deps.secured, handle(instance))
      .post(...deps.secured, form, handle(instance))
      .all(methodNotAllowed('GET, POST'));
  }
}
