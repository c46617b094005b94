import { randomUUID } from 'node:crypto';
import type { Request, RequestHandler, Response, Router } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { methodNotAllowed, sendFhir } from '../http/protocol-responses.js';
import type { StoredResource } from '../storage/types.js';
import { searchAccess, type FhirAccessDetails } from './audit-activity.js';
import type { BundleJson } from './bundle-response.js';
import { allPatientsEverything, patientEverything, type EverythingPage } from './everything.js';
import {
  encodeEverythingCursor,
  parseEverythingParams,
  type EverythingParamOptions,
  type EverythingParams,
} from './everything-params.js';
import { formBody } from './form-body.js';
import type { FhirContext } from './interactions.js';
import { outcomeOf } from '../http/outcome.js';
import { parsePrefer } from './prefer.js';

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

/**
 * The searchset Bundle of a page: a `self` link (as asked) and a `next` link (the same parameters
 * with the `_cursor` of the page's last entry) when more follows; no `total` (counting would walk
 * the whole record).
 */
function everythingBundle(
  url: string,
  params: EverythingParams,
  page: EverythingPage,
  baseUrl: string,
): BundleJson {
  const link = (cursor: string | undefined): string => {
    const query = new URLSearchParams(params.applied);
    query.set('_count', String(params.count));
    if (cursor !== undefined) query.set('_cursor', cursor);
    return `${url}?${query.toString()}`;
  };
  const self = params.cursor ? encodeEverythingCursor(params.cursor) : undefined;
  const links = [{ relation: 'self', url: link(self) }];
  if (page.next) links.push({ relation: 'next', url: link(encodeEverythingCursor(page.next)) });
  const entry: Record<string, unknown>[] = page.entries.map(({ resource, mode }) => ({
    fullUrl: `${baseUrl}/${resource.resourceType}/${resource.id}`,
    resource,
    search: { mode },
  }));
  if (params.ignored.length > 0) {
    const issues = params.ignored.map((name) => ({
      severity: 'warning' as const,
      code: 'not-supported' as const,
      details: { text: `Parameter ${name} is not supported and was ignored` },
      expression: [name],
    }));
    entry.push({ resource: outcomeOf(issues), search: { mode: 'outcome' } });
  }
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    meta: { lastUpdated: new Date().toISOString() },
    type: 'searchset',
    link: links,
    entry,
  };
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
      const ctx = deps.contextOf(req);
      const captures = req.params as unknown as Record<string, string | undefined>;
      const id = instance ? (captures['0'] ?? '') : undefined;
      const page =
        id === undefined
          ? await allPatientsEverything(ctx, params)
          : await patientEverything(ctx, id, params);
      const resources: StoredResource[] = page.entries.map((e) => e.resource);
      const query = `$everything${params.applied.length > 0 ? `?${new URLSearchParams(params.applied).toString()}` : ''}`;
      const details = searchAccess('Patient', query, resources);
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
