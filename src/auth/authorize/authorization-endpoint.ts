/**
 * What the steps of the authorization endpoint share: its resolved configuration (built once by
 * `authorizationRouter`) and the refusal that stops a step with a page.
 */
import type { Request } from 'express';
import type { AuthorizationEvent } from '../../audit/events.js';
import type { ErrorLogger } from '../../http/error-rendering.js';
import type { ClientRecord, GrantStore, Storage, UserRecord } from '../../storage/types.js';
import type { AuthorizationErrorPage, AuthorizationPages } from '../browser/authorization-pages.js';
import type { AuthenticateUser } from './user-sign-in.js';

/** An authorization event as a step tells it; the endpoint adds the app, the user and the address. */
export type AuthorizationStepEvent = Omit<
  AuthorizationEvent,
  'kind' | 'actor' | 'projectId' | 'clientId' | 'clientName'
>;

/** The authorization endpoint's configuration, every option resolved. */
export interface AuthorizationEndpoint {
  storage: Storage;
  /** Where pending authorizations (`ticket`) and codes are kept. */
  grants: GrantStore;
  authenticateUser: AuthenticateUser;
  pages: AuthorizationPages;
  /** Seconds a pending authorization may take. */
  ticketLifetime: number;
  /** Patients the picker shows per search. */
  pickerPageSize: number;
  /** Clock (epoch ms). */
  now: () => number;
  /** The FHIR base URL an authorization request's `aud` must equal. */
  fhirBaseOf(req: Request): string;
  /** The endpoint's public URL: where its forms post and its sign-ins resume, its cookies' scope. */
  endpointUrl(req: Request): string;
  /** Records an authorization event of `user` for `client` (nothing without an audit trail). */
  audit(req: Request, event: AuthorizationStepEvent, client: ClientRecord, user: UserRecord): void;
  onError: ErrorLogger;
}

/** A refusal shown on the error page (never redirected to the app). */
export class PageError extends Error {
  constructor(readonly page: AuthorizationErrorPage) {
    super(page.description);
  }
}

/** A {@link PageError} with its status, code and sentence. */
export function pageError(status: number, error: string, description: string): PageError {
  return new PageError({ status, error, description });
}
