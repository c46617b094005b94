/**
 * A pending authorization: the `ticket` grant kept from the authorization request to the user's
 * answer, bound to the browser that started it by a cookie whose value only that browser holds
 * (the store keeps its SHA-256), and the app and user it is for, read again at every step.
 */
import type { Request, Response } from 'express';
import { NotFoundError } from '../../storage/errors.js';
import type { RoleCapping } from '../../audit/events.js';
import type { ClientRecord, GrantRecord, UserRecord } from '../../storage/types.js';
import { pageCookie, pageCookieValue } from '../browser/page-security.js';
import { randomSecret, sameSecret, secretKey } from '../token/user-grants.js';
import type { AcceptedAuthorization } from './authorization-request.js';
import { pageError, type AuthorizationEndpoint } from './authorization-endpoint.js';

/** What a pending authorization (`ticket` grant) keeps. */
export interface TicketData extends AcceptedAuthorization, Record<string, unknown> {
  /** SHA-256 of the browser cookie the ticket is bound to. */
  browser: string;
  csrf: string;
  patient?: string;
  /** The roles of the user's groups capped `scopes` (see `capByRoles`): the groups, and what was capped. */
  roles?: RoleCapping;
}

/** A `ticket` grant with its data. */
export type TicketGrant = GrantRecord & { data: TicketData };

const COOKIE_PREFIX = 'fpk_az_';

/** Sets (or, with `maxAge` 0, deletes) the cookie binding `ticket` to this browser. */
export function setTicketCookie(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
  ticket: string,
  value: string,
  maxAge: number,
): void {
  res.append('Set-Cookie', pageCookie(`${COOKIE_PREFIX}${ticket}`, value, endpoint.endpointUrl(req), maxAge));
}

/** Opens a pending authorization for an accepted request and binds it to this browser. */
export async function openTicket(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
  client: ClientRecord,
  accepted: AcceptedAuthorization,
): Promise<TicketGrant> {
  const ticket = randomSecret();
  const browser = randomSecret();
  const data: TicketData = { ...accepted, browser: secretKey(browser), csrf: randomSecret() };
  const grant: TicketGrant = {
    kind: 'ticket',
    key: ticket,
    projectId: client.projectId!,
    clientId: client.id,
    expiresAt: endpoint.now() + endpoint.ticketLifetime * 1000,
    data,
  };
  await endpoint.grants.put(grant);
  setTicketCookie(endpoint, req, res, ticket, browser, endpoint.ticketLifetime);
  return grant;
}

/** The pending authorization of `ticket`, when it exists and this browser started it. */
export async function boundTicket(
  endpoint: AuthorizationEndpoint,
  req: Request,
  ticket: unknown,
): Promise<TicketGrant> {
  if (typeof ticket !== 'string' || ticket === '' || ticket.length > 100) {
    throw pageError(400, 'invalid_request', 'The request names no sign-in.');
  }
  const grant = await endpoint.grants.get('ticket', ticket);
  if (!grant) {
    throw pageError(
      400,
      'expired',
      'This sign-in expired or was already completed: start again from the app.',
    );
  }
  const data = grant.data as TicketData;
  const cookie = pageCookieValue(req, `${COOKIE_PREFIX}${ticket}`);
  if (cookie === undefined || !sameSecret(secretKey(cookie), data.browser)) {
    throw pageError(
      400,
      'wrong_browser',
      'This sign-in was started in another browser: start again from the app.',
    );
  }
  return grant as TicketGrant;
}

/** The client `clientId` names, or undefined when there is none. */
export async function readClient(
  endpoint: AuthorizationEndpoint,
  clientId: string,
): Promise<ClientRecord | undefined> {
  try {
    return await endpoint.storage.readClient(clientId);
  } catch (error) {
    if (error instanceof NotFoundError) return undefined;
    throw error;
  }
}

/** The app of a pending authorization, while it is still allowed. */
export async function clientOf(endpoint: AuthorizationEndpoint, grant: GrantRecord): Promise<ClientRecord> {
  const client = await readClient(endpoint, grant.clientId);
  if (!client || client.revoked) throw pageError(400, 'invalid_client', 'The app is no longer allowed.');
  return client;
}

/** The signed-in user, while they are an active user of the app's project. */
export async function activeUser(
  endpoint: AuthorizationEndpoint,
  projectId: string,
  userId: string,
): Promise<UserRecord> {
  let user: UserRecord | undefined;
  try {
    user = await endpoint.storage.readUser(projectId, userId);
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
  }
  if (!user) throw pageError(403, 'unknown_user', 'You are not a user of this app’s project.');
  if (!user.active) throw pageError(403, 'inactive_user', 'Your account is not active.');
  return user;
}
