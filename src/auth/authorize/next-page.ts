/**
 * The pages a signed-in user goes through (SMART App Launch): the patient picker while a
 * Practitioner's launch patient is missing, then consent.
 */
import type { Request, Response } from 'express';
import type { ClientRecord, UserRecord } from '../../storage/types.js';
import type { AuthorizationForm, PickerPatient } from '../browser/authorization-pages.js';
import { sendPage } from '../browser/page-security.js';
import type { AuthorizationEndpoint } from './authorization-endpoint.js';
import type { TicketGrant } from './pending-authorization.js';

/** The form of a pending authorization's pages: it posts back the ticket and its CSRF value. */
function formOf(endpoint: AuthorizationEndpoint, req: Request, grant: TicketGrant): AuthorizationForm {
  return { action: endpoint.endpointUrl(req), hidden: { ticket: grant.key, csrf: grant.data.csrf } };
}

/** Shows the patient picker, with the patients found for `query` when the user searched. */
export function showPatientPicker(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
  grant: TicketGrant,
  client: ClientRecord,
  found?: { query: string; patients: PickerPatient[] },
): void {
  const html = endpoint.pages.patientPicker({
    form: formOf(endpoint, req, grant),
    clientName: client.name,
    ...(found ?? { patients: [] }),
  });
  sendPage(res, 200, html);
}

/** Shows the next page once the user is known: the picker while the patient is missing, else consent. */
export function showNextPage(
  endpoint: AuthorizationEndpoint,
  req: Request,
  res: Response,
  grant: TicketGrant,
  client: ClientRecord,
  user: UserRecord,
): void {
  const { data } = grant;
  if (data.launchPatient && data.patient === undefined) {
    showPatientPicker(endpoint, req, res, grant, client);
    return;
  }
  const html = endpoint.pages.consent({
    form: formOf(endpoint, req, grant),
    clientName: client.name,
    scopes: data.scopes,
    fhirUser: `${user.userType}/${user.profileId}`,
    ...(data.patient !== undefined ? { patient: `Patient/${data.patient}` } : {}),
  });
  sendPage(res, 200, html);
}
