import type { Request, RequestHandler, Response, Router } from 'express';
import type { ScimUserEvent } from '../audit/events.js';
import { recordSafely } from '../audit/record-safely.js';
import type { AuditTrail } from '../audit/trail.js';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal } from '../http/authenticate.js';
import type { ErrorLogger } from '../http/error-rendering.js';
import { methodNotAllowed, sendScim } from '../http/protocol-responses.js';
import { requestParty } from '../http/request-actor.js';
import type { UserRecord } from '../storage/types.js';
import { parseAttributeList, projectScimAttributes } from './attributes.js';
import { entityTagMatches, parseEntityTags } from './entity-tags.js';
import { readListQuery, searchRequestBody } from './list-query.js';
import { listResponse } from './list-response.js';
import type { ScimResourceSchemas } from './schema.js';
import { userEtag, userToScim } from './user-mapping.js';
import type { ScimUserService, ScimUserSettings } from './user-service.js';

/** What the user routes need of the SCIM router. */
export interface UserRouteDeps {
  service: ScimUserService;
  schemas: ScimResourceSchemas;
  /** Most resources one list or search response holds. */
  maxResults: number;
  /** Parses a SCIM (or JSON) body within the router's limit. */
  body: RequestHandler;
  /** The request's project settings over the router's. */
  settingsOf: (projectId: string) => Promise<ScimUserSettings>;
  /** The absolute URL of a user. */
  userUrl: (req: Request, id: string) => string;
  auditTrail: AuditTrail | undefined;
  onError: ErrorLogger | undefined;
}

const USERS = /^\/Users\/?$/;
const USERS_SEARCH = /^\/Users\/\.search\/?$/;
const USER = /^\/Users\/([^/]+)\/?$/;

/** The caller's project (the router admits project administrators only). */
const projectOf = (res: Response) => getPrincipal(res).projectId!;

const ifMatch = (req: Request) => parseEntityTags(req.get('if-match'));

/** The SearchRequest of a `POST .search` (RFC 7644 §3.4.3). */
const searchBody = (req: Request) => searchRequestBody(req.body);

/**
 * Mounts the Users endpoints (RFC 7644 §3) on the SCIM router: `/Users` (GET search, POST
 * create), `/Users/.search` (POST), `/Users/{id}` (GET, PUT, PATCH, DELETE). Other methods answer
 * 405.
 */
export function mountUserRoutes(router: Router, deps: UserRouteDeps): void {
  const { service, schemas, body, settingsOf, userUrl } = deps;

  /** Records one SCIM user action (before the answer: the journal write is synchronous). */
  const auditUser = (
    req: Request,
    res: Response,
    action: ScimUserEvent['action'],
    user: { id: string; userType?: string; profileId?: string },
  ) => {
    if (!deps.auditTrail) return;
    const profile = user.userType && user.profileId ? { profile: `${user.userType}/${user.profileId}` } : {};
    const event = {
      kind: 'scim-user',
      action,
      userId: user.id,
      ...profile,
      ...requestParty(getPrincipal(res), req),
    } as const;
    recordSafely(deps.auditTrail, event, (error) => deps.onError?.(error, req));
  };

  /** Renders one user with the request's attribute selection, ETag and status. */
  const sendUser = (
    req: Request,
    res: Response,
    status: number,
    record: UserRecord,
    settings: ScimUserSettings,
  ) => {
    const doc = userToScim(record, {
      location: userUrl(req, record.id),
      echoUserName: settings.echoUserName,
    });
    const selection = {
      attributes: parseAttributeList(req.query.attributes),
      excludedAttributes: parseAttributeList(req.query.excludedAttributes),
    };
    res.setHeader('ETag', userEtag(record));
    if (status === 201) res.setHeader('Location', userUrl(req, record.id));
    sendScim(res, status, projectScimAttributes(doc, selection, schemas));
  };

  const search = (params: (req: Request) => Record<string, unknown>) =>
    asyncHandler(async (req, res) => {
      const query = readListQuery(params(req), schemas, deps.maxResults);
      const projectId = projectOf(res);
      const settings = await settingsOf(projectId);
      const result = await service.search(projectId, query, (id) => userUrl(req, id), settings);
      sendScim(res, 200, listResponse(result.resources, result.totalResults, query.startIndex));
    });

  const create = asyncHandler(async (req, res) => {
    const settings = await settingsOf(projectOf(res));
    const record = await service.create(projectOf(res), req.body, settings);
    auditUser(req, res, 'create', record);
    sendUser(req, res, 201, record, settings);
  });

  const read = asyncHandler(async (req, res) => {
    const settings = await settingsOf(projectOf(res));
    const record = await service.read(projectOf(res), req.params[0]!);
    const ifNoneMatch = parseEntityTags(req.get('if-none-match'));
    if (ifNoneMatch && entityTagMatches(ifNoneMatch, record.version)) {
      res.setHeader('ETag', userEtag(record));
      res.status(304).end();
      return;
    }
    sendUser(req, res, 200, record, settings);
  });

  const replace = asyncHandler(async (req, res) => {
    const settings = await settingsOf(projectOf(res));
    const record = await service.replace(projectOf(res), req.params[0]!, req.body, ifMatch(req), settings);
    auditUser(req, res, record.active ? 'update' : 'deactivate', record);
    sendUser(req, res, 200, record, settings);
  });

  const patch = asyncHandler(async (req, res) => {
    const id = req.params[0]!;
    const settings = await settingsOf(projectOf(res));
    const record = await service.patch(
      projectOf(res),
      id,
      req.body,
      userUrl(req, id),
      ifMatch(req),
      settings,
    );
    auditUser(req, res, record.active ? 'update' : 'deactivate', record);
    sendUser(req, res, 200, record, settings);
  });

  const remove = asyncHandler(async (req, res) => {
    await service.delete(projectOf(res), req.params[0]!, ifMatch(req));
    auditUser(req, res, 'delete', { id: req.params[0]! });
    res.status(204).end();
  });

  router
    .route(USERS)
    .get(search((req) => req.query as Record<string, unknown>))
    .post(body, create)
    .all(methodNotAllowed('GET, POST', 'scim'));
  router.route(USERS_SEARCH).post(body, search(searchBody)).all(methodNotAllowed('POST', 'scim'));
  router
    .route(USER)
    .get(read)
    .put(body, replace)
    .patch(body, patch)
    .delete(remove)
    .all(methodNotAllowed('GET, PUT, PATCH, DELETE', 'scim'));
}
