/**
 * The checks of an authorization request (RFC 6749 §4.1.1, PKCE RFC 7636 §4.3, SMART App Launch
 * "Obtain authorization code"), as pure functions: which problems are shown on a page (the client
 * or its redirect URI cannot be trusted: never redirect), and which go back to the app.
 */
import type { ClientRecord } from '../../storage/types.js';
import { isAdminScope } from '../access/admin-scopes.js';
import { userScopes } from '../token/user-token-grants.js';
import { S256_CHALLENGE } from '../token/user-grants.js';
import { splitScopes } from '../access/scopes.js';

/** The query of an authorization request, single values only (a repeated one is a problem). */
export type AuthorizationQuery = Record<string, string | undefined>;

/** A problem shown on the error page: the app cannot be told (RFC 6749 §4.1.2.1, first paragraph). */
export interface PageProblem {
  page: true;
  status: number;
  error: string;
  description: string;
}

/** A problem sent back to the app's redirect URI (RFC 6749 §4.1.2.1). */
export interface RedirectProblem {
  page: false;
  error: 'invalid_request' | 'unsupported_response_type' | 'invalid_scope' | 'unauthorized_client';
  description: string;
}

/** An accepted request: what the pending authorization keeps. */
export interface AcceptedAuthorization {
  redirectUri: string;
  state: string;
  scopes: string[];
  codeChallenge: string;
  nonce?: string;
  /** The app asked for `launch/patient`. */
  launchPatient: boolean;
}

const PARAMETERS = [
  'response_type',
  'client_id',
  'redirect_uri',
  'scope',
  'state',
  'aud',
  'code_challenge',
  'code_challenge_method',
  'nonce',
  'launch',
];

/** Reads the query: single string values only; `undefined` for a repeated or structured one. */
export function readAuthorizationQuery(query: Record<string, unknown>): AuthorizationQuery | undefined {
  const read: AuthorizationQuery = {};
  for (const name of PARAMETERS) {
    const value = query[name];
    if (value === undefined) continue;
    if (typeof value !== 'string') return undefined;
    if (value !== '') read[name] = value;
  }
  return read;
}

/** The client and redirect URI checks: a problem here is shown on a page, never redirected. */
export function checkClientAndRedirect(
  client: ClientRecord | undefined,
  redirectUri: string | undefined,
): PageProblem | undefined {
  if (!client || client.revoked || client.projectId === null) {
    return {
      page: true,
      status: 400,
      error: 'invalid_client',
      description: 'The app is unknown or no longer allowed.',
    };
  }
  if (!client.redirectUris?.length) {
    return {
      page: true,
      status: 400,
      error: 'invalid_client',
      description: 'The app is not registered for sign-in (it has no redirect URI).',
    };
  }
  if (redirectUri === undefined || !client.redirectUris.includes(redirectUri)) {
    return {
      page: true,
      status: 400,
      error: 'invalid_redirect_uri',
      description: 'The address the app asked to return to is not one it registered.',
    };
  }
  return undefined;
}

/** The remaining checks, once the client and redirect URI are trusted. */
export function checkAuthorizationRequest(
  client: ClientRecord,
  query: AuthorizationQuery,
  fhirBase: string,
): AcceptedAuthorization | RedirectProblem {
  const problem = (error: RedirectProblem['error'], description: string): RedirectProblem => ({
    page: false,
    error,
    description,
  });
  if (query.response_type !== 'code') {
    return problem('unsupported_response_type', 'response_type must be code');
  }
  if (query.state === undefined) return problem('invalid_request', 'state is required');
  if (query.code_challenge === undefined) {
    return problem('invalid_request', 'PKCE is required: code_challenge is missing');
  }
  if (query.code_challenge_method !== 'S256') {
    return problem('invalid_request', 'code_challenge_method must be S256');
  }
  if (!S256_CHALLENGE.test(query.code_challenge)) {
    return problem('invalid_request', 'code_challenge is not a base64url SHA-256');
  }
  const trim = (url: string) => url.replace(/\/+$/, '');
  if (query.aud === undefined || trim(query.aud) !== trim(fhirBase)) {
    return problem('invalid_request', `aud must be the FHIR base URL ${fhirBase}`);
  }
  if (query.launch !== undefined) {
    return problem(
      'invalid_request',
      'EHR launch is not supported: use a standalone launch (no launch parameter)',
    );
  }
  const requested = splitScopes(query.scope).filter((s) => !isAdminScope(s));
  if (requested.length === 0) return problem('invalid_scope', 'scope is required');
  const scopes = userScopes(client, requested);
  if (scopes.length === 0)
    return problem('invalid_scope', 'None of the requested scopes may be granted to this app');
  return {
    redirectUri: query.redirect_uri!,
    state: query.state,
    scopes,
    codeChallenge: query.code_challenge,
    ...(query.nonce !== undefined ? { nonce: query.nonce } : {}),
    launchPatient: scopes.includes('launch/patient'),
  };
}

/** The redirect URI with `params` added to its query (RFC 6749 §4.1.2: keep its own query). */
export function redirectWith(redirectUri: string, params: Record<string, string | undefined>): string {
  const url = new URL(redirectUri);
  for (const [name, value] of Object.entries(params))
    if (value !== undefined) url.searchParams.set(name, value);
  return url.toString();
}
