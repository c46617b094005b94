import type { RequestHandler, Response } from 'express';
import { FhirError, ScimError } from './http-error.js';

export const FHIR_JSON = 'application/fhir+json';
export const SCIM_JSON = 'application/scim+json';

/** Sends `body` as FHIR JSON (`application/fhir+json`). */
export function sendFhir(res: Response, status: number, body: unknown): void {
  res.status(status).type(FHIR_JSON).send(JSON.stringify(body));
}

/** Sends `body` as SCIM JSON (`application/scim+json`, RFC 7644 §3.1). */
export function sendScim(res: Response, status: number, body: unknown): void {
  res.status(status).type(SCIM_JSON).send(JSON.stringify(body));
}

/**
 * Answers 405 with `Allow` (RFC 9110 §15.5.6), as an OperationOutcome `not-supported` on FHIR routes
 * or a SCIM Error on SCIM routes: the error goes to the router's error renderer.
 * @param allow the methods the URL accepts (`GET, POST`)
 * @default protocol 'fhir'
 */
export function methodNotAllowed(allow: string, protocol: 'fhir' | 'scim' = 'fhir'): RequestHandler {
  return (_req, _res, next) => {
    const headers = { Allow: allow };
    next(
      protocol === 'scim'
        ? new ScimError(405, undefined, 'Method not allowed', { headers })
        : new FhirError(405, 'not-supported', 'Method not allowed on this URL', { headers }),
    );
  };
}
