import express, {
  type ErrorRequestHandler,
  type Request,
  type RequestHandler,
  type Response,
  type Router,
} from 'express';
import type { Principal } from '../auth/principal.js';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal, requirePrincipal } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { fhirErrorHandler } from '../http/error-rendering.js';
import { FhirError, HttpError } from '../http/http-error.js';
import type { CommonRouterOptions } from '../http/router-options.js';
import { NotFoundError } from '../storage/errors.js';
import type { ClientRecord, ProjectRecord, Storage } from '../storage/types.js';
import { clientApplicationResource } from './client-application.js';
import {
  initProject,
  ownerDefaultsFromUser,
  parseInitParameters,
  type OwnerDefaults,
} from './init-project.js';
import {
  checkClientScope,
  parseNewClientParameters,
  registerClient,
  type NewClientRules,
} from './new-client.js';
import { invalidParameter, readParameters } from './parameters.js';
import { projectAdminAccess, superAdminOnly } from './project-access.js';
import { projectResource } from './project-resource.js';
import { parseSettingsParameters, updateProjectSettings } from './project-settings.js';
import { InvalidOptionError } from '../errors.js';

/** Options of `projectRouter`. */
export interface ProjectRouterOptions extends CommonRouterOptions {
  /**
   * Who may call `Project/$init`: return true to allow the principal, e.g. `() => true` for any
   * authenticated principal (others get 403). A user principal becomes the owner: the new project's admin user is
   * created with its `userName`, name and e-mail (the `owner*` parameters win); for any other
   * principal the admin user is made from the `owner*` parameters alone.
   * @default (principal) => principal.superAdmin
   */
  allowInit?: (principal: Principal) => boolean;
  /**
   * Scope a client registered by `$new-client` gets when the request gives none.
   * @default 'system/*.*'
   */
  defaultClientScope?: string;
  /**
   * Smallest `accessTokenLifetime` (seconds) `$new-client` accepts.
   * @default 60
   */
  minAccessTokenLifetime?: number;
  /**
   * Largest `accessTokenLifetime` (seconds) `$new-client` accepts.
   * @default 86400
   */
  maxAccessTokenLifetime?: number;
  /**
   * Accept `http:` `jwksUri`s on any host. Without it, `http:` is accepted only on `localhost`,
   * `127.0.0.1` and `[::1]` (SMART Backend Services requires TLS).
   * @default false
   */
  allowHttpJwksUri?: boolean;
  /**
   * Largest request body, bytes or a size string.
   * @default '1mb'
   */
  bodyLimit?: number | string;
}

const FHIR_JSON = 'application/fhir+json';

// RegExp routes: Express 4 reads `$` in a route string as a regex anchor, and `req.path` keeps
// `%24` undecoded, so both spellings are matched explicitly.
const OP = (name: string) => `(?:\\$|%24)${name}`;
const ID = '([^/]+)';
const INIT_PATH = new RegExp(`^/Project/${OP('init')}/?$`);
const PROJECT_PATH = new RegExp(`^/Project/${ID}/?$`);
const NEW_CLIENT_PATH = new RegExp(`^/Project/${ID}/${OP('new-client')}/?$`);
const REVOKE_CLIENT_PATH = new RegExp(`^/Project/${ID}/${OP('revoke-client')}/?$`);
const SETTINGS_PATH = new RegExp(`^/Project/${ID}/${OP('settings')}/?$`);
const CLIENTS_PATH = new RegExp(`^/Project/${ID}/ClientApplication/?$`);
const CLIENT_PATH = new RegExp(`^/Project/${ID}/ClientApplication/${ID}/?$`);
const ANY_PROJECT_PATH = /^\/Project(?:\/.*)?$/;

const REVOKE_PARAMETERS = { clientId: { type: ['string', 'id'], required: true } } as const;

function resolveRules(options: ProjectRouterOptions): NewClientRules {
  if (!options?.storage) throw new InvalidOptionError('projectRouter: storage is required');
  if (typeof options.authenticate !== 'function')
    throw new InvalidOptionError('projectRouter: authenticate is required');
  if (options.allowInit !== undefined && typeof options.allowInit !== 'function') {
    throw new InvalidOptionError('projectRouter: allowInit must be a function');
  }
  const min = options.minAccessTokenLifetime ?? 60;
  const max = options.maxAccessTokenLifetime ?? 86_400;
  if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || min > max) {
    throw new InvalidOptionError(
      'projectRouter: minAccessTokenLifetime and maxAccessTokenLifetime must be integers, 1 <= min <= max',
    );
  }
  const scope = checkClientScope(options.defaultClientScope ?? 'system/*.*');
  if (!scope.ok) throw new InvalidOptionError(`projectRouter: defaultClientScope ${scope.problem}`);
  return {
    defaultScope: scope.scope,
    minAccessTokenLifetime: min,
    maxAccessTokenLifetime: max,
    allowHttpJwksUri: options.allowHttpJwksUri ?? false,
  };
}

/** Answers 405 (with `Allow`) unless the request uses one of `methods`. */
function onlyMethods(...methods: string[]): RequestHandler {
  return (req, _res, next) => {
    if (methods.includes(req.method)) return next();
    next(
      new HttpError(405, 'ERR_METHOD_NOT_ALLOWED', `Method ${req.method} is not supported here`, {
        headers: { Allow: methods.join(', ') },
      }),
    );
  };
}

function send(res: Response, status: number, body: unknown): void {
  res.status(status).type(FHIR_JSON).send(JSON.stringify(body));
}

function notFound(what: string): FhirError {
  return new FhirError(404, 'not-found', `${what} not found`);
}

/** The id in the path (Express decodes RegExp captures). */
function pathId(req: Request, index: number): string {
  const params = req.params as unknown as Record<string, string | undefined>;
  return params[String(index)] ?? '';
}

/**
 * The custom FHIR operations that create and administer projects, to mount at the FHIR base
 * (`/fhir/R4`) next to the FHIR data-plane router: it handles `/Project` and `/Project/...` only and
 * passes every other request on with `next()`. See docs/project-init.md.
 *
 * - `POST /Project/$init` (also `%24init`): creates a project with its admin user (201).
 * - `GET /Project/{id}`: the project, for its admins and the super admin (404 for anyone else).
 * - `POST /Project/{id}/$new-client`: registers a SMART Backend Services client (201, secret shown once).
 * - `GET /Project/{id}/ClientApplication[/{clientId}]`: lists (searchset Bundle) or reads clients.
 * - `POST /Project/{id}/$revoke-client` or `DELETE /Project/{id}/ClientApplication/{clientId}`:
 *   revokes a client.
 * - `POST /Project/{id}/$settings`: changes the project's settings (its SCIM `defaultUserType` and
 *   `echoUserName`); answers the project (200).
 *
 * Errors are FHIR `OperationOutcome`s (`application/fhir+json`).
 */
export function projectRouter(options: ProjectRouterOptions): Router {
  const storage: Storage = options.storage;
  const rules = resolveRules(options);
  const allowInit = options.allowInit ?? superAdminOnly;
  const authenticated = requirePrincipal(options.authenticate, options.storage);
  const body = jsonBody({ types: [FHIR_JSON, 'application/json'], limit: options.bodyLimit ?? '1mb' });
  const router = express.Router();

  /** Loads the project `id` when the caller may administer it; 404 or 403 otherwise. */
  async function administeredProject(
    res: Response,
    id: string,
    hideFromMembers = false,
  ): Promise<ProjectRecord> {
    const access = projectAdminAccess(getPrincipal(res), id);
    if (access === 'hidden' || (access === 'forbidden' && hideFromMembers)) throw notFound('Project');
    if (access === 'forbidden') throw new FhirError(403, 'forbidden', 'Only the project admins may do this');
    try {
      return await storage.readProject(id);
    } catch (error) {
      if (error instanceof NotFoundError) throw notFound('Project');
      throw error;
    }
  }

  async function projectClient(projectId: string, clientId: string): Promise<ClientRecord> {
    try {
      const client = await storage.readClient(clientId);
      if (client.projectId === projectId) return client;
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
    throw notFound('ClientApplication');
  }

  async function revoke(projectId: string, clientId: string): Promise<ClientRecord> {
    const client = await projectClient(projectId, clientId);
    return client.revoked ? client : storage.updateClient(client.id, { revoked: true });
  }

  router.all(
    INIT_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const principal = getPrincipal(res);
      if (!allowInit(principal)) throw new FhirError(403, 'forbidden', 'The caller may not create projects');
      const input = parseInitParameters(req.body);
      let defaults: OwnerDefaults = {};
      if (principal.kind === 'user' && principal.projectId) {
        try {
          defaults = ownerDefaultsFromUser(await storage.readUser(principal.projectId, principal.id));
        } catch (error) {
          if (!(error instanceof NotFoundError)) throw error;
        }
      }
      const { project } = await initProject(storage, input, defaults);
      res.setHeader('Location', absoluteUrl(req, `/Project/${project.id}`, options.baseUrl));
      res.setHeader('ETag', `W/"${project.version}"`);
      send(res, 201, projectResource(project));
    }),
  );

  router.all(
    PROJECT_PATH,
    onlyMethods('GET', 'HEAD'),
    authenticated,
    asyncHandler(async (req, res) => {
      const project = await administeredProject(res, pathId(req, 0), true);
      res.setHeader('ETag', `W/"${project.version}"`);
      send(res, 200, projectResource(project));
    }),
  );

  router.all(
    NEW_CLIENT_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const project = await administeredProject(res, pathId(req, 0));
      const input = parseNewClientParameters(req.body, rules);
      const { client, secret } = await registerClient(storage, project.id, input);
      res.setHeader(
        'Location',
        absoluteUrl(req, `/Project/${project.id}/ClientApplication/${client.id}`, options.baseUrl),
      );
      // The answer holds a secret: keep it out of every cache (RFC 9111 §5.2.2.5).
      res.setHeader('Cache-Control', 'no-store');
      send(res, 201, clientApplicationResource(client, secret));
    }),
  );

  router.all(
    CLIENTS_PATH,
    onlyMethods('GET', 'HEAD'),
    authenticated,
    asyncHandler(async (req, res) => {
      const project = await administeredProject(res, pathId(req, 0));
      const clients = await storage.listClients(project.id);
      const base = absoluteUrl(req, `/Project/${project.id}/ClientApplication`, options.baseUrl);
      send(res, 200, {
        resourceType: 'Bundle',
        type: 'searchset',
        total: clients.length,
        link: [{ relation: 'self', url: base }],
        entry: clients.map((client) => ({
          fullUrl: `${base}/${client.id}`,
          resource: clientApplicationResource(client),
          search: { mode: 'match' },
        })),
      });
    }),
  );

  router.all(
    CLIENT_PATH,
    onlyMethods('GET', 'HEAD', 'DELETE'),
    authenticated,
    asyncHandler(async (req, res) => {
      const project = await administeredProject(res, pathId(req, 0));
      const clientId = pathId(req, 1);
      if (req.method === 'DELETE') {
        await revoke(project.id, clientId);
        res.status(204).end();
        return;
      }
      send(res, 200, clientApplicationResource(await projectClient(project.id, clientId)));
    }),
  );

  router.all(
    REVOKE_CLIENT_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const project = await administeredProject(res, pathId(req, 0));
      const { clientId } = readParameters(req.body, REVOKE_PARAMETERS);
      send(res, 200, clientApplicationResource(await revoke(project.id, clientId.value)));
    }),
  );

  router.all(
    SETTINGS_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const project = await administeredProject(res, pathId(req, 0));
      const change = parseSettingsParameters(req.body);
      let updated: ProjectRecord;
      try {
        updated = await updateProjectSettings(storage, project.id, change);
      } catch (error) {
        if (error instanceof NotFoundError) throw notFound('Project');
        throw error;
      }
      res.setHeader('ETag', `W/"${updated.version}"`);
      send(res, 200, projectResource(updated));
    }),
  );

  // Project is not an R4 resource type: the rest of its namespace is ours too, and unknown.
  router.all(ANY_PROJECT_PATH, authenticated, (req, _res, next) => {
    next(new FhirError(404, 'not-found', `No operation at ${req.path}`));
  });

  const requestErrors: ErrorRequestHandler = (err: unknown, _req, _res, next) => {
    // An unparsable body is a Parameters problem like any other (it must carry an expression).
    const type = typeof err === 'object' && err !== null ? (err as { type?: unknown }).type : undefined;
    if (type === 'entity.parse.failed')
      return next(invalidParameter('Parameters', 'The request body is not valid JSON'));
    // Express fails to decode a path capture such as `%ZZ` with a bare URIError (status 400).
    if (err instanceof URIError)
      return next(new FhirError(400, 'invalid', 'The path holds a malformed %-escape'));
    next(err);
  };
  router.use(requestErrors, fhirErrorHandler(options.onError));
  return router;
}
