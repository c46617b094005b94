import type { Request, RequestHandler, Response, Router } from 'express';
import type { FhirWriteEvent } from '../audit/events.js';
import { recordSafely } from '../audit/record-safely.js';
import type { AuditTrail } from '../audit/trail.js';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal } from '../http/authenticate.js';
import type { ErrorLogger } from '../http/error-rendering.js';
import { methodNotAllowed, sendScim } from '../http/protocol-responses.js';
import { requestParty } from '../http/request-actor.js';
import type { StoredResource } from '../storage/types.js';
import { parseAttributeList, projectScimAttributes } from './attributes.js';
import { entityTagMatches, parseEntityTags } from './entity-tags.js';
import { groupEtag, groupToScim, groupVersion } from './group-mapping.js';
import type { GroupLinks } from './group-search.js';
import type { ScimGroupService } from './group-service.js';
import { readListQuery, searchRequestBody } from './list-query.js';
import { listResponse } from './list-response.js';
import { GROUP_RESOURCE_SCHEMAS } from './schema.js';

/** What the group routes need of the SCIM router. */
export interface GroupRouteDeps {
  service: ScimGroupService;
  /** Most resources one list or search response holds. */
  maxResults: number;
  /** Parses a SCIM (or JSON) body within the router's limit. */
  body: RequestHandler;
  /** The absolute URLs of a group and of a user, for a request. */
  linksOf: (req: Request) => GroupLinks;
  auditTrail: AuditTrail | undefined;
  onError: ErrorLogger | undefined;
}

const GROUPS = /^\/Groups\/?$/;
const GROUPS_SEARCH = /^\/Groups\/\.search\/?$/;
const GROUP = /^\/Groups\/([^/]+)\/?$/;

const schemas = GROUP_RESOURCE_SCHEMAS;

/** The caller's project (the router admits project administrators only). */
const projectOf = (res: Response) => getPrincipal(res).projectId!;

const ifMatch = (req: Request) => parseEntityTags(req.get('if-match'));

/**
 * Mounts the Groups endpoints (RFC 7644 §3, RFC 7643 §4.2) on the SCIM router: `/Groups` (GET
 * search, POST create), `/Groups/.search` (POST), `/Groups/{id}` (GET, PUT, PATCH, DELETE). Other
 * methods answer 405.
 */
export function mountGroupRoutes(router: Router, deps: GroupRouteDeps): void {
  const { service, body, linksOf } = deps;

  /** Records the write of the group's FHIR Group (before the answer: the journal write is synchronous). */
  const audit = (req: Request, res: Response, interaction: FhirWriteEvent['interaction'], id: string) => {
    if (!deps.auditTrail) return;
    const event: FhirWriteEvent = {
      kind: 'fhir-write',
      interaction,
      references: [`Group/${id}`],
      ...requestParty(getPrincipal(res), req),
    };
    recordSafely(deps.auditTrail, event, (error) => deps.onError?.(error, req));
  };

  /** Renders one group with the request's attribute selection, ETag and status. */
  const sendGroup = (req: Request, res: Response, status: number, group: StoredResource) => {
    const links = linksOf(req);
    const location = links.groupUrl(group.id);
    const doc = groupToScim(group, { location, userUrl: links.userUrl });
    const selection = {
      attributes: parseAttributeList(req.query.attributes),
      excludedAttributes: parseAttributeList(req.query.excludedAttributes),
    };
    res.setHeader('ETag', groupEtag(group));
    if (status === 201) res.setHeader('Location', location);
    sendScim(res, status, projectScimAttributes(doc, selection, schemas));
  };

  const search = (params: (req: Request) => Record<string, unknown>) =>
    asyncHandler(async (req, res) => {
      const query = readListQuery(params(req), schemas, deps.maxResults);
      const result = await service.search(projectOf(res), query, linksOf(req));
      sendScim(res, 200, listResponse(result.resources, result.totalResults, query.startIndex));
    });

  const create = asyncHandler(async (req, res) => {
    const group = await service.create(projectOf(res), req.body);
    audit(req, res, 'create', group.id);
    sendGroup(req, res, 201, group);
  });

  const read = asyncHandler(async (req, res) => {
    const group = await service.read(projectOf(res), req.params[0]!);
    const ifNoneMatch = parseEntityTags(req.get('if-none-match'));
    if (ifNoneMatch && entityTagMatches(ifNoneMatch, groupVersion(group))) {
      res.setHeader('ETag', groupEtag(group));
      res.status(304).end();
      return;
    }
    sendGroup(req, res, 200, group);
  });

  const replace = asyncHandler(async (req, res) => {
    const group = await service.replace(projectOf(res), req.params[0]!, req.body, ifMatch(req));
    audit(req, res, 'update', group.id);
    sendGroup(req, res, 200, group);
  });

  const patch = asyncHandler(async (req, res) => {
    const id = req.params[0]!;
    const group = await service.patch(projectOf(res), id, req.body, linksOf(req), ifMatch(req));
    audit(req, res, 'update', group.id);
    sendGroup(req, res, 200, group);
  });

  const remove = asyncHandler(async (req, res) => {
    await service.delete(projectOf(res), req.params[0]!, ifMatch(req));
    audit(req, res, 'delete', req.params[0]!);
    res.status(204).end();
  });

  router
    .route(GROUPS)
    .get(search((req) => req.query as Record<string, unknown>))
    .post(body, create)
    .all(methodNotAllowed('GET, POST', 'scim'));
  router
    .route(GROUPS_SEARCH)
    .post(
      body,
      search((req) => searchRequestBody(req.body)),
    )
    .all(methodNotAllowed('POST', 'scim'));
  router
    .route(GROUP)
    .get(read)
    .put(body, replace)
    .patch(body, patch)
    .delete(remove)
    .all(methodNotAllowed('GET, PUT, PATCH, DELETE', 'scim'));
}
