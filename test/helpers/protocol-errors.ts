import type request from 'supertest';
import { expect } from 'vitest';

const SCIM_ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

/** A FHIR error answer: `status`, `application/fhir+json`, an OperationOutcome whose first issue has `code`. */
export function expectOperationOutcome(res: request.Response, status: number, code?: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
  expect(res.body.resourceType).toBe('OperationOutcome');
  if (code !== undefined) expect(res.body.issue[0].code).toBe(code);
}

/** A SCIM Error answer (RFC 7644 §3.12): `status`, `application/scim+json`, and `scimType` when given. */
export function expectScimError(res: request.Response, status: number, scimType?: string): void {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
  expect(res.body.schemas).toEqual([SCIM_ERROR]);
  expect(res.body.status).toBe(String(status));
  if (scimType) expect(res.body.scimType).toBe(scimType);
}

/** An OAuth 2.0 error answer (RFC 6749 §5.2): `status`, JSON, and its `error` code. */
export function expectOAuthError(res: request.Response, status: number, error: string): void {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.body.error).toBe(error);
}

/** A 400 `invalid` OperationOutcome whose first issue points at `expression` (the element at fault). */
export function expectInvalidParameter(res: request.Response, expression: string): void {
  expectOperationOutcome(res, 400, 'invalid');
  expect(res.body.issue[0].expression).toEqual([expression]);
}
