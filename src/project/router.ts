import express, { type ErrorRequestHandler, type Request, type RequestHandler, type Router } from 'express';
import type { Principal } from '../http/principal.js';
import { privateAddressesAllowedByDefault } from '../auth/keys/public-address.js';
import { asyncHandler } from '../http/async-handler.js';
import { getPrincipal, requirePrincipal } from '../http/authenticate.js';
import { absoluteUrl } from '../http/base-url.js';
import { jsonBody } from '../http/body.js';
import { fhirErrorHandler } from '../http/error-rendering.js';
import { FhirError } from '../http/http-error.js';
import { booleanOption, optionalFunction, optionError } from '../common/options.js';
import { FHIR_JSON, methodNotAllowed, sendFhir } from '../http/protocol-responses.js';
import {
  checkRouterOptions,
  type BodyLimitOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../http/router-options.js';
import { checkClientScope, type NewClientRules } from './new-client.js';
import { invalidParameter } from '../http/fhir-parameters.js';
import { superAdminOnly } from './project-access.js';
import { projectService } from './project-service.js';

/** Options of `projectRouter`. */
export interface ProjectRouterOptions extends CommonRouterOptions, BodyLimitOptions {
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
   * Smallest `accessTokenLifetime` (seconds) a client may be registered with by `$new-client`.
   * @default 60
   */
  minClientTokenLifetime?: number;
  /**
   * Largest `accessTokenLifetime` (seconds) a client may be registered with by `$new-client`. The
   * token endpoint's `accessTokenLifetimeCap` still caps every token it issues.
   * @default 86400
   */
  maxClientTokenLifetime?: number;
  /** @deprecated the former name of `minClientTokenLifetime`, still accepted. @default undefined */
  minAccessTokenLifetime?: number;
  /** @deprecated the former name of `maxClientTokenLifetime`, still accepted. @default undefined */
  maxAccessTokenLifetime?: number;
  /**
   * Accept `http:` `jwksUri`s on any host. Without it, `http:` is accepted only on `localhost`,
   * `127.0.0.1` and `[::1]` (SMART Backend Services requires TLS).
   * @default false
   */
  allowHttpJwksUri?: boolean;
  /**
   * Accept `jwksUri`s naming a loopback, private (RFC 1918, unique local), link-local (cloud
   * metadata), CGNAT or other non-public IP address, or a `localhost` name; refused, they answer
   * `400`. Names are not resolved here: the token endpoint checks the addresses a name resolves
   * to when it connects (its `jwks.allowPrivateAddresses`; give both the same value).
   * @default true unless `NODE_ENV` is `production` (read when the router is created)
   */
  allowPrivateJwksAddresses?: boolean;
  /**
   * Accept `$settings` import sources (`importSource` `url` and `tokenUrl`) naming a loopback,
   * private, link-local or other non-public IP address, or a `localhost` name; refused, they answer
   * `400`. `$import` checks the addresses again when it connects (`bulkExportRouter`'s
   * `import.allowPrivateAddresses`, which `fhirPlatform` passes here unless this is given).
   * @default true unless `NODE_ENV` is `production` (read when the router is created)
   */
  allowPrivateImportAddresses?: boolean;
}

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

/** Options with every default filled in. */
export interface ResolvedProjectRouterOptions extends ProjectRouterOptions {
  allowInit: (principal: Principal) => boolean;
  bodyLimit: number | string;
  /** What `$new-client` accepts. */
  rules: NewClientRules;
}

const OWNER = 'projectRouter';

const PROJECT_ROUTER_KEYS: OwnOptionKeys<ProjectRouterOptions> = {
  allowInit: true,
  defaultClientScope: true,
  minClientTokenLifetime: true,
  maxClientTokenLifetime: true,
  minAccessTokenLifetime: true,
  maxAccessTokenLifetime: true,
  allowHttpJwksUri: true,
  allowPrivateJwksAddresses: true,
  allowPrivateImportAddresses: true,
};

/** Fills in defaults and fails fast on bad options. */
export function resolveProjectRouterOptions(options: ProjectRouterOptions): ResolvedProjectRouterOptions {
  const { onError, bodyLimit } = checkRouterOptions(OWNER, options, PROJECT_ROUTER_KEYS, {
    authenticate: true,
    bodyLimit: '1mb',
  });
  const allowInit = optionalFunction(OWNER, 'allowInit', options.allowInit, superAdminOnly);
  for (const [name, old] of [
    ['minClientTokenLifetime', 'minAccessTokenLifetime'],
    ['maxClientTokenLifetime', 'maxAccessTokenLifetime'],
  ] as const) {
    if (options[name] !== undefined && options[old] !== undefined)
      optionError(OWNER, old, `give ${name} only (${old} is its deprecated name)`);
  }
  const min = options.minClientTokenLifetime ?? options.minAccessTokenLifetime ?? 60;
  const max = options.maxClientTokenLifetime ?? options.maxAccessTokenLifetime ?? 86_400;
  if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || min > max) {
    optionError(
      OWNER,
      'minClientTokenLifetime',
      'minClientTokenLifetime and maxClientTokenLifetime must be integers, 1 <= min <= max',
    );
  }
  const scope = checkClientScope(options.defaultClientScope ?? 'system/*.*');
  if (!scope.ok) optionError(OWNER, 'defaultClientScope', `defaultClientScope ${scope.problem}`);
  return {
    ...options,
    allowInit,
    onError,
    bodyLimit,
    rules: {
      defaultScope: scope.scope,
      minClientTokenLifetime: min,
      maxClientTokenLifetime: max,
      allowHttpJwksUri: options.allowHttpJwksUri ?? false,
      allowPrivateJwksAddresses: booleanOption(
        OWNER,
        'allowPrivateJwksAddresses',
        options.allowPrivateJwksAddresses,
        privateAddressesAllowedByDefault(),
      ),
      allowPrivateImportAddresses: booleanOption(
        OWNER,
        'allowPrivateImportAddresses',
        options.allowPrivateImportAddresses,
        privateAddressesAllowedByDefault(),
      ),
    },
  };
}

/** Passes requests using one of `methods`; answers 405 (with `Allow`) to the others. */
function onlyMethods(...methods: string[]): RequestHandler {
  const refuse = methodNotAllowed(methods.join(', '));
  return (req, res, next) => {
    if (methods.includes(req.method)) return next();
    refuse(req, res, next);
  };
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
  const config = resolveProjectRouterOptions(options);
  const service = projectService(config);
  const authenticated = requirePrincipal(config.authenticate, config.storage);
  const body = jsonBody({ types: [FHIR_JSON, 'application/json'], limit: config.bodyLimit });
  const url = (req: Request, path: string) => absoluteUrl(req, path, config.baseUrl);
  const router = express.Router();

  router.all(
    INIT_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const project = await service.init(getPrincipal(res), req.body);
      res.setHeader('Location', url(req, `/Project/${project.id}`));
      res.setHeader('ETag', `W/"${project.meta.versionId}"`);
      sendFhir(res, 201, project);
    }),
  );

  router.all(
    PROJECT_PATH,
    onlyMethods('GET', 'HEAD'),
    authenticated,
    asyncHandler(async (req, res) => {
      const project = await service.read(getPrincipal(res), pathId(req, 0));
      res.setHeader('ETag', `W/"${project.meta.versionId}"`);
      sendFhir(res, 200, project);
    }),
  );

  router.all(
    NEW_CLIENT_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const projectId = pathId(req, 0);
      const client = await service.newClient(getPrincipal(res), projectId, req.body);
      res.setHeader('Location', url(req, `/Project/${projectId}/ClientApplication/${client.id}`));
      // The answer holds a secret: keep it out of every cache (RFC 9111 §5.2.2.5).
      res.setHeader('Cache-Control', 'no-store');
      sendFhir(res, 201, client);
    }),
  );

  router.all(
    CLIENTS_PATH,
    onlyMethods('GET', 'HEAD'),
    authenticated,
    asyncHandler(async (req, res) => {
      const projectId = pathId(req, 0);
      const self = url(req, `/Project/${projectId}/ClientApplication`);
      sendFhir(res, 200, await service.listClients(getPrincipal(res), projectId, self));
    }),
  );

  router.all(
    CLIENT_PATH,
    onlyMethods('GET', 'HEAD', 'DELETE'),
    authenticated,
    asyncHandler(async (req, res) => {
      const principal = getPrincipal(res);
      if (req.method === 'DELETE') {
        await service.revokeClient(principal, pathId(req, 0), pathId(req, 1));
        res.status(204).end();
        return;
      }
      sendFhir(res, 200, await service.readClient(principal, pathId(req, 0), pathId(req, 1)));
    }),
  );

  router.all(
    REVOKE_CLIENT_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      sendFhir(res, 200, await service.revokeClientByParameters(getPrincipal(res), pathId(req, 0), req.body));
    }),
  );

  router.all(
    SETTINGS_PATH,
    onlyMethods('POST'),
    authenticated,
    body,
    asyncHandler(async (req, res) => {
      const updated = await service.changeSettings(getPrincipal(res), pathId(req, 0), req.body);
      res.setHeader('ETag', `W/"${updated.meta.versionId}"`);
      sendFhir(res, 200, updated);
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
  router.use(requestErrors, fhirErrorHandler(config.onError));
  return router;
}
