import express, { type Request, type RequestHandler, type Router } from 'express';
import { booleanOption, oneOf, positiveInteger } from '../common/options.js';
import { getPrincipal, requirePrincipal } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { scimErrorHandler } from '../http/error-rendering.js';
import { ScimError } from '../http/http-error.js';
import { SCIM_JSON } from '../http/protocol-responses.js';
import {
  checkRouterOptions,
  type BodyLimitOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../http/router-options.js';
import type { ProfileType } from '../storage/types.js';
import { mountDiscoveryRoutes } from './discovery-routes.js';
import { projectScimSettings } from './project-settings.js';
import { mountGroupRoutes } from './group-routes.js';
import { scimGroupService } from './group-service.js';
import { mountRootSearchRoute } from './root-search-route.js';
import { GROUP_RESOURCE_SCHEMAS, USER_RESOURCE_SCHEMAS, USER_TYPES } from './schema.js';
import { mountUserRoutes } from './user-routes.js';
import { scimUserService, type ScimUserSettings } from './user-service.js';

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
 * SCIM is for project administrators (or the super admin acting in a project): others get 403,
 * naming what is missing (the `project:admin` scope, or a project), so that an identity provider's
 * operator can fix the token (RFC 6750 §3.1 `insufficient_scope`).
 */
const projectAdminsOnly: RequestHandler = (_req, res, next) => {
  const principal = getPrincipal(res);
  if (!principal.projectId) {
    next(new ScimError(403, undefined, 'SCIM acts in a project: this principal is in none'));
    return;
  }
  if (!(principal.admin || principal.superAdmin)) {
    const message = 'SCIM is for project administrators: the access token lacks the project:admin scope';
    const challenge = 'Bearer error="insufficient_scope", scope="project:admin"';
    next(new ScimError(403, undefined, message, { headers: { 'WWW-Authenticate': challenge } }));
    return;
  }
  next();
};

/**
 * SCIM 2.0 Users and Groups API (RFC 7643, RFC 7644) for identity providers such as Okta and
 * Microsoft Entra ID; mount it at `/scim/v2`. Callers must be project admins (or super admins
 * acting in a project); users are provisioned into the caller's project, each linked to a FHIR
 * profile resource (`Patient`, `Practitioner` or `RelatedPerson`, per `userType` or
 * `defaultUserType`) created with it; each group is a FHIR `Group` of the project, with the same
 * id, whose members are the users' profiles (FHIR clients may read it, not change it).
 *
 * Routes: `/Users` and `/Groups` (GET search, POST create), `/Users/{id}` and `/Groups/{id}` (GET,
 * PUT, PATCH, DELETE), `/Users/.search`, `/Groups/.search` and `/.search` (users and groups; POST),
 * `/ServiceProviderConfig`, `/ResourceTypes[/{id}]`, `/Schemas[/{id}]`. Errors are SCIM Error
 * JSON; every answer is `application/scim+json`.
 */
export function scimRouter(options: ScimRouterOptions): Router {
  const config = resolveScimRouterOptions(options);
  const { storage, maxResults, echoUserName, defaultUserType } = config;
  const schemas = USER_RESOURCE_SCHEMAS;
  const routerSettings: ScimUserSettings = { echoUserName, ...(defaultUserType ? { defaultUserType } : {}) };
  const url = (req: Request, path: string) => absoluteUrl(req, path, config.baseUrl);

  const userUrl = (req: Request, id: string) => url(req, `/Users/${encodeURIComponent(id)}`);
  const body = jsonBody({ types: [SCIM_JSON, 'application/json'], limit: config.bodyLimit });

  const router = express.Router();
  router.use(requirePrincipal(config.authenticate, storage), projectAdminsOnly);
  const writes = { maxOperations: config.maxPatchOperations, maxAttempts: config.maxWriteAttempts };
  const users = scimUserService({ storage, schemas, echoUserName, ...writes });
  const groups = scimGroupService({ storage, ...writes });
  const settingsOf = (projectId: string) => projectScimSettings(storage, projectId, routerSettings);
  const linksOf = (req: Request) => ({
    groupUrl: (id: string) => url(req, `/Groups/${encodeURIComponent(id)}`),
    userUrl: (id: string) => userUrl(req, id),
  });
  const { auditTrail, onError } = config;
  mountUserRoutes(router, {
    service: users,
    schemas,
    maxResults,
    body,
    settingsOf,
    userUrl,
    auditTrail,
    onError,
  });
  mountGroupRoutes(router, { service: groups, maxResults, body, linksOf, auditTrail, onError });
  mountRootSearchRoute(router, {
    users,
    userSchemas: schemas,
    groups,
    maxResults,
    body,
    settingsOf,
    linksOf,
  });
  const types = [
    { name: 'User', endpoint: '/Users', description: 'User Account', schemas },
    { name: 'Group', endpoint: '/Groups', description: 'Group', schemas: GROUP_RESOURCE_SCHEMAS },
  ];
  mountDiscoveryRoutes(router, { types, maxResults, documentationUri: config.documentationUri, url });
  router.use((_req, _res, next) => {
    next(new ScimError(404, undefined, 'Not found'));
  });
  router.use(scimErrorHandler(config.onError));
  return router;
}
