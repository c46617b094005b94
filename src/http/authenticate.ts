import type { RequestHandler, Response } from 'express';
import type { Authenticate, Principal } from './principal.js';
import { NotFoundError } from '../storage/errors.js';
import type { Storage } from '../storage/types.js';
import { asyncHandler } from './async-handler.js';
import { HttpError } from './http-error.js';

const PRINCIPAL = 'fhirPlatformKitPrincipal';

/** An `HttpError` 401 carrying `WWW-Authenticate: Bearer` (RFC 6750 §3). */
export function unauthorized(message = 'Authentication required', error?: 'invalid_token'): HttpError {
  const challenge = error
    ? `Bearer realm="fhir-platform-kit", error="${error}", error_description="${message.replace(/"/g, "'")}"`
    : 'Bearer realm="fhir-platform-kit"';
  return new HttpError(401, 'ERR_UNAUTHORIZED', message, { headers: { 'WWW-Authenticate': challenge } });
}

/**
 * Middleware that resolves the caller with `authenticate` and keeps it for the route handlers;
 * no principal answers 401 through the router's error renderer. With `storage`, a user principal
 * must still exist in its project (401 otherwise) and be active (403 otherwise): SCIM
 * `active: false` stops a user from acting in the project.
 */
export function requirePrincipal(authenticate: Authenticate, storage?: Storage): RequestHandler {
  return asyncHandler(async (req, res, next) => {
    const principal = await authenticate(req);
    if (!principal) throw unauthorized();
    if (storage && principal.kind === 'user' && principal.projectId)
      await assertActiveUser(storage, principal);
    res.locals[PRINCIPAL] = principal;
    next();
  });
}

async function assertActiveUser(storage: Storage, principal: Principal): Promise<void> {
  try {
    const user = await storage.readUser(principal.projectId!, principal.id);
    if (!user.active) throw new HttpError(403, 'ERR_USER_INACTIVE', 'The user is inactive');
  } catch (error) {
    if (error instanceof NotFoundError) throw unauthorized('The user no longer exists', 'invalid_token');
    throw error;
  }
}

/** The principal `requirePrincipal` resolved for this request, if any (for logs). */
export function findPrincipal(res: Response): Principal | undefined {
  return res.locals[PRINCIPAL] as Principal | undefined;
}

/** The principal `requirePrincipal` resolved for this request. */
export function getPrincipal(res: Response): Principal {
  const principal = res.locals[PRINCIPAL] as Principal | undefined;
  if (!principal) throw unauthorized();
  return principal;
}

/** The principal's project, or 403 for a principal outside any project. */
export function requireProjectId(principal: Principal): string {
  if (!principal.projectId) throw new HttpError(403, 'ERR_FORBIDDEN', 'The caller acts in no project');
  return principal.projectId;
}
