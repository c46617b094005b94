/**
 * The root of every error the kit throws, and the codes they carry. Neutral: no protocol, no
 * Express; storage and the routers both build on it. How each code is answered over HTTP (status,
 * OperationOutcome `issue.code`, SCIM `scimType`, OAuth `error`) is `ERROR_TABLE`
 * (src/http/error-table.ts), listed in docs/errors.md.
 */

/** Storage failures (`StorageError` and its subclasses), for adapter authors. */
export type StorageErrorCode =
  | 'ERR_STORAGE_NOT_FOUND'
  | 'ERR_STORAGE_CONFLICT'
  | 'ERR_STORAGE_PRECONDITION_FAILED'
  | 'ERR_STORAGE_INVALID'
  | 'ERR_STORAGE_CLOSED'
  | 'ERR_STORAGE_LOCKED'
  | 'ERR_STORAGE_BROKEN'
  | 'ERR_STORAGE_CORRUPT'
  | 'ERR_STORAGE_UNAVAILABLE'
  | 'ERR_STORAGE_TOO_COSTLY'
  | 'ERR_STORAGE_UNSUPPORTED_SEARCH'
  | 'ERR_STORAGE_IN_TRANSACTION'
  | 'ERR_STORAGE_TRANSACTION_ENDED'
  | 'ERR_STORAGE_TRANSACTION_ABORTED';

/** `FhirError` codes: `ERR_FHIR_` and the OperationOutcome issue code. */
export type FhirErrorCode =
  | 'ERR_FHIR_INVALID'
  | 'ERR_FHIR_STRUCTURE'
  | 'ERR_FHIR_REQUIRED'
  | 'ERR_FHIR_VALUE'
  | 'ERR_FHIR_LOGIN'
  | 'ERR_FHIR_FORBIDDEN'
  | 'ERR_FHIR_NOT_FOUND'
  | 'ERR_FHIR_DELETED'
  | 'ERR_FHIR_NOT_SUPPORTED'
  | 'ERR_FHIR_DUPLICATE'
  | 'ERR_FHIR_CONFLICT'
  | 'ERR_FHIR_TOO_COSTLY'
  | 'ERR_FHIR_THROTTLED'
  | 'ERR_FHIR_TRANSIENT'
  | 'ERR_FHIR_TIMEOUT'
  | 'ERR_FHIR_EXCEPTION';

/** `ScimError` codes with a `scimType`: `ERR_SCIM_` and the scimType (RFC 7644 §3.12). */
export type ScimErrorCode =
  | 'ERR_SCIM_INVALID_FILTER'
  | 'ERR_SCIM_TOO_MANY'
  | 'ERR_SCIM_UNIQUENESS'
  | 'ERR_SCIM_MUTABILITY'
  | 'ERR_SCIM_INVALID_SYNTAX'
  | 'ERR_SCIM_INVALID_PATH'
  | 'ERR_SCIM_NO_TARGET'
  | 'ERR_SCIM_INVALID_VALUE'
  | 'ERR_SCIM_INVALID_VERS'
  | 'ERR_SCIM_SENSITIVE';

/** `OAuthError` codes: `ERR_OAUTH_` and the OAuth `error` (RFC 6749 §5.2, RFC 8628 `slow_down`). */
export type OAuthErrorCode =
  | 'ERR_OAUTH_INVALID_REQUEST'
  | 'ERR_OAUTH_INVALID_CLIENT'
  | 'ERR_OAUTH_INVALID_GRANT'
  | 'ERR_OAUTH_UNAUTHORIZED_CLIENT'
  | 'ERR_OAUTH_UNSUPPORTED_GRANT_TYPE'
  | 'ERR_OAUTH_INVALID_SCOPE'
  | 'ERR_OAUTH_SLOW_DOWN'
  | 'ERR_OAUTH_TEMPORARILY_UNAVAILABLE';

/** Every code an error of the kit carries. Stable: a code is never reused for another meaning. */
export type ErrorCode =
  // Any router, whatever its protocol (`HttpError`; a `ScimError` without scimType by its status)
  | 'ERR_BAD_REQUEST'
  | 'ERR_MALFORMED_URL'
  | 'ERR_MALFORMED_REQUEST'
  | 'ERR_INVALID_JSON'
  | 'ERR_JSON_TOO_DEEP'
  | 'ERR_REQUEST_ABORTED'
  | 'ERR_UNAUTHORIZED'
  | 'ERR_FORBIDDEN'
  | 'ERR_USER_INACTIVE'
  | 'ERR_NOT_FOUND'
  | 'ERR_METHOD_NOT_ALLOWED'
  | 'ERR_REQUEST_TIMEOUT'
  | 'ERR_CONFLICT'
  | 'ERR_GONE'
  | 'ERR_PRECONDITION_FAILED'
  | 'ERR_BODY_TOO_LARGE'
  | 'ERR_UNSUPPORTED_MEDIA_TYPE'
  | 'ERR_UNSUPPORTED_ENCODING'
  | 'ERR_TOO_MANY_FAILURES'
  | 'ERR_HEADERS_TOO_LARGE'
  | 'ERR_SECRET_CHECKS_BUSY'
  | 'ERR_INTERNAL'
  // Protocol errors
  | FhirErrorCode
  | ScimErrorCode
  | OAuthErrorCode
  // Authentication
  | 'ERR_ACCESS_TOKEN_INVALID'
  | 'ERR_CLIENT_ASSERTION_INVALID'
  | 'ERR_GATE_FULL'
  // Storage
  | StorageErrorCode
  // Bulk export
  | 'ERR_EXPORT_TOO_LARGE'
  | 'ERR_EXPORT_STOPPED'
  | 'ERR_EXPORT_JOB_INVALID'
  | 'ERR_EXPORT_TASK_INVALID'
  | 'ERR_EXPORT_POOL_CLOSED'
  | 'ERR_EXPORT_WORKER_NOT_FOUND'
  | 'ERR_INVALID_TYPE_FILTER'
  // Configuration
  | 'ERR_INVALID_OPTION';

/**
 * The base class of every error the kit throws. `code` is stable and documented (docs/errors.md);
 * the message is for people and logs, and may change. Match on `code` (or the subclass), never on
 * the message.
 */
export class PlatformError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/**
 * A factory (`fhirRouter`, `fileStorage`, `protectServer`, …) was given an option it cannot use.
 * Thrown at once, when the factory is called, never while serving a request.
 */
export class InvalidOptionError extends PlatformError {
  declare readonly code: 'ERR_INVALID_OPTION';
  /** The option at fault (`retention`, `rateLimit.windowSeconds`), when known. */
  readonly option?: string;
  constructor(message: string, option?: string) {
    super('ERR_INVALID_OPTION', message);
    if (option !== undefined) this.option = option;
  }
}
