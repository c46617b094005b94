import type { Request, Response } from 'express';

/**
 * A sign-in that the authorization endpoint (SMART App Launch) waits for. The endpoint asks the
 * host's {@link AuthenticateUser} who the browser's user is, once when the authorization request
 * arrives and again each time the browser comes back to `resumeUrl`.
 */
export interface SignInRequest {
  /** The project whose users may sign in: the app's project. */
  projectId: string;
  /** The app's client id (for pages and audit). */
  clientId: string;
  /**
   * Absolute URL of the authorization endpoint that resumes this request. Send the browser there
   * (a 302/303) once the user is known; it carries `ticket`.
   */
  resumeUrl: string;
  /** Opaque id of the pending authorization; `resumeUrl` carries it. */
  ticket: string;
}

/**
 * Who signed in: the id of a SCIM user of `SignInRequest.projectId`. The authorization endpoint
 * still refuses a user who is unknown or inactive when it reads the record.
 */
export interface SignedInUser {
  userId: string;
}

/**
 * Signs the browser's user in for the authorization endpoint. Resolve the user once known, or
 * `undefined` after answering the request itself: a redirect to an identity provider, a sign-in
 * form, or a page that refuses the user and says why. The default is the federated sign-in with
 * the project's OpenID Connect identity provider; a host that signs users in another way passes
 * its own function.
 */
export type AuthenticateUser = (
  req: Request,
  res: Response,
  signIn: SignInRequest,
) => Promise<SignedInUser | undefined>;
