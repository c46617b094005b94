import express, { Router, type Request, type RequestHandler } from 'express';
import { recordSafely } from '../../audit/record-safely.js';
import { errorSink } from '../../http/request-logging.js';
import { asyncHandler } from '../../http/async-handler.js';
import { absoluteUrl } from '../../http/base-url.js';
import { oauthErrorHandler } from '../../http/error-rendering.js';
import { HttpError, OAuthError } from '../../http/http-error.js';
import type { Authenticate, Principal } from '../../http/principal.js';
import { optionError } from '../../common/options.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, GrantStore, UserRecord } from '../../storage/types.js';
import { AccessTokenError, verifyAccessToken, type AccessTokenClaims } from '../access/access-token.js';
import { accessTokenRevoked } from '../access/access-token-revocation.js';
import { formParam, type FormParams } from '../client/client-authentication.js';
import { tokenIdentity, type PerRequest } from './issuer.js';
import { SIGNING_ALGORITHMS } from '../keys/signing-keys.js';
import { authenticateRequestClient, type TokenEndpointConfig, type TokenRequest } from './token-endpoint.js';
import { resolveTokenEndpointConfig, type TokenRouterOptions } from './token-router.js';
import { secretKey, type RefreshGrantData } from './user-grants.js';

/** Options of `revocationRouter` and `introspectionRouter`: the token router's, and these. */
export interface TokenManagementOptions extends TokenRouterOptions {
  /**
   * The token endpoint's absolute URL, or a function of the request: the `aud` a `private_key_jwt`
   * client assertion carries here too.
   * @default this endpoint's own URL
   */
  tokenUrl?: PerRequest;
  /**
   * Introspection only: resolves a caller presenting `Authorization: Bearer` (a resource server with
   * its own access token). Without it, only confidential clients may introspect.
   * @default undefined
   */
  authenticate?: Authenticate;
}

const EXTRA_KEYS = { tokenUrl: true, authenticate: true } as const;

/** An access token is a JWS (three dots-separated parts); anything else is looked up as a refresh token. */
const looksLikeJwt = (token: string) => /^[\w-]+\.[\w-]+\.[\w-]+$/.test(token);

function setUp(owner: string, options: TokenManagementOptions) {
  const config = resolveTokenEndpointConfig(options, owner, EXTRA_KEYS);
  if (!config.grants) optionError(owner, 'grants', 'grants are required: the storage has none');
  const grants: GrantStore = config.grants;
  const logError = errorSink(options);
  const form = express.urlencoded({ extended: false, limit: '64kb', parameterLimit: 100 });
  const formOnly: RequestHandler = (req, _res, next) => {
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/x-www-form-urlencoded') {
      next(new OAuthError(400, 'invalid_request', 'The body must be application/x-www-form-urlencoded'));
    } else next();
  };
  const tokenRequest = (req: Request): TokenRequest => {
    const { issuer, audience } = tokenIdentity(req, options);
    const tokenUrl =
      typeof options.tokenUrl === 'function'
        ? options.tokenUrl(req)
        : (options.tokenUrl ?? absoluteUrl(req, '', options.baseUrl));
    return {
      params: (req.body ?? {}) as FormParams,
      authorization: req.headers.authorization,
      tokenUrl,
      issuer,
      audience,
      address: req.ip ?? req.socket.remoteAddress ?? 'unknown',
    };
  };
  return { config, grants, logError, form, formOnly, tokenRequest };
}

/** The claims of a valid access token of this server, or undefined (bad signature, expired, revoked). */
async function accessClaims(
  config: TokenEndpointConfig,
  grants: GrantStore,
  token: string,
  identity: { issuer: string; audience: string },
): Promise<AccessTokenClaims | undefined> {
  let claims: AccessTokenClaims;
  try {
    claims = await verifyAccessToken(config.keys, token, {
      ...identity,
      algorithms: SIGNING_ALGORITHMS,
      clockTolerance: config.clockTolerance,
      now: config.now(),
    });
  } catch (error) {
    if (error instanceof AccessTokenError) return undefined;
    throw error;
  }
  if (await accessTokenRevoked(grants, claims)) return undefined;
  return claims;
}

/**
 * The token revocation endpoint (RFC 7009). Mount it at the revocation path (conventionally
 * `/oauth2/revoke`); it answers `POST /` with a form holding `token` (and an optional
 * `token_type_hint`), the client authenticating as at the token endpoint (a public client by
 * `client_id`). A refresh token revokes its whole grant (every refresh token rotated from the same
 * code and every access token issued from them, RFC 7009 §2.1); an access token is refused by
 * `bearerAuth` from then until it expires. A token that is unknown, expired or another client's is
 * answered 200 all the same (RFC 7009 §2.2).
 */
export function revocationRouter(options: TokenManagementOptions): Router {
  const { config, grants, logError, form, formOnly, tokenRequest } = setUp('revocationRouter', options);
  const router = Router();
  router.post(
    '/',
    formOnly,
    form,
    asyncHandler(async (req, res) => {
      const request = tokenRequest(req);
      const client = await authenticateRequestClient(request, config, true);
      const token = formParam(request.params, 'token');
      if (!token) throw new OAuthError(400, 'invalid_request', 'token is missing');
      let revoked: { userId?: string; projectId: string } | undefined;
      if (looksLikeJwt(token)) {
        const claims = await accessClaims(config, grants, token, request);
        if (claims && claims.client_id === client.id) {
          await grants.put({
            kind: 'revoked-token',
            key: claims.jti,
            projectId: claims.project_id ?? '',
            clientId: client.id,
            expiresAt: claims.exp * 1000,
            data: {},
          });
          revoked = {
            projectId: claims.project_id ?? '',
            ...(claims.principal_kind === 'user' ? { userId: claims.sub } : {}),
          };
        }
      } else {
        const grant = await grants.get('refresh', secretKey(token));
        if (grant && grant.clientId === client.id) {
          await grants.revoke({ projectId: grant.projectId, family: grant.family ?? '' });
          // A grant without family is revoked alone.
          if (!grant.family) await grants.take('refresh', grant.key);
          revoked = { projectId: grant.projectId, ...(grant.userId ? { userId: grant.userId } : {}) };
        }
      }
      if (revoked && options.auditTrail && revoked.projectId) {
        recordSafely(
          options.auditTrail,
          {
            kind: 'authorization',
            action: 'revoke',
            result: 'granted',
            clientId: client.id,
            clientName: client.name,
            projectId: revoked.projectId,
            actor: { kind: 'client', id: client.id, name: client.name },
            ...(req.ip ? { address: req.ip } : {}),
          },
          (failure) => logError(failure, req),
        );
      }
      res.set('Cache-Control', 'no-store').status(200).end();
    }),
  );
  return postOnly(router, logError);
}

/**
 * The token introspection endpoint (RFC 7662, as SMART App Launch 2.x describes it). Mount it at the
 * introspection path (conventionally `/oauth2/introspect`); it answers `POST /` with a form holding
 * `token`. Callers: a confidential client authenticating as at the token endpoint, or a bearer of a
 * valid access token (`authenticate`); either sees only tokens of its own project (the super admin
 * any). The answer is `{"active": false}` for a token that is unknown, expired, revoked, of a revoked
 * client or of a user no longer active; else `active`, `scope`, `client_id`, `sub`, `exp`, `iat`, `iss`,
 * and for a user's token `fhirUser` and `patient`.
 */
export function introspectionRouter(options: TokenManagementOptions): Router {
  const { config, grants, logError, form, formOnly, tokenRequest } = setUp('introspectionRouter', options);
  const { storage } = config;

  async function caller(
    req: Request,
    request: TokenRequest,
  ): Promise<{ projectId: string | null; superAdmin: boolean }> {
    if (options.authenticate && /^Bearer\s/i.test(req.headers.authorization ?? '')) {
      let principal: Principal | undefined;
      try {
        principal = await options.authenticate(req);
      } catch (error) {
        if (error instanceof HttpError && error.status === 401) principal = undefined;
        else throw error;
      }
      if (!principal) throw new OAuthError(401, 'invalid_client', 'The bearer token is invalid');
      return { projectId: principal.projectId, superAdmin: principal.superAdmin };
    }
    const client = await authenticateRequestClient(request, config, false);
    return { projectId: client.projectId, superAdmin: client.superAdmin };
  }

  async function activeClient(id: string): Promise<ClientRecord | undefined> {
    try {
      const client = await storage.readClient(id);
      return client.revoked ? undefined : client;
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  }

  async function activeUser(projectId: string, id: string): Promise<UserRecord | undefined> {
    try {
      const user = await storage.readUser(projectId, id);
      return user.active ? user : undefined;
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  }

  async function introspect(
    token: string,
    request: TokenRequest,
  ): Promise<Record<string, unknown> | undefined> {
    if (looksLikeJwt(token)) {
      const claims = await accessClaims(config, grants, token, request);
      if (!claims || !(await activeClient(claims.client_id))) return undefined;
      if (claims.principal_kind === 'user') {
        const user = await activeUser(claims.project_id ?? '', claims.sub);
        if (!user || `${user.userType}/${user.profileId}` !== claims.fhirUser) return undefined;
      }
      return {
        active: true,
        scope: claims.scope,
        client_id: claims.client_id,
        sub: claims.sub,
        exp: claims.exp,
        iat: claims.iat,
        iss: claims.iss,
        token_type: 'Bearer',
        ...(claims.fhirUser ? { fhirUser: claims.fhirUser } : {}),
        ...(claims.patient ? { patient: claims.patient } : {}),
        project_id: claims.project_id,
      };
    }
    const grant = await grants.get('refresh', secretKey(token));
    if (!grant || grant.used || !(await activeClient(grant.clientId))) return undefined;
    // A refresh token put while its authorization was being revoked outlives it: it is not active.
    if (!grant.family || !(await grants.get('family', grant.family))) return undefined;
    const user = await activeUser(grant.projectId, grant.userId ?? '');
    if (!user) return undefined;
    const data = grant.data as RefreshGrantData;
    return {
      active: true,
      scope: data.scopes.join(' '),
      client_id: grant.clientId,
      sub: user.id,
      exp: Math.floor(grant.expiresAt / 1000),
      iss: request.issuer,
      token_type: 'refresh_token',
      fhirUser: `${user.userType}/${user.profileId}`,
      ...(data.patient ? { patient: data.patient } : {}),
      project_id: grant.projectId,
    };
  }

  const router = Router();
  router.post(
    '/',
    formOnly,
    form,
    asyncHandler(async (req, res) => {
      const request = tokenRequest(req);
      const who = await caller(req, request);
      const token = formParam(request.params, 'token');
      if (!token) throw new OAuthError(400, 'invalid_request', 'token is missing');
      const answer = await introspect(token, request);
      const visible = answer && (who.superAdmin || answer.project_id === who.projectId);
      res.set('Cache-Control', 'no-store').json(visible ? answer : { active: false });
    }),
  );
  return postOnly(router, logError);
}

/** Ends an OAuth endpoint's router: other methods answer 405, errors an OAuth error body. */
function postOnly(router: Router, logError: Parameters<typeof oauthErrorHandler>[0]): Router {
  router.all('/', (_req, _res, next) => {
    next(
      new HttpError(405, 'ERR_METHOD_NOT_ALLOWED', 'This endpoint accepts POST only', {
        headers: { Allow: 'POST' },
      }),
    );
  });
  router.use(oauthErrorHandler(logError));
  return router;
}
