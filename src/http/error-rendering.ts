import type { ErrorRequestHandler, Request, Response } from 'express';
import { PlatformError } from '../errors.js';
import { FhirOutcomeError, outcomeOf, type OperationOutcome } from './outcome.js';
import { NotFoundError } from '../storage/errors.js';
import { errorFormatOf, type ErrorFormat, type ErrorPaths } from './error-paths.js';
import { ERROR_TABLE } from './error-table.js';
import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';
import { optionalFunction } from '../common/options.js';
import {
  errorCodeForStatus,
  FhirError,
  HttpError,
  OAuthError,
  ScimError,
  type OAuthErrorType,
  type ScimType,
  unsupportedEncoding,
} from './http-error.js';

/**
 * Called with every error that becomes a 5xx answer (with the request it answers, when there is
 * one) and with errors of background work; the default writes it to stderr.
 */
export type ErrorLogger = (error: unknown, req?: Request) => void;

export const defaultErrorLogger: ErrorLogger = (error) => {
  console.error('[fhir-platform-kit]', error);
};

interface BodyParserError {
  type?: string;
  status?: number;
  statusCode?: number;
  expose?: boolean;
}

/** The text of a 5xx answer: the details go to `onError`, never to the client. */
const HIDDEN = 'Internal server error';

/**
 * Normalises anything thrown inside a router to an `HttpError` whose `code` says how it is answered
 * (`ERROR_TABLE`): an `HttpError` as it is; a storage `NotFoundError` of a deleted resource as
 * `ERR_GONE` (410); any other `PlatformError` keeps its code, with the status of its row;
 * body-parser failures (too large, malformed JSON, …) and a malformed `%`-escape get their codes;
 * anything else is `ERR_INTERNAL` (500). A 5xx keeps no detail in its message.
 */
export function toHttpError(error: unknown): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof NotFoundError && error.deleted) {
    return new HttpError(410, 'ERR_GONE', error.message, { cause: error });
  }
  if (error instanceof PlatformError) {
    const { status, retryAfter } = ERROR_TABLE[error.code];
    const headers: Record<string, string> =
      retryAfter === undefined ? {} : { 'Retry-After': String(retryAfter) };
    return new HttpError(status, error.code, status >= 500 ? HIDDEN : error.message, {
      cause: error,
      headers,
    });
  }
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
      return unsupportedEncoding(error);
    case 'request.aborted':
      return new HttpError(400, 'ERR_REQUEST_ABORTED', 'Request aborted', { cause: error });
    default:
      break;
  }
  const status = bodyError.status ?? bodyError.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500 && bodyError.expose) {
    return new HttpError(status, errorCodeForStatus(status), 'Bad request', { cause: error });
  }
  return new HttpError(500, 'ERR_INTERNAL', HIDDEN, { cause: error });
}

/** An error answer: status, extra headers and the protocol body. */
export interface ErrorResponse<Body> {
  status: number;
  headers: Record<string, string>;
  body: Body;
}

/**
 * An error as a FHIR answer: its status, an OperationOutcome with one issue (`issue.code` from the
 * `FhirError`, else from `ERROR_TABLE`; `expression` when an input element is at fault; every issue
 * of a `FhirOutcomeError`) and its extra headers. A 5xx that is no `FhirError` says nothing more
 * than "Internal server error". Used by every FHIR router, batch entries and upload reports.
 */
export function toOperationOutcome(error: unknown): {
  status: number;
  outcome: OperationOutcome;
  headers: Record<string, string>;
} {
  const http = toHttpError(error);
  const { status, headers } = http;
  if (http instanceof FhirOutcomeError) return { status, outcome: outcomeOf(http.issues), headers };
  const fhir = http instanceof FhirError ? http : undefined;
  const code = fhir ? fhir.issueCode : ERROR_TABLE[http.code].issue;
  const text = status >= 500 && !fhir ? HIDDEN : http.message;
  const expression = fhir?.expression;
  const outcome = outcomeOf([
    {
      severity: status >= 500 ? 'fatal' : 'error',
      code,
      details: { text },
      ...(expression ? { expression } : {}),
    },
  ]);
  return { status, outcome, headers };
}

/** RFC 7644 §3.12 error body. */
export interface ScimErrorBody {
  schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'];
  /** The HTTP status, as a string. */
  status: string;
  scimType?: ScimType;
  detail: string;
}

/**
 * An error as a SCIM answer (RFC 7644 §3.12): `scimType` from the `ScimError`, else from
 * `ERROR_TABLE` when one applies. A 5xx that is no `ScimError` says only "Internal server error".
 */
export function toScimErrorResponse(error: unknown): ErrorResponse<ScimErrorBody> {
  const http = toHttpError(error);
  const own = http instanceof ScimError;
  const scimType = own ? http.scimType : ERROR_TABLE[http.code].scimType;
  return {
    status: http.status,
    headers: http.headers,
    body: {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'],
      status: String(http.status),
      ...(scimType ? { scimType } : {}),
      detail: http.status >= 500 && !own ? HIDDEN : http.message,
    },
  };
}

/** RFC 6749 §5.2 error body. */
export interface OAuthErrorBody {
  error: OAuthErrorType | 'server_error';
  error_description: string;
}

/**
 * An error as an OAuth 2.0 answer (RFC 6749 §5.2): `error` from the `OAuthError`, else from
 * `ERROR_TABLE`; `Cache-Control: no-store`. A 5xx that is no `OAuthError` says only "Internal
 * server error".
 */
export function toOAuthErrorResponse(error: unknown): ErrorResponse<OAuthErrorBody> {
  const http = toHttpError(error);
  const own = http instanceof OAuthError;
  return {
    status: http.status,
    headers: { ...http.headers, 'Cache-Control': 'no-store', Pragma: 'no-cache' },
    body: {
      error: own ? http.error : ERROR_TABLE[http.code].oauthError,
      error_description: http.status >= 500 && !own ? HIDDEN : http.message,
    },
  };
}

/** An error answer ready to write: status, headers (its media type included) and the body. */
export interface RenderedError {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * An error as an answer in one protocol, with the renderer its routers use: FHIR OperationOutcome
 * (`application/fhir+json`), SCIM Error (`application/scim+json`) or OAuth 2.0 error JSON.
 */
export function renderError(error: unknown, format: ErrorFormat): RenderedError {
  switch (format) {
    case 'scim': {
      const { status, headers, body } = toScimErrorResponse(error);
      const type = 'application/scim+json; charset=utf-8';
      return { status, headers: { ...headers, 'Content-Type': type }, body: JSON.stringify(body) };
    }
    case 'oauth': {
      const { status, headers, body } = toOAuthErrorResponse(error);
      const type = 'application/json; charset=utf-8';
      return { status, headers: { ...headers, 'Content-Type': type }, body: JSON.stringify(body) };
    }
    case 'fhir': {
      const { status, headers, outcome } = toOperationOutcome(error);
      const type = 'application/fhir+json; charset=utf-8';
      return { status, headers: { ...headers, 'Content-Type': type }, body: JSON.stringify(outcome) };
    }
  }
}

/**
 * `toOperationOutcome` for one entry of a batch or one line of an upload: 5xx errors go to `log`.
 */
export function errorOutcome(
  error: unknown,
  log: ErrorLogger = defaultErrorLogger,
): { status: number; outcome: OperationOutcome } {
  const { status, outcome } = toOperationOutcome(error);
  if (status >= 500) log(error);
  return { status, outcome };
}

/**
 * An OperationOutcome with one issue. Kept for compatibility: it builds with `outcomeOf`, the one
 * OperationOutcome builder; errors are answered with `toOperationOutcome`.
 */
export function operationOutcome(
  severity: 'fatal' | 'error' | 'warning' | 'information',
  code: string,
  text: string,
  expression?: string[],
): Record<string, unknown> {
  return { ...outcomeOf([{ severity, code, details: { text }, ...(expression ? { expression } : {}) }]) };
}

function send(res: Response, answer: { status: number; headers: Record<string, string> }): Response {
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  return res.status(answer.status);
}

/** Renders errors as FHIR OperationOutcome (`application/fhir+json`) with `toOperationOutcome`. */
export function fhirErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  return (err: unknown, req, res, next) => {
    if (res.headersSent) return next(err);
    const answer = toOperationOutcome(err);
    if (answer.status >= 500) log(err, req);
    send(res, answer).type('application/fhir+json').send(JSON.stringify(answer.outcome));
  };
}

/** Renders errors as SCIM Error JSON (`application/scim+json`), RFC 7644 §3.12, with `toScimErrorResponse`. */
export function scimErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  return (err: unknown, req, res, next) => {
    if (res.headersSent) return next(err);
    const answer = toScimErrorResponse(err);
    if (answer.status >= 500) log(err, req);
    send(res, answer).type('application/scim+json').send(JSON.stringify(answer.body));
  };
}

/** Renders errors as RFC 6749 §5.2 JSON, with `Cache-Control: no-store`, with `toOAuthErrorResponse`. */
export function oauthErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  return (err: unknown, req, res, next) => {
    if (res.headersSent) return next(err);
    const answer = toOAuthErrorResponse(err);
    if (answer.status >= 500) log(err, req);
    send(res, answer).json(answer.body);
  };
}

/** Options of {@link fallbackErrorHandler}. */
export interface FallbackErrorHandlerOptions {
  /**
   * Which paths answer SCIM or OAuth errors rather than OperationOutcomes.
   * @default { scim: ['/scim/v2'], oauth: ['/oauth2/token', '/oauth2/jwks'] }
   */
  errorPaths?: ErrorPaths;
  /**
   * Called with each error answered with a 5xx.
   * @default writes it to stderr
   */
  onError?: ErrorLogger;
}

const FALLBACK_KEYS: OptionKeys<FallbackErrorHandlerOptions> = { errorPaths: true, onError: true };

/**
 * The last error handler of a host app, for errors no router answered (a host's own body parser
 * refusing a body before the routers, a malformed `%`-escape in its own route): each in the
 * protocol of its path (`errorPaths`), as the routers there answer. Same renderers as the routers.
 */
export function fallbackErrorHandler(options: FallbackErrorHandlerOptions = {}): ErrorRequestHandler {
  const owner = 'fallbackErrorHandler';
  checkOptionKeys(owner, options, FALLBACK_KEYS);
  const formatOf = errorFormatOf(owner, options.errorPaths);
  const log = optionalFunction(owner, 'onError', options.onError, defaultErrorLogger);
  return (err: unknown, req, res, next) => {
    if (res.headersSent) return next(err);
    const answer = renderError(err, formatOf(req.originalUrl));
    if (answer.status >= 500) log(err, req);
    send(res, answer).send(answer.body);
  };
}
