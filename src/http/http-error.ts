import {
  PlatformError,
  type ErrorCode,
  type FhirErrorCode,
  type OAuthErrorCode,
  type ScimErrorCode,
} from '../errors.js';

/** The code of an error known only by its HTTP status (a `ScimError` without scimType, a body-parser error). */
const STATUS_ERROR_CODES: Readonly<Record<number, ErrorCode>> = {
  400: 'ERR_BAD_REQUEST',
  401: 'ERR_UNAUTHORIZED',
  403: 'ERR_FORBIDDEN',
  404: 'ERR_NOT_FOUND',
  405: 'ERR_METHOD_NOT_ALLOWED',
  408: 'ERR_REQUEST_TIMEOUT',
  409: 'ERR_CONFLICT',
  410: 'ERR_GONE',
  412: 'ERR_PRECONDITION_FAILED',
  413: 'ERR_BODY_TOO_LARGE',
  415: 'ERR_UNSUPPORTED_MEDIA_TYPE',
  431: 'ERR_HEADERS_TOO_LARGE',
};

/** The code of an error known only by its HTTP status: `ERR_BAD_REQUEST` or `ERR_INTERNAL` when none is specific. */
export function errorCodeForStatus(status: number): ErrorCode {
  return STATUS_ERROR_CODES[status] ?? (status >= 500 ? 'ERR_INTERNAL' : 'ERR_BAD_REQUEST');
}

const FHIR_ISSUE_ERROR_CODES = {
  invalid: 'ERR_FHIR_INVALID',
  structure: 'ERR_FHIR_STRUCTURE',
  required: 'ERR_FHIR_REQUIRED',
  value: 'ERR_FHIR_VALUE',
  login: 'ERR_FHIR_LOGIN',
  forbidden: 'ERR_FHIR_FORBIDDEN',
  'not-found': 'ERR_FHIR_NOT_FOUND',
  deleted: 'ERR_FHIR_DELETED',
  'not-supported': 'ERR_FHIR_NOT_SUPPORTED',
  duplicate: 'ERR_FHIR_DUPLICATE',
  conflict: 'ERR_FHIR_CONFLICT',
  'too-costly': 'ERR_FHIR_TOO_COSTLY',
  throttled: 'ERR_FHIR_THROTTLED',
  transient: 'ERR_FHIR_TRANSIENT',
  timeout: 'ERR_FHIR_TIMEOUT',
  exception: 'ERR_FHIR_EXCEPTION',
} as const satisfies Record<string, FhirErrorCode>;

/**
 * The OperationOutcome issue codes (R4 IssueType) an error is answered with.
 * @useDeclaredType
 */
export type FhirIssueCode = keyof typeof FHIR_ISSUE_ERROR_CODES;

/** True when `code` is an issue code a `FhirError` can carry. */
export function isFhirIssueCode(code: unknown): code is FhirIssueCode {
  return typeof code === 'string' && Object.hasOwn(FHIR_ISSUE_ERROR_CODES, code);
}

const SCIM_TYPE_ERROR_CODES = {
  invalidFilter: 'ERR_SCIM_INVALID_FILTER',
  tooMany: 'ERR_SCIM_TOO_MANY',
  uniqueness: 'ERR_SCIM_UNIQUENESS',
  mutability: 'ERR_SCIM_MUTABILITY',
  invalidSyntax: 'ERR_SCIM_INVALID_SYNTAX',
  invalidPath: 'ERR_SCIM_INVALID_PATH',
  noTarget: 'ERR_SCIM_NO_TARGET',
  invalidValue: 'ERR_SCIM_INVALID_VALUE',
  invalidVers: 'ERR_SCIM_INVALID_VERS',
  sensitive: 'ERR_SCIM_SENSITIVE',
} as const satisfies Record<string, ScimErrorCode>;

/**
 * The SCIM `scimType` values (RFC 7644 §3.12).
 * @useDeclaredType
 */
export type ScimType = keyof typeof SCIM_TYPE_ERROR_CODES;

const OAUTH_ERROR_CODES = {
  invalid_request: 'ERR_OAUTH_INVALID_REQUEST',
  invalid_client: 'ERR_OAUTH_INVALID_CLIENT',
  invalid_grant: 'ERR_OAUTH_INVALID_GRANT',
  unauthorized_client: 'ERR_OAUTH_UNAUTHORIZED_CLIENT',
  unsupported_grant_type: 'ERR_OAUTH_UNSUPPORTED_GRANT_TYPE',
  invalid_scope: 'ERR_OAUTH_INVALID_SCOPE',
  slow_down: 'ERR_OAUTH_SLOW_DOWN',
  temporarily_unavailable: 'ERR_OAUTH_TEMPORARILY_UNAVAILABLE',
} as const satisfies Record<string, OAuthErrorCode>;

/**
 * The OAuth 2.0 `error` values the token endpoint answers (RFC 6749 §5.2, plus `slow_down` and
 * `temporarily_unavailable`).
 * @useDeclaredType
 */
export type OAuthErrorType = keyof typeof OAUTH_ERROR_CODES;

/**
 * The error family routers throw. Each router renders it in its own protocol: SCIM Error JSON,
 * FHIR OperationOutcome or OAuth 2.0 error JSON, as `ERROR_TABLE` says for its `code`.
 */
export class HttpError extends PlatformError {
  readonly status: number;
  /** Extra response headers (`WWW-Authenticate`, `Retry-After`, `Allow`, …). */
  readonly headers: Record<string, string>;
  constructor(
    status: number,
    code: ErrorCode,
    message: string,
    options?: { headers?: Record<string, string>; cause?: unknown },
  ) {
    super(code, message, options);
    this.status = status;
    this.headers = options?.headers ?? {};
  }
}

/**
 * RFC 7644 §3.12 error with an optional `scimType`. Its code is `ERR_SCIM_` and the scimType, or
 * without one the code of its status (`ERR_NOT_FOUND`, `ERR_METHOD_NOT_ALLOWED`, …).
 */
export class ScimError extends HttpError {
  readonly scimType?: ScimType;
  constructor(
    status: number,
    scimType: ScimType | undefined,
    message: string,
    options?: { headers?: Record<string, string>; cause?: unknown },
  ) {
    super(status, scimType ? SCIM_TYPE_ERROR_CODES[scimType] : errorCodeForStatus(status), message, options);
    this.scimType = scimType;
  }
}

/** A FHIR error rendered as an OperationOutcome with one issue. Its code is `ERR_FHIR_` and the issue code. */
export class FhirError extends HttpError {
  /** OperationOutcome `issue.code` (`invalid`, `not-found`, `forbidden`, …). */
  readonly issueCode: FhirIssueCode;
  readonly expression?: string[];
  constructor(
    status: number,
    issueCode: FhirIssueCode,
    message: string,
    options?: { expression?: string[]; headers?: Record<string, string>; cause?: unknown },
  ) {
    super(status, FHIR_ISSUE_ERROR_CODES[issueCode], message, options);
    this.issueCode = issueCode;
    this.expression = options?.expression;
  }
}

/** RFC 6749 §5.2 error (`invalid_client`, `invalid_request`, …). Its code is `ERR_OAUTH_` and the error. */
export class OAuthError extends HttpError {
  readonly error: OAuthErrorType;
  constructor(
    status: number,
    error: OAuthErrorType,
    description: string,
    options?: { headers?: Record<string, string>; cause?: unknown },
  ) {
    super(status, OAUTH_ERROR_CODES[error], description, options);
    this.error = error;
  }
}

/** A 415 for a body whose charset or `Content-Encoding` is not supported (every router answers it alike). */
export function unsupportedEncoding(cause?: unknown): HttpError {
  return new HttpError(415, 'ERR_UNSUPPORTED_ENCODING', 'Unsupported body encoding or charset', { cause });
}
