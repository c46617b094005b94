import type { Request, RequestHandler, Router } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal } from '../http/authenticate.js';
import { methodNotAllowed, sendScim } from '../http/protocol-responses.js';
import type { GroupLinks } from './group-search.js';
import type { ScimGroupService } from './group-service.js';
import { searchRequestBody } from './list-query.js';
import { listResponse } from './list-response.js';
import { searchServerRoot, type RootSearchType } from './root-search.js';
import { GROUP_RESOURCE_SCHEMAS, type ScimResourceSchemas } from './schema.js';
import type { ScimUserService, ScimUserSettings } from './user-service.js';

/** What the root search needs of the SCIM router. */
export interface RootSearchRouteDeps {
  users: ScimUserService;
  userSchemas: ScimResourceSchemas;
  groups: ScimGroupService;
  /** Most resources one search response holds. */
  maxResults: number;
  /** Parses a SCIM (or JSON) body within the router's limit. */
  body: RequestHandler;
  /** The request's project settings over the router's. */
  settingsOf: (projectId: string) => Promise<ScimUserSettings>;
  /** The absolute URLs of a group and of a user, for a request. */
  linksOf: (req: Request) => GroupLinks;
}

const ROOT_SEARCH = /^\/\.search\/?$/;

/**
 * Mounts `POST /.search` (RFC 7644 §3.4.3) on the SCIM router: a SearchRequest over the caller's
 * project's users and groups together (see `searchServerRoot`). Other methods answer 405.
 */
export function mountRootSearchRoute(router: Router, deps: RootSearchRouteDeps): void {
  const { users, groups } = deps;
  const search = asyncHandler(async (req, res) => {
    const projectId = getPrincipal(res).projectId!;
    const settings = await deps.settingsOf(projectId);
    const links = deps.linksOf(req);
    const types: RootSearchType[] = [
      {
        schemas: deps.userSchemas,
        search: (query) => users.search(projectId, query, links.userUrl, settings),
      },
      { schemas: GROUP_RESOURCE_SCHEMAS, search: (query) => groups.search(projectId, query, links) },
    ];
    const result = await searchServerRoot(searchRequestBody(req.body), types, deps.maxResults);
    sendScim(res, 200, listResponse(result.resources, result.totalResults, result.startIndex));
  });
  router.route(ROOT_SEARCH).post(deps.body, search).all(methodNotAllowed('POST', 'scim'));
}
