/**
 * `GET` on the authorization endpoint: a new authorization request (RFC 6749 §4.1.1), checked and
 * opened as a pending authorization, then the user's sign-in; or `?ticket=…`, the browser coming
 * back from the sign-in.
 */
import type { Request, Response } from 'express';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord } from '../../storage/types.js';
import {
  checkAuthorizationRequest,
  checkClientAndRedirect,
  readAuthorizationQuery,
  redirectWith,
} from './authorization-request.js';
import { PageError, pageError, type AuthorizationEndpoint } from './authorization-endpoint.js';
import { launchPatientOf } from './launch-context.js';
import { showNextPage } from './next-page.js';
import { capByRoles } from './role-caps.js';
import {
  activeUser,
  boundTicket,
  clientOf,
  openTicket,
  readClient,
  type TicketGrant,
} from './pending-authorization.js';

/** Refused on a page unless the app's project still exists. */
async function checkProject(endpoint: AuthorizationEndpoint, client: ClientRecord): Promise<void> {
  try {
    await endpoint.storage.readProject(client.projectId!);
  } catch (error) {
    if (error instanceof NotFoundError)
      throw pageError(400, 'invalid_client', 'The app’s project no longer exists.');
    throw error;
  }
}

/**
 * Asks `authenticateUser`; once it names the user, caps the scopes by the roles of the user's
 * groups, records the user on the pending authorization (with their launch patient, when the app
 * asked for one) and shows the next page.
 */
async function signIn(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
  grant: TicketGrant,
  client: ClientRecord,
): Promise<void> {
  const signed = await endpoint.authenticateUser(req, res, {
    projectId: grant.projectId,
    clientId: client.id,
    resumeUrl: `${endpoint.endpointUrl(req)}?ticket=${encodeURIComponent(grant.key)}`,
    ticket: grant.key,
  });
  if (!signed || res.headersSent) return;
  const user = await activeUser(endpoint, grant.projectId, signed.userId);
  if (!(await capByRoles(endpoint, req, res, grant, client, user))) return;
  const { data } = grant;
  if (data.launchPatient) {
    const launch = await launchPatientOf(endpoint.storage, user);
    if ('problem' in launch) throw pageError(403, 'no_patient', `${launch.problem}.`);
    if ('patient' in launch) data.patient = launch.patient;
  }
  const updated = { ...grant, userId: user.id, data };
  await endpoint.grants.put(updated);
  showNextPage(endpoint, req, res, updated, client, user);
}

/**
 * A new authorization request: the app and its redirect URI first (a problem there is shown on a
 * page), then the rest (a problem goes back to the app, RFC 6749 §4.1.2.1), then the sign-in.
 */
export async function startAuthorization(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
): Promise<void> {
  const query = readAuthorizationQuery(req.query);
  if (!query) throw pageError(400, 'invalid_request', 'A parameter of the request is repeated.');
  const client = query.client_id === undefined ? undefined : await readClient(endpoint, query.client_id);
  const problem = checkClientAndRedirect(client, query.redirect_uri);
  if (problem) throw new PageError(problem);
  const checked = checkAuthorizationRequest(client!, query, endpoint.fhirBaseOf(req));
  if ('page' in checked) {
    const { error, description } = checked;
    res.redirect(
      302,
      redirectWith(query.redirect_uri!, { error, error_description: description, state: query.state }),
    );
    return;
  }
  await checkProject(endpoint, client!);
  const grant = await openTicket(endpoint, req, res, client!, checked);
  await signIn(endpoint, req, res, grant, client!);
}

/** The browser back from the sign-in (`?ticket=…`): the sign-in again until it names the user. */
export async function resumeAuthorization(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
): Promise<void> {
  const grant = await boundTicket(endpoint, req, req.query.ticket);
  const client = await clientOf(endpoint, grant);
  if (grant.userId === undefined) {
    await signIn(endpoint, req, res, grant, client);
    return;
  }
  showNextPage(endpoint, req, res, grant, client, await activeUser(endpoint, grant.projectId, grant.userId));
}
