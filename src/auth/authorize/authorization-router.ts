import express, { Router, type Request, type RequestHandler, type Response } from 'express';
import { recordSafely } from '../../audit/record-safely.js';
import { optionError, positiveNumber, requireFunction } from '../../common/options.js';
import { absoluteUrl } from '../../http/base-url.js';
import {
  checkRouterOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../../http/router-options.js';
import type { GrantStore } from '../../storage/types.js';
import { DEFAULT_AUTHORIZATION_PAGES, type AuthorizationPages } from '../browser/authorization-pages.js';
import { sendPage } from '../browser/page-security.js';
import { defaultIssuer, type PerRequest } from '../token/issuer.js';
import { answerAuthorization } from './answer-authorization.js';
import { PageError, type AuthorizationEndpoint } from './authorization-endpoint.js';
import { resumeAuthorization, startAuthorization } from './start-authorization.js';
import type { AuthenticateUser } from './user-sign-in.js';

/** Options of `authorizationRouter`. */
export interface AuthorizationRouterOptions extends Omit<CommonRouterOptions, 'authenticate'> {
  /**
   * Signs the browser's user in (see `AuthenticateUser`): the federated sign-in with the project's
   * identity provider, or the host's own.
   */
  authenticateUser: AuthenticateUser;
  /**
   * The FHIR base URL an authorization request's `aud` must equal, or a function of the request.
   * (`fhirPlatform` uses its FHIR mount.)
   * @default `baseUrl` (or the request's origin) + '/fhir/R4'
   */
  fhirBase?: PerRequest;
  /**
   * Where pending authorizations and codes are kept.
   * @default storage.grants
   */
  grants?: GrantStore;
  /**
   * Page renderers replacing the default consent page, patient picker or error page.
   * @default the built-in minimal pages
   */
  pages?: Partial<AuthorizationPages>;
  /**
   * Seconds a pending authorization (sign-in, consent) may take.
   * @default 600
   */
  ticketLifetime?: number;
  /**
   * Patients the picker shows per search.
   * @default 20
   */
  pickerPageSize?: number;
  /** Clock (epoch ms), for tests. @default Date.now */
  now?: () => number;
}

const OWNER = 'authorizationRouter';

const KEYS: OwnOptionKeys<AuthorizationRouterOptions> = {
  authenticateUser: true,
  fhirBase: true,
  grants: true,
  pages: true,
  ticketLifetime: true,
  pickerPageSize: true,
  now: true,
};

/** Resolves and checks the options once: what every step of the endpoint uses. */
function resolveEndpoint(options: AuthorizationRouterOptions): AuthorizationEndpoint {
  const { onError } = checkRouterOptions(OWNER, options, KEYS, { authenticate: false });
  requireFunction(OWNER, 'authenticateUser', options.authenticateUser, 'must be a function');
  const grants = options.grants ?? options.storage.grants;
  if (!grants) optionError(OWNER, 'grants', 'grants are required: the storage has none');
  const { storage, baseUrl, auditTrail } = options;
  return {
    storage,
    grants,
    authenticateUser: options.authenticateUser,
    pages: { ...DEFAULT_AUTHORIZATION_PAGES, ...options.pages },
    ticketLifetime: positiveNumber(OWNER, 'ticketLifetime', options.ticketLifetime ?? 600),
    pickerPageSize: positiveNumber(OWNER, 'pickerPageSize', options.pickerPageSize ?? 20),
    now: options.now ?? Date.now,
    fhirBaseOf(req) {
      const option = options.fhirBase;
      if (typeof option === 'function') return option(req);
      return option ?? `${defaultIssuer(req, baseUrl)}/fhir/R4`;
    },
    endpointUrl: (req) => absoluteUrl(req, '', baseUrl),
    audit(req, event, client, user) {
      if (!auditTrail) return;
      const actor = { kind: 'user', id: user.id, profile: `${user.userType}/${user.profileId}` } as const;
      const record = {
        kind: 'authorization',
        ...event,
        clientId: client.id,
        clientName: client.name,
        projectId: user.projectId,
        actor,
        ...(req.ip ? { address: req.ip } : {}),
      } as const;
      recordSafely(auditTrail, record, (failure) => onError(failure, req));
    },
    onError,
  };
}

const SERVER_ERROR = {
  status: 500,
  error: 'server_error',
  description: 'Something went wrong: try again later.',
};

/** A step of the endpoint as a handler: a refusal is its error page; anything else is logged and a 500 page. */
function step(
  endpoint: AuthorizationEndpoint,
  run: (endpoint: AuthorizationEndpoint, req: Request, res: Response) => Promise<void>,
): RequestHandler {
  return (req, res) => {
    run(endpoint, req, res).catch((error: unknown) => {
      if (res.headersSent) {
        endpoint.onError(error, req);
        return;
      }
      if (error instanceof PageError) {
        sendPage(res, error.page.status, endpoint.pages.error(error.page));
        return;
      }
      endpoint.onError(error, req);
      sendPage(res, 500, endpoint.pages.error(SERVER_ERROR));
    });
  };
}

/** `GET`: the browser back from the sign-in (`?ticket=…`), or a new authorization request. */
function startOrResume(endpoint: AuthorizationEndpoint, req: Request, res: Response): Promise<void> {
  return req.query.ticket !== undefined
    ? resumeAuthorization(endpoint, req, res)
    : startAuthorization(endpoint, req, res);
}

/**
 * The authorization endpoint of SMART App Launch (standalone launch; RFC 6749 §4.1 with PKCE,
 * RFC 7636, S256 only). Mount it at the authorize path (conventionally `/oauth2/authorize`):
 * - `GET /?response_type=code&client_id&redirect_uri&scope&state&aud&code_challenge&code_challenge_method=S256[&nonce]`
 *   checks the app and its redirect URI (a problem there is shown on an error page, never
 *   redirected), then the rest (a problem goes back to the redirect URI, RFC 6749 §4.1.2.1), opens
 *   a pending authorization bound to the browser by an HttpOnly SameSite=Lax cookie and asks
 *   `authenticateUser` who the user is;
 * - `GET /?ticket=…` resumes it once the sign-in comes back;
 * - `POST /` (form: `ticket`, `csrf`, `action`) answers the consent page (`approve`, `deny`) and
 *   the patient picker (`search` with `name`, `pick` with `patient`).
 * Approval redirects to the app with `code` and `state`; denial with `error=access_denied`.
 */
export function authorizationRouter(options: AuthorizationRouterOptions): Router {
  const endpoint = resolveEndpoint(options);
  const router = Router();
  const form = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 });
  router.get('/', step(endpoint, startOrResume));
  router.post('/', form, step(endpoint, answerAuthorization));
  router.all('/', (_req, res) => {
    res.status(405).set('Allow', 'GET, POST').end();
  });
  return router;
}
