import type { Request } from 'express';

/** Who is calling. Every router acts only on the principal's project. */
export interface Principal {
  /** The project the principal acts in; null only for a super admin outside any project. */
  projectId: string | null;
  kind: 'client' | 'user' | 'super-admin';
  /** Client id or user id. */
  id: string;
  /** Granted scopes (SMART v1 or v2 syntax). */
  scopes: string[];
  /** Project-admin rights in `projectId`. */
  admin: boolean;
  /** May create projects and administer any project. */
  superAdmin: boolean;
  /** For a user (`kind` `user`) signed in through an app: the app's client id. */
  clientId?: string;
  /** For a user: the profile resource as a relative reference (`Patient/123`). */
  fhirUser?: string;
  /** For a user: the launch context patient's id, which `patient/` scopes are limited to. */
  patientId?: string;
}

/**
 * Turns a request into a principal. Resolve `undefined` when the request carries no usable
 * credentials (the router answers 401); throw an `HttpError` for a more precise answer.
 */
export type Authenticate = (req: Request) => Promise<Principal | undefined> | Principal | undefined;
