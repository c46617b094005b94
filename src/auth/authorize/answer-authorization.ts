/**
 * `POST` on the authorization endpoint: the user's answer on a page of a pending authorization
 * (form fields `ticket`, `csrf`, `action`). The consent page approves (`approve`: a code goes to
 * the app) or denies (`deny`: `access_denied`); the patient picker searches (`search` with
 * `name`) and picks (`pick` with `patient`). Anything else shows the current page again.
 */
import type { Request, Response } from 'express';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, UserRecord } from '../../storage/types.js';
import { issueCode, sameSecret } from '../token/user-grants.js';
import { redirectWith } from './authorization-request.js';
import { pageError, type AuthorizationEndpoint } from './authorization-endpoint.js';
import { findPatients } from './launch-context.js';
import { showNextPage, showPatientPicker } from './next-page.js';
import {
  activeUser,
  boundTicket,
  clientOf,
  setTicketCookie,
  type TicketGrant,
} from './pending-authorization.js';

/** One answer, once its ticket, CSRF value, app and user are checked. */
interface Answer {
  endpoint: AuthorizationEndpoint;
  req: Request;
  res: Response;
  body: Record<string, unknown>;
  grant: TicketGrant;
  client: ClientRecord;
  user: UserRecord;
}

/** A patient id as the picker posts it (a FHIR id). */
const PATIENT_ID = /^[A-Za-z0-9\-.]{1,64}$/;

/** Reads the form and checks that it is this browser's, for a signed-in user, of an allowed app. */
async function readAnswer(endpoint: AuthorizationEndpoint, req: Request, res: Response): Promise<Answer> {
  const body = (req.body ?? {}) as Record<string, unknown>;
  const grant = await boundTicket(endpoint, req, body.ticket);
  if (typeof body.csrf !== 'string' || !sameSecret(body.csrf, grant.data.csrf)) {
    throw pageError(400, 'invalid_request', 'The form is not this sign-in’s: start again from the app.');
  }
  if (grant.userId === undefined) throw pageError(400, 'invalid_request', 'Sign in first.');
  const client = await clientOf(endpoint, grant);
  const user = await activeUser(endpoint, grant.projectId, grant.userId);
  return { endpoint, req, res, body, grant, client, user };
}

/** Ends the pending authorization: the cookie goes, the browser back to the app with `params`. */
function finish(answer: Answer, params: Record<string, string | undefined>): void {
  const { endpoint, req, res, grant } = answer;
  setTicketCookie(endpoint, req, res, grant.key, '', 0);
  res.redirect(303, redirectWith(grant.data.redirectUri, { ...params, state: grant.data.state }));
}

/** Takes the ticket once: a double submit gets one answer. */
async function takeTicket(answer: Answer): Promise<void> {
  if (!(await answer.endpoint.grants.take('ticket', answer.grant.key)))
    throw pageError(400, 'expired', 'This sign-in was already completed.');
}

async function deny(answer: Answer): Promise<void> {
  const { endpoint, req, grant, client, user } = answer;
  await takeTicket(answer);
  const { scopes, roles } = grant.data;
  endpoint.audit(
    req,
    { action: 'deny', result: 'refused', scopes, ...(roles ? { roles } : {}) },
    client,
    user,
  );
  finish(answer, { error: 'access_denied', error_description: 'The user denied access' });
}

async function searchPatients(answer: Answer): Promise<void> {
  const { endpoint, req, res, body, grant, client } = answer;
  const name = typeof body.name === 'string' ? body.name.trim().slice(0, 100) : '';
  const patients = name
    ? await findPatients(endpoint.storage, grant.projectId, name, endpoint.pickerPageSize)
    : [];
  showPatientPicker(endpoint, req, res, grant, client, { query: name, patients });
}

async function patientExists(
  endpoint: AuthorizationEndpoint,
  projectId: string,
  id: string,
): Promise<boolean> {
  try {
    await endpoint.storage.readResource(projectId, 'Patient', id);
    return true;
  } catch (error) {
    if (error instanceof NotFoundError) return false;
    throw error;
  }
}

/** Records the picked patient (an unknown one is ignored) and shows the next page. */
async function pickPatient(answer: Answer): Promise<void> {
  const { endpoint, req, res, body, client, user } = answer;
  let { grant } = answer;
  const id = typeof body.patient === 'string' ? body.patient : '';
  if (PATIENT_ID.test(id) && (await patientExists(endpoint, grant.projectId, id))) {
    grant = { ...grant, data: { ...grant.data, patient: id } };
    await endpoint.grants.put(grant);
  }
  showNextPage(endpoint, req, res, grant, client, user);
}

/** Issues the code (RFC 6749 §4.1.2) for what the user consented to, and sends it to the app. */
async function approve(answer: Answer): Promise<void> {
  const { endpoint, req, grant, client, user } = answer;
  const { data } = grant;
  await takeTicket(answer);
  const code = await issueCode(endpoint.grants, {
    client,
    userId: user.id,
    now: endpoint.now(),
    data: {
      redirectUri: data.redirectUri,
      scopes: data.scopes,
      codeChallenge: data.codeChallenge,
      ...(data.nonce !== undefined ? { nonce: data.nonce } : {}),
      ...(data.patient !== undefined ? { patient: data.patient } : {}),
    },
  });
  const consent = { action: 'consent', result: 'granted', scopes: data.scopes } as const;
  const context = {
    ...(data.patient ? { patient: data.patient } : {}),
    ...(data.roles ? { roles: data.roles } : {}),
  };
  endpoint.audit(req, { ...consent, ...context }, client, user);
  finish(answer, { code });
}

/** Answers the form of a pending authorization. */
export async function answerAuthorization(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
): Promise<void> {
  const answer = await readAnswer(endpoint, req, res);
  const { action } = answer.body;
  const { data } = answer.grant;
  const picking = data.launchPatient && answer.user.userType === 'Practitioner';
  if (action === 'deny') return deny(answer);
  if (action === 'search' && picking) return searchPatients(answer);
  if (action === 'pick' && picking) return pickPatient(answer);
  // Approval needs the launch patient when the app asked for one; until then, the page again.
  if (action === 'approve' && !(data.launchPatient && data.patient === undefined)) return approve(answer);
  showNextPage(endpoint, req, res, answer.grant, answer.client, answer.user);
}
