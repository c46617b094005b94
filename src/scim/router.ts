import express, { type Request, type RequestHandler, type Response, type Router } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal, requirePrincipal } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { scimErrorHandler } from '../http/error-rendering.js';
import { ScimError } from '../http/http-error.js';
import { booleanOption, oneOf, positiveInteger } from '../common/options.js';
import { SCIM_JSON, methodNotAllowed, sendScim } from '../http/protocol-responses.js';
import {
  checkRouterOptions,
  type BodyLimitOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../http/router-options.js';
import type { ProfileType } from '../storage/types.js';
import { parseAttributeList, projectScimAttributes } from './attributes.js';
import { schemaResources, serviceProviderConfig, userResourceType } from './discovery.js';
import { isPlainObject } from './json-access.js';
import { readListQuery } from './list-query.js';
import { projectScimSettings } from './project-settings.js';
import { LIST_RESPONSE_SCHEMA_ID, USER_RESOURCE_SCHEMAS, USER_TYPES } from './schema.js';
import { userEtag, userToScim } from './user-mapping.js';
import type { ScimUserEvent } from '../audit/events.js';
import { recordSafely } from '../audit/record-safely.js';
import { requestParty } from '../http/request-actor.js';
import { entityTagMatches, parseEntityTags, scimUserService, type ScimUserSettings } from './user-service.js';

/** Options of `scimRouter`. */
export interface ScimRouterOptions extends CommonRouterOptions, BodyLimitOptions {
  /**
   * Most resources one list or search response holds; a larger `count` is lowered to it.
   * Advertised as `filter.maxResults` in `/ServiceProviderConfig`.
   * @default 200
   */
  maxResults?: number;
  /**
   * Answer `userName` with the name the client provided instead of the id of the linked FHIR
   * profile resource, for identity providers that demand an echo (Entra ID, its SCIM validator).
   * With it, creates and replaces must carry a `userName` (RFC 7643 §4.1.1), else 400
   * `invalidValue`. A project's own setting (`Project/{id}/$settings`) wins.
   * @default false
   */
  echoUserName?: boolean;
  /**
   * Profile type (`Patient`, `Practitioner` or `RelatedPerson`) of a user created without
   * `userType`, so identity providers need no custom attribute mapping; with it, a PUT without
   * `userType` keeps the user's type. Unset, `userType` is required (400 `invalidValue`). A
   * project's own setting (`Project/{id}/$settings`) wins.
   * @default undefined
   */
  defaultUserType?: ProfileType;
  /**
   * Most operations in one PATCH request.
   * @default 1000
   */
  maxPatchOperations?: number;
  /**
   * Attempts of a write that lost a race with another write when the request carried no
   * `If-Match` (with one, the loser answers 412).
   * @default 5
   */
  maxWriteAttempts?: number;
  /**
   * `documentationUri` advertised in `/ServiceProviderConfig`.
   * @default undefined
   */
  documentationUri?: string;
}

const USERS = /^\/Users\/?$/;
const USERS_SEARCH = /^\/Users\/\.search\/?$/;
const ROOT_SEARCH = /^\/\.search\/?$/;
const USER = /^\/Users\/([^/]+)\/?$/;
const SPC = /^\/ServiceProviderConfig\/?$/;
const RESOURCE_TYPES = /^\/ResourceTypes\/?$/;
const RESOURCE_TYPE = /^\/ResourceTypes\/([^/]+)\/?$/;
const SCHEMAS = /^\/Schemas\/?$/;
const SCHEMA = /^\/Schemas\/([^/]+)\/?$/;

function listResponse(
  resources: unknown[],
  totalResults: number,
  startIndex: number,
): Record<string, unknown> {
  return {
    schemas: [LIST_RESPONSE_SCHEMA_ID],
    totalResults,
    startIndex,
    itemsPerPage: resources.length,
    Resources: resources,
  };
}

/** Options with every default filled in. */
export type ResolvedScimRouterOptions = ScimRouterOptions &
  Required<
    Pick<
      ScimRouterOptions,
      'maxResults' | 'echoUserName' | 'bodyLimit' | 'maxPatchOperations' | 'maxWriteAttempts'
    >
  >;

const OWNER = 'scimRouter';

const SCIM_ROUTER_KEYS: OwnOptionKeys<ScimRouterOptions> = {
  maxResults: true,
  echoUserName: true,
  defaultUserType: true,
  maxPatchOperations: true,
  maxWriteAttempts: true,
  documentationUri: true,
};
// SCIM counts are safe integers.
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Fills in defaults and fails fast on bad options. */
export function resolveScimRouterOptions(options: ScimRouterOptions): ResolvedScimRouterOptions {
  const { onError, bodyLimit } = checkRouterOptions(OWNER, options, SCIM_ROUTER_KEYS, {
    authenticate: true,
    bodyLimit: '1mb',
  });
  const maxResults = positiveInteger(OWNER, 'maxResults', options.maxResults, 200, MAX_SAFE);
  const echoUserName = booleanOption(OWNER, 'echoUserName', options.echoUserName, false);
  oneOf(OWNER, 'defaultUserType', options.defaultUserType, USER_TYPES);
  return {
    ...options,
    maxResults,
    echoUserName,
    bodyLimit,
    maxPatchOperations: positiveInteger(
      OWNER,
      'maxPatchOperations',
      options.maxPatchOperations,
      1000,
      MAX_SAFE,
    ),
    maxWriteAttempts: positiveInteger(OWNER, 'maxWriteAttempts', options.maxWriteAttempts, 5, MAX_SAFE),
    onError,
  };
}

/**
 * SCIM 2.0 Users API (RFC 7643, RFC 7644) for identity providers such as Okta and Microsoft
 * Entra ID; mount it at `/scim/v2`. Callers must be project admins (or super admins acting in a
 * project); users are provisioned into the caller's project, each linked to a FHIR profile resource
 * (`Patient`, `Practitioner` or `RelatedPerson`, per `userType` or `defaultUserType`) created with it.
 *
 * Routes: `/Users` (GET search, POST create), `/Users/{id}` (GET, PUT, PATCH, DELETE),
 * `/Users/.search` and `/.search` (POST), `/ServiceProviderConfig`, `/ResourceTypes[/{id}]`,
 * `/Schemas[/{id}]`. Errors are SCIM Error JSON; every answer is `application/scim+json`.
 */
export function scimRouter(options: ScimRouterOptions): Router {
  const config = resolveScimRouterOptions(options);
  const { maxResults, echoUserName, defaultUserType } = config;
  const schemas = USER_RESOURCE_SCHEMAS;
  const routerSettings: ScimUserSettings = { echoUserName, ...(defaultUserType ? { defaultUserType } : {}) };
  const service = scimUserService({
    storage: config.storage,
    schemas,
    echoUserName,
    maxOperations: config.maxPatchOperations,
    maxAttempts: config.maxWriteAttempts,
  });
  const body = jsonBody({ types: [SCIM_JSON, 'application/json'], limit: config.bodyLimit });
  const url = (req: Request, path: string) => absoluteUrl(req, path, config.baseUrl);
  const userUrl = (req: Request, id: string) => url(req, `/Users/${encodeURIComponent(id)}`);
  const settingsOf = (projectId: string) => projectScimSettings(config.storage, projectId, routerSettings);

  const router = express.Router();
  router.use(requirePrincipal(config.authenticate, config.storage));
  router.use((_req, res, next) => {
    const principal = getPrincipal(res);
    if (!principal.projectId || !(principal.admin || principal.superAdmin)) {
      next(new ScimError(403, undefined, 'SCIM is for project administrators'));
      return;
    }
    next();
  });
  const projectOf = (res: Response) => getPrincipal(res).projectId!;
  /** Records one SCIM user action (before the answer: the journal write is synchronous). */
  const auditUser = (
    req: Request,
    res: Response,
    action: ScimUserEvent['action'],
    user: { id: string; userType?: string; profileId?: string },
  ) => {
    if (!config.auditTrail) return;
    recordSafely(
      config.auditTrail,
      {
        kind: 'scim-user',
        action,
        userId: user.id,
        ...(user.userType && user.profileId ? { profile: `${user.userType}/${user.profileId}` } : {}),
        ...requestParty(getPrincipal(res), req),
      },
      (error) => config.onError?.(error, req),
    );
  };

  /** Renders one user with the request's attribute selection, ETag and status. */
  const sendUser = (
    req: Request,
    res: Response,
    status: number,
    record: Parameters<typeof userToScim>[0],
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
      const query = readListQuery(params(req), schemas, maxResults);
      const projectId = projectOf(res);
      const settings = await settingsOf(projectId);
      const result = await service.search(projectId, query, (id) => userUrl(req, id), settings);
      sendScim(res, 200, listResponse(result.resources, result.totalResults, query.startIndex));
    });
  const searchBody = (req: Request): Record<string, unknown> => {
    if (!isPlainObject(req.body))
      throw new ScimError(400, 'invalidSyntax', 'The body must be a SearchRequest object');
    return req.body;
  };
  const ifMatch = (req: Request) => parseEntityTags(req.get('if-match'));

  router
    .route(USERS)
    .get(search((req) => req.query as Record<string, unknown>))
    .post(
      body,
      asyncHandler(async (req, res) => {
        const settings = await settingsOf(projectOf(res));
        const record = await service.create(projectOf(res), req.body, settings);
        auditUser(req, res, 'create', record);
        sendUser(req, res, 201, record, settings);
      }),
    )
    .all(methodNotAllowed('GET, POST', 'scim'));
  router.route(USERS_SEARCH).post(body, search(searchBody)).all(methodNotAllowed('POST', 'scim'));
  router.route(ROOT_SEARCH).post(body, search(searchBody)).all(methodNotAllowed('POST', 'scim'));
  router
    .route(USER)
    .get(
      asyncHandler(async (req, res) => {
        const settings = await settingsOf(projectOf(res));
        const record = await service.read(projectOf(res), req.params[0]!);
        const ifNoneMatch = parseEntityTags(req.get('if-none-match'));
        if (ifNoneMatch && entityTagMatches(ifNoneMatch, record.version)) {
          res.setHeader('ETag', userEtag(record));
          res.status(304).end();
          return;
        }
        sendUser(req, res, 200, record, settings);
      }),
    )
    .put(
      body,
      asyncHandler(async (req, res) => {
        const settings = await settingsOf(projectOf(res));
        const record = await service.replace(
          projectOf(res),
          req.params[0]!,
          req.body,
          ifMatch(req),
          settings,
        );
        auditUser(req, res, record.active ? 'update' : 'deactivate', record);
        sendUser(req, res, 200, record, settings);
      }),
    )
    .patch(
      body,
      asyncHandler(async (req, res) => {
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
      }),
    )
    .delete(
      asyncHandler(async (req, res) => {
        await service.delete(projectOf(res), req.params[0]!, ifMatch(req));
        auditUser(req, res, 'delete', { id: req.params[0]! });
        res.status(204).end();
      }),
    )
    .all(methodNotAllowed('GET, PUT, PATCH, DELETE', 'scim'));

  // Discovery (RFC 7644 §4): a filter on these endpoints is 403.
  const noFilter: RequestHandler = (req, _res, next) => {
    if (req.query.filter !== undefined)
      next(new ScimError(403, undefined, 'Filtering is not supported here'));
    else next();
  };
  router
    .route(SPC)
    .get(noFilter, (req, res) => {
      sendScim(
        res,
        200,
        serviceProviderConfig(
          { maxResults, ...(config.documentationUri ? { documentationUri: config.documentationUri } : {}) },
          url(req, '/ServiceProviderConfig'),
        ),
      );
    })
    .all(methodNotAllowed('GET', 'scim'));
  const resourceTypes = (req: Request) => [userResourceType(schemas, url(req, '/ResourceTypes/User'))];
  router
    .route(RESOURCE_TYPES)
    .get(noFilter, (req, res) => {
      const all = resourceTypes(req);
      sendScim(res, 200, listResponse(all, all.length, 1));
    })
    .all(methodNotAllowed('GET', 'scim'));
  router
    .route(RESOURCE_TYPE)
    .get(noFilter, (req, res, next) => {
      const found = resourceTypes(req).find((t) => t.id === req.params[0]);
      if (found) sendScim(res, 200, found);
      else next(new ScimError(404, undefined, 'Unknown resource type'));
    })
    .all(methodNotAllowed('GET', 'scim'));
  const allSchemas = (req: Request) => schemaResources(schemas, (id) => url(req, `/Schemas/${id}`));
  router
    .route(SCHEMAS)
    .get(noFilter, (req, res) => {
      const all = allSchemas(req);
      sendScim(res, 200, listResponse(all, all.length, 1));
    })
    .all(methodNotAllowed('GET', 'scim'));
  router
    .route(SCHEMA)
    .get(noFilter, (req, res, next) => {
      const id = decodeURIComponent(req.params[0]!);
      const found = allSchemas(req).find(
        (s) => typeof s.id === 'string' && s.id.toLowerCase() === id.toLowerCase(),
      );
      if (found) sendScim(res, 200, found);
      else next(new ScimError(404, undefined, 'Unknown schema'));
    })
    .all(methodNotAllowed('GET', 'scim'));

  router.use((_req, _res, next) => {
    next(new ScimError(404, undefined, 'Not found'));
  });
  router.use(scimErrorHandler(config.onError));
  return router;
}
