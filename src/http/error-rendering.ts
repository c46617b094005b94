import { randomUUID } from 'node:crypto';
import type { ErrorRequestHandler, Response } from 'express';
import { FhirError, HttpError, OAuthError, ScimError } from './http-error.js';
import {
  ConflictError,
  InvalidRecordError,
  NotFoundError,
  PreconditionFailedError,
  StorageClosedError,
  StorageError,
} from '../storage/errors.js';

/** Called with every error that becomes a 5xx answer; the default writes it to stderr. */
export type ErrorLogger = (error: unknown) => void;

export const defaultErrorLogger: ErrorLogger = (error) => {
  console.error('[fhir-platform-kit]', error);
};

interface BodyParserError {
  type?: string;
  status?: number;
  statusCode?: number;
  expose?: boolean;
}

/**
 * Normalises anything thrown inside a router to an `HttpError`: storage errors map to their HTTP
 * status, body-parser failures (too large, malformed JSON) to 413/400, anything else to 500.
 */
export function toHttpError(error: unknown): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof NotFoundError) {
    return error.deleted
      ? new HttpError(410, 'ERR_GONE', error.message, { cause: error })
      : new HttpError(404, 'ERR_NOT_FOUND', error.message, { cause: error });
  }
  if (error instanceof ConflictError) return new HttpError(409, 'ERR_CONFLICT', error.message, { cause: error });
  if (error instanceof PreconditionFailedError) {
    return new HttpError(412, 'ERR_PRECONDITION_FAILED', error.message, { cause: error });
  }
  if (error instanceof InvalidRecordError) {
    return new HttpError(400, 'ERR_INVALID_RECORD', error.message, { cause: error });
  }
  if (error instanceof StorageClosedError) {
    return new HttpError(503, 'ERR_UNAVAILABLE', 'The service is shutting down', { cause: error });
  }
  if (error instanceof StorageError) return new HttpError(500, error.code, 'Storage failure', { cause: error });
  // Express throws a bare URIError for a malformed %-escape in a path parameter.
  if (error instanceof URIError) {
    return new HttpError(400, 'ERR_MALFORMED_URL', 'Malformed percent-encoding in the URL', { cause: error });
  }
  const bodyError = (typeof error === 'object' && error !== null ? error : {}) as BodyParserError;
  switch (bodyError.type) {
    case 'entity.too.large':
      return new HttpError(413, 'ERR_BODY_TOO_LARGE', 'Request body is too large', { cause: error });
    case 'entity.parse.failed':
      return new HttpError(400, 'ERR_INVALID_JSON', 'Request body is not valid JSON', { cause: error });
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return new HttpError(415, 'ERR_UNSUPPORTED_ENCODING', 'Unsupported body encoding or charset', {
        cause: error,
      });
    case 'request.aborted':
      return new HttpError(400, 'ERR_REQUEST_ABORTED', 'Request aborted', { cause: error });
    default:
      break;
  }
  const status = bodyError.status ?? bodyError.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500 && bodyError.expose) {
    return new HttpError(status, 'ERR_BAD_REQUEST', 'Bad request', { cause: error });
  }
  return new HttpError(500, 'ERR_INTERNAL', 'Internal server error', { cause: error });
}

function applyHeaders(res: Response, error: HttpError): void {
  for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
}

/** Maps an HTTP status to an OperationOutcome issue code when the error does not carry one. */
function issueCodeFor(status: number): string {
  switch (status) {
    case 400:
    case 422:
      return 'invalid';
    case 401:
      return 'login';
    case 403:
      return 'forbidden';
    case 404:
    case 410:
      return 'not-found';
    case 405:
      return 'not-supported';
    case 409:
    case 412:
      return 'conflict';
    case 413:
      return 'too-costly';
    case 415:
      return 'not-supported';
    case 429:
      return 'throttled';
    default:
      return status >= 500 ? 'exception' : 'processing';
  }
}

/** An OperationOutcome with one issue. */
export function operationOutcome(
  severity: 'fatal' | 'error' | 'warning' | 'information',
  code: string,
  text: string,
  expression?: string[],
): Record<string, unknown> {
  return {
    resourceType: 'OperationOutcome',
    id: randomUUID(),
    issue: [{ severity, code, details: { text }, ...(expression ? { expression } : {}) }],
  };
}

function logIfServerError(error: HttpError, original: unknown, log: ErrorLogger): void {
  if (error.status >= 500) log(original);
}

/** Renders errors as FHIR OperationOutcome (`application/fhir+json`). */
export function fhirErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  return (err: unknown, _req, res, next) => {
    if (res.headersSent) return next(err);
    const error = toHttpError(err);
    logIfServerError(error, err, log);
    applyHeaders(res, error);
    const issueCode = error instanceof FhirError ? error.issueCode : issueCodeFor(error.status);
    const expression = error instanceof FhirError ? error.expression : undefined;
    const text = error.status >= 500 && !(error instanceof FhirError) ? 'Internal server error' : error.message;
    res
      .status(error.status)
      .type('application/fhir+json')
      .send(JSON.stringify(operationOutcome(error.status >= 500 ? 'fatal' : 'error', issueCode, text, expression)));
  };
}

/** SCIM error `scimType` for an error that does not carry one (RFC 7644 §3.12). */
function scimTypeFor(error: HttpError): string | undefined {
  if (error instanceof ScimError) return error.scimType;
  if (error.status === 409) return 'uniqueness';
  if (error.code === 'ERR_INVALID_JSON' || error.code === 'ERR_JSON_TOO_DEEP') return 'invalidSyntax';
  return undefined;
}

/** Renders errors as SCIM Error JSON (`application/scim+json`), RFC 7644 §3.12. */
export function scimErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  return (err: unknown, _req, res, next) => {
    if (res.headersSent) return next(err);
    const error = toHttpError(err);
    logIfServerError(error, err, log);
    applyHeaders(res, error);
    const scimType = scimTypeFor(error);
    const detail = error.status >= 500 && !(error instanceof ScimError) ? 'Internal server error' : error.message;
    res
      .status(error.status)
      .type('application/scim+json')
      .send(
        JSON.stringify({
          schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'],
          status: String(error.status),
          ...(scimType ? { scimType } : {}),
          detail,
        }),
      );
  };
}

/** Renders errors as RFC 6749 §5.2 JSON, with `Cache-Control: no-store`. */
export function oauthErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  return (err: unknown, _req, res, next) => {
    if (res.headersSent) return next(err);
    const error = toHttpError(err);
    logIfServerError(error, err, log);
    applyHeaders(res, error);
    let code: string;
    if (error instanceof OAuthError) code = error.error;
    else if (error.status >= 500) code = 'server_error';
    else if (error.status === 401) code = 'invalid_client';
    else code = 'invalid_request';
    const description = error.status >= 500 && !(error instanceof OAuthError) ? 'Internal server error' : error.message;
    res
      .status(error.status)
      .set('Cache-Control', 'no-store')
      .set('Pragma', 'no-cache')
      .json({ error: code, error_description: description });
  };
}
