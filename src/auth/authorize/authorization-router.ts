import express, { Router, type Request, type Response } from 'express';
import { recordSafely } from '../../audit/record-safely.js';
import type { AuthorizationEvent } from '../../audit/events.js';
import { positiveNumber, requireFunction, optionError } from '../../common/options.js';
import { absoluteUrl } from '../../http/base-url.js';
import {
  checkRouterOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../../http/router-options.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, GrantRecord, GrantStore, UserRecord } from '../../storage/types.js';
import {
  DEFAULT_AUTHORIZATION_PAGES,
  type AuthorizationErrorPage,
  type AuthorizationPages,
} from '../browser/authorization-pages.js';
import {
  checkAuthorizationRequest,
  checkClientAndRedirect,
  readAuthorizationQuery,
  redirectWith,
  type AcceptedAuthorization,
} from './authorization-request.js';
import { defaultIssuer, type PerRequest } from '../token/issuer.js';
import { findPatients, launchPatientOf } from './launch-context.js';
import { issueCode, randomSecret, sameSecret, secretKey } from '../token/user-grants.js';
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

/** What a pending authorization (`ticket` grant) keeps. */
interface TicketData extends AcceptedAuthorization, Record<string, unknown> {
  /** SHA-256 of the browser cookie the ticket is bound to. */
  browser: string;
  csrf: string;
  patient?: string;
}

/** A refusal shown on a page (never redirected). */
class PageError extends Error {
  constructor(readonly page: AuthorizationErrorPage) {
    super(page.description);
  }
}

const pageError = (status: number, error: string, description: string) =>
  new PageError({ status, error, description });

const COOKIE_PREFIX = 'fpk_az_';

function cookieValue(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
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
  const { onError } = checkRouterOptions(OWNER, options, KEYS, { authenticate: false });
  requireFunction(OWNER, 'authenticateUser', options.authenticateUser, 'must be a function');
  const given = options.grants ?? options.storage.grants;
  if (!given) optionError(OWNER, 'grants', 'grants are required: the storage has none');
  const grants: GrantStore = given;
  const { storage, baseUrl, authenticateUser } = options;
  const pages: AuthorizationPages = { ...DEFAULT_AUTHORIZATION_PAGES, ...options.pages };
  const ticketLifetime = positiveNumber(OWNER, 'ticketLifetime', options.ticketLifetime ?? 600);
  const pickerPageSize = positiveNumber(OWNER, 'pickerPageSize', options.pickerPageSize ?? 20);
  const now = options.now ?? Date.now;
  const fhirBaseOf = (req: Request): string => {
    const option = options.fhirBase;
    if (typeof option === 'function') return option(req);
    return option ?? `${defaultIssuer(req, baseUrl)}/fhir/R4`;
  };
  const endpoint = (req: Request) => absoluteUrl(req, '', baseUrl);

  function audit(
    req: Request,
    event: Omit<AuthorizationEvent, 'kind' | 'actor' | 'projectId' | 'clientId' | 'clientName'>,
    client: ClientRecord,
    user: UserRecord,
  ): void {
    if (!options.auditTrail) return;
    recordSafely(
      options.auditTrail,
      {
        kind: 'authorization',
        ...event,
        clientId: client.id,
        clientName: client.name,
        projectId: user.projectId,
        actor: { kind: 'user', id: user.id, profile: `${user.userType}/${user.profileId}` },
        ...(req.ip ? { address: req.ip } : {}),
      },
      (failure) => onError(failure, req),
    );
  }

  function page(res: Response, status: number, html: string): void {
    res
      .status(status)
      .set({
        'Content-Type': 'text/html; charset=utf-8',
        'Cache-Control': 'no-store',
        'X-Frame-Options': 'DENY',
        'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
        'Referrer-Policy': 'no-referrer',
      })
      .send(html);
  }

  function setCookie(req: Request, res: Response, ticket: string, value: string, maxAge: number): void {
    const path = req.baseUrl || '/';
    const secure = req.protocol === 'https' || baseUrl?.startsWith('https:') ? '; Secure' : '';
    res.append(
      'Set-Cookie',
      `${COOKIE_PREFIX}${ticket}=${value}; Path=${path}; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${secure}`,
    );
  }

  async function readClient(clientId: string): Promise<ClientRecord | undefined> {
    try {
      return await storage.readClient(clientId);
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  }

  async function activeUser(projectId: string, userId: string): Promise<UserRecord> {
    let user: UserRecord | undefined;
    try {
      user = await storage.readUser(projectId, userId);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
    if (!user) throw pageError(403, 'unknown_user', 'You are not a user of this app’s project.');
    if (!user.active) throw pageError(403, 'inactive_user', 'Your account is not active.');
    return user;
  }

  /** The pending authorization of `ticket`, bound to this browser. */
  async function boundTicket(req: Request, ticket: unknown): Promise<GrantRecord & { data: TicketData }> {
    if (typeof ticket !== 'string' || ticket === '' || ticket.length > 100) {
      throw pageError(400, 'invalid_request', 'The request names no sign-in.');
    }
    const grant = await grants.get('ticket', ticket);
    if (!grant) {
      throw pageError(
        400,
        'expired',
        'This sign-in expired or was already completed: start again from the app.',
      );
    }
    const data = grant.data as TicketData;
    const cookie = cookieValue(req, `${COOKIE_PREFIX}${ticket}`);
    if (cookie === undefined || !sameSecret(secretKey(cookie), data.browser)) {
      throw pageError(
        400,
        'wrong_browser',
        'This sign-in was started in another browser: start again from the app.',
      );
    }
    return grant as GrantRecord & { data: TicketData };
  }

  async function clientOf(grant: GrantRecord): Promise<ClientRecord> {
    const client = await readClient(grant.clientId);
    if (!client || client.revoked) throw pageError(400, 'invalid_client', 'The app is no longer allowed.');
    return client;
  }

  function formOf(req: Request, ticket: string, data: TicketData) {
    return { action: endpoint(req), hidden: { ticket, csrf: data.csrf } };
  }

  /** The next page once the user is known: the picker while a Practitioner's patient is missing, else consent. */
  function nextPage(
    req: Request,
    res: Response,
    grant: GrantRecord,
    client: ClientRecord,
    user: UserRecord,
  ): void {
    const data = grant.data as TicketData;
    if (data.launchPatient && data.patient === undefined) {
      page(
        res,
        200,
        pages.patientPicker({ form: formOf(req, grant.key, data), clientName: client.name, patients: [] }),
      );
      return;
    }
    page(
      res,
      200,
      pages.consent({
        form: formOf(req, grant.key, data),
        clientName: client.name,
        scopes: data.scopes,
        fhirUser: `${user.userType}/${user.profileId}`,
        ...(data.patient !== undefined ? { patient: `Patient/${data.patient}` } : {}),
      }),
    );
  }

  /** Asks `authenticateUser`; once it names the user, records them (and their launch patient). */
  async function signIn(
    req: Request,
    res: Response,
    grant: GrantRecord,
    client: ClientRecord,
  ): Promise<void> {
    const signed = await authenticateUser(req, res, {
      projectId: grant.projectId,
      clientId: client.id,
      resumeUrl: `${endpoint(req)}?ticket=${encodeURIComponent(grant.key)}`,
      ticket: grant.key,
    });
    if (!signed || res.headersSent) return;
    const user = await activeUser(grant.projectId, signed.userId);
    const data = grant.data as TicketData;
    if (data.launchPatient) {
      const launch = await launchPatientOf(storage, user);
      if ('problem' in launch) throw pageError(403, 'no_patient', `${launch.problem}.`);
      if ('patient' in launch) data.patient = launch.patient;
    }
    const updated = { ...grant, userId: user.id, data };
    await grants.put(updated);
    nextPage(req, res, updated, client, user);
  }

  async function start(req: Request, res: Response): Promise<void> {
    const query = readAuthorizationQuery(req.query);
    if (!query) throw pageError(400, 'invalid_request', 'A parameter of the request is repeated.');
    const client = query.client_id === undefined ? undefined : await readClient(query.client_id);
    const problem = checkClientAndRedirect(client, query.redirect_uri);
    if (problem) throw new PageError(problem);
    const checked = checkAuthorizationRequest(client!, query, fhirBaseOf(req));
    if ('page' in checked) {
      res.redirect(
        302,
        redirectWith(query.redirect_uri!, {
          error: checked.error,
          error_description: checked.description,
          state: query.state,
        }),
      );
      return;
    }
    try {
      await storage.readProject(client!.projectId!);
    } catch (error) {
      if (error instanceof NotFoundError)
        throw pageError(400, 'invalid_client', 'The app’s project no longer exists.');
      throw error;
    }
    const ticket = randomSecret();
    const browser = randomSecret();
    const data: TicketData = { ...checked, browser: secretKey(browser), csrf: randomSecret() };
    const grant: GrantRecord = {
      kind: 'ticket',
      key: ticket,
      projectId: client!.projectId!,
      clientId: client!.id,
      expiresAt: now() + ticketLifetime * 1000,
      data,
    };
    await grants.put(grant);
    setCookie(req, res, ticket, browser, ticketLifetime);
    await signIn(req, res, grant, client!);
  }

  async function resume(req: Request, res: Response): Promise<void> {
    const grant = await boundTicket(req, req.query.ticket);
    const client = await clientOf(grant);
    if (grant.userId === undefined) {
      await signIn(req, res, grant, client);
      return;
    }
    nextPage(req, res, grant, client, await activeUser(grant.projectId, grant.userId));
  }

  async function answer(req: Request, res: Response): Promise<void> {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const grant = await boundTicket(req, body.ticket);
    const data = grant.data;
    if (typeof body.csrf !== 'string' || !sameSecret(body.csrf, data.csrf)) {
      throw pageError(400, 'invalid_request', 'The form is not this sign-in’s: start again from the app.');
    }
    if (grant.userId === undefined) throw pageError(400, 'invalid_request', 'Sign in first.');
    const client = await clientOf(grant);
    const user = await activeUser(grant.projectId, grant.userId);
    const finish = (params: Record<string, string | undefined>) => {
      setCookie(req, res, grant.key, '', 0);
      res.redirect(303, redirectWith(data.redirectUri, { ...params, state: data.state }));
    };
    const action = body.action;
    if (action === 'deny') {
      if (!(await grants.take('ticket', grant.key)))
        throw pageError(400, 'expired', 'This sign-in was already completed.');
      audit(req, { action: 'deny', result: 'refused', scopes: data.scopes }, client, user);
      finish({ error: 'access_denied', error_description: 'The user denied access' });
      return;
    }
    const picking = data.launchPatient && user.userType === 'Practitioner';
    if (action === 'search' && picking) {
      const name = typeof body.name === 'string' ? body.name.trim().slice(0, 100) : '';
      const patients = name ? await findPatients(storage, grant.projectId, name, pickerPageSize) : [];
      page(
        res,
        200,
        pages.patientPicker({
          form: formOf(req, grant.key, data),
          clientName: client.name,
          query: name,
          patients,
        }),
      );
      return;
    }
    if (action === 'pick' && picking) {
      const id = typeof body.patient === 'string' ? body.patient : '';
      const found = /^[A-Za-z0-9\-.]{1,64}$/.test(id) && (await findPatientById(grant.projectId, id));
      if (found) {
        const updated = { ...grant, data: { ...data, patient: id } };
        await grants.put(updated);
        nextPage(req, res, updated, client, user);
      } else {
        nextPage(req, res, grant, client, user);
      }
      return;
    }
    if (action !== 'approve' || (data.launchPatient && data.patient === undefined)) {
      nextPage(req, res, grant, client, user);
      return;
    }
    // Taken once: a double submit gets one code.
    if (!(await grants.take('ticket', grant.key)))
      throw pageError(400, 'expired', 'This sign-in was already completed.');
    const code = await issueCode(grants, {
      client,
      userId: user.id,
      now: now(),
      data: {
        redirectUri: data.redirectUri,
        scopes: data.scopes,
        codeChallenge: data.codeChallenge,
        ...(data.nonce !== undefined ? { nonce: data.nonce } : {}),
        ...(data.patient !== undefined ? { patient: data.patient } : {}),
      },
    });
    audit(
      req,
      {
        action: 'consent',
        result: 'granted',
        scopes: data.scopes,
        ...(data.patient ? { patient: data.patient } : {}),
      },
      client,
      user,
    );
    finish({ code });
  }

  async function findPatientById(projectId: string, id: string): Promise<boolean> {
    try {
      await storage.readResource(projectId, 'Patient', id);
      return true;
    } catch (error) {
      if (error instanceof NotFoundError) return false;
      throw error;
    }
  }

  /** Runs a step; a refusal is its page, anything else is logged and a 500 page. */
  const step =
    (fn: (req: Request, res: Response) => Promise<void>) =>
    (req: Request, res: Response): void => {
      fn(req, res).catch((error: unknown) => {
        if (res.headersSent) {
          onError(error, req);
          return;
        }
        if (error instanceof PageError) {
          page(res, error.page.status, pages.error(error.page));
          return;
        }
        onError(error, req);
        page(
          res,
          500,
          pages.error({
            status: 500,
            error: 'server_error',
            description: 'Something went wrong: try again later.',
          }),
        );
      });
    };

  const router = Router();
  const form = express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 });
  router.get(
    '/',
    step((req, res) => (req.query.ticket !== undefined ? resume(req, res) : start(req, res))),
  );
  router.post('/', form, step(answer));
  router.all('/', (_req, res) => {
    res.status(405).set('Allow', 'GET, POST').end();
  });
  return router;
}
