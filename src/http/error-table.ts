import type { ErrorCode } from '../errors.js';
import type { FhirIssueCode, OAuthErrorType, ScimType } from './http-error.js';

/** How every router answers an error of one code. */
export interface ErrorAnswer {
  /**
   * HTTP status. An error that is not an `HttpError` is answered with it; an `HttpError` carries its
   * own status, which is this one or one of `otherStatuses`.
   */
  readonly status: number;
  /** Other statuses an `HttpError` of this code is thrown with. */
  readonly otherStatuses?: readonly number[];
  /** OperationOutcome `issue.code` on the FHIR routers (`fhirRouter`, `projectRouter`, `bulkExportRouter`). */
  readonly issue: FhirIssueCode;
  /** SCIM `scimType` on `scimRouter` (RFC 7644 §3.12), when one applies. */
  readonly scimType?: ScimType;
  /** OAuth 2.0 `error` on `tokenRouter` and `jwksHandler` (RFC 6749 §5.2). */
  readonly oauthError: OAuthErrorType | 'server_error';
  /** When it happens (one line of docs/errors.md). */
  readonly description: string;
  /**
   * Seconds of the `Retry-After` header of an answer to an error that is not an `HttpError` (an
   * `HttpError` carries its own headers).
   */
  readonly retryAfter?: number;
}

/** A row; the OAuth `error` follows the status unless given (5xx `server_error`, 401 `invalid_client`). */
function answer(
  status: number,
  issue: FhirIssueCode,
  description: string,
  more: Partial<Pick<ErrorAnswer, 'otherStatuses' | 'scimType' | 'oauthError' | 'retryAfter'>> = {},
): ErrorAnswer {
  const oauthError = status >= 500 ? 'server_error' : status === 401 ? 'invalid_client' : 'invalid_request';
  return { status, issue, oauthError, ...more, description };
}

/**
 * The one mapping from an error code to its answer on every router: HTTP status, FHIR
 * `issue.code`, SCIM `scimType` and OAuth `error`. `toOperationOutcome`, `toScimErrorResponse` and
 * `toOAuthErrorResponse` read it (a protocol's own error class keeps its own issue code, scimType or
 * `error` on its router); docs/errors.md is generated from it (`npm run docs:errors`).
 */
export const ERROR_TABLE: Readonly<Record<ErrorCode, ErrorAnswer>> = {
  // Any router
  ERR_BAD_REQUEST: answer(
    400,
    'invalid',
    'A request refused for a reason no other code names (a 4xx of the body parser keeps its status)',
  ),
  ERR_MALFORMED_URL: answer(400, 'invalid', 'A malformed `%`-escape in the path'),
  ERR_MALFORMED_REQUEST: answer(
    400,
    'structure',
    "A request Node's HTTP parser refused, such as a byte not allowed in a URL (`protectServer`)",
  ),
  ERR_INVALID_JSON: answer(400, 'invalid', 'The request body is not valid JSON', {
    scimType: 'invalidSyntax',
  }),
  ERR_JSON_TOO_DEEP: answer(400, 'invalid', 'The JSON body nests deeper than `maxJsonDepth` levels', {
    scimType: 'invalidSyntax',
  }),
  ERR_REQUEST_ABORTED: answer(400, 'invalid', 'The client aborted the request while sending the body'),
  ERR_UNAUTHORIZED: answer(401, 'login', 'No credentials, or bad ones (with `WWW-Authenticate`)'),
  ERR_FORBIDDEN: answer(403, 'forbidden', 'The caller may not do this (a SCIM 403, a caller in no project)'),
  ERR_USER_INACTIVE: answer(403, 'forbidden', 'The user principal is inactive (SCIM `active: false`)'),
  ERR_NOT_FOUND: answer(404, 'not-found', 'No such route or record (a SCIM 404, an unrouted path)'),
  ERR_METHOD_NOT_ALLOWED: answer(
    405,
    'not-supported',
    'The method is not allowed on this URL (with `Allow`)',
  ),
  ERR_REQUEST_TIMEOUT: answer(408, 'timeout', 'The request did not arrive in time (`protectServer`)'),
  ERR_CONFLICT: answer(409, 'conflict', 'The request conflicts with an existing record', {
    scimType: 'uniqueness',
  }),
  ERR_GONE: answer(
    410,
    'deleted',
    'The resource was deleted (a storage `NotFoundError` with `deleted: true`)',
  ),
  ERR_PRECONDITION_FAILED: answer(412, 'conflict', 'A version precondition (`If-Match`) did not hold'),
  ERR_BODY_TOO_LARGE: answer(413, 'too-costly', 'The request body is over the size limit'),
  ERR_UNSUPPORTED_MEDIA_TYPE: answer(415, 'not-supported', 'The `Content-Type` is not accepted here'),
  ERR_UNSUPPORTED_ENCODING: answer(
    415,
    'not-supported',
    'The body charset or `Content-Encoding` is not supported',
  ),
  ERR_TOO_MANY_FAILURES: answer(
    429,
    'throttled',
    'Too many failed Basic authentications from the address (with `Retry-After`)',
  ),
  ERR_HEADERS_TOO_LARGE: answer(
    431,
    'structure',
    "The request line or headers are over Node's header size limit (`protectServer`)",
  ),
  ERR_SECRET_CHECKS_BUSY: answer(
    503,
    'exception',
    'Too many client-secret checks running and queued (with `Retry-After: 1`)',
  ),
  ERR_INTERNAL: answer(
    500,
    'exception',
    'Anything else: a bug or an unexpected failure (details go to `onError` and `logger`)',
  ),

  // FhirError
  ERR_FHIR_INVALID: answer(
    400,
    'invalid',
    'A FHIR request or resource is invalid (with `expression`); 422 for a patch that cannot be applied, 412 for conditional criteria without a search parameter',
    { otherStatuses: [412, 422] },
  ),
  ERR_FHIR_STRUCTURE: answer(400, 'structure', 'An NDJSON line or resource is not well-formed'),
  ERR_FHIR_REQUIRED: answer(400, 'required', 'A required element, header or file is missing'),
  ERR_FHIR_VALUE: answer(400, 'value', 'A value is not allowed (validation)'),
  ERR_FHIR_LOGIN: answer(401, 'login', 'Authentication is required'),
  ERR_FHIR_FORBIDDEN: answer(
    403,
    'forbidden',
    'The access token does not cover this resource type or operation',
  ),
  ERR_FHIR_NOT_FOUND: answer(
    404,
    'not-found',
    'Unknown resource type, operation, version, Group or export file; 400 for an unknown value set or code system of a search (`:in`, `:below`, …)',
    { otherStatuses: [400] },
  ),
  ERR_FHIR_DELETED: answer(410, 'deleted', 'The resource was deleted'),
  ERR_FHIR_NOT_SUPPORTED: answer(400, 'not-supported', 'An unsupported parameter, type or method', {
    otherStatuses: [405],
  }),
  ERR_FHIR_DUPLICATE: answer(
    412,
    'duplicate',
    'Conditional create, update or (single) delete criteria match more than one resource',
  ),
  ERR_FHIR_CONFLICT: answer(
    409,
    'conflict',
    'The resource conflicts with an existing one, or the identity provider owns it through SCIM (a SCIM Group)',
    {
      scimType: 'uniqueness',
    },
  ),
  ERR_FHIR_TOO_COSTLY: answer(
    413,
    'too-costly',
    'Over a size limit; 429 when the project export files reach `maxProjectExportSize`; 412 when a multiple conditional delete matches more than `maxBundleEntries`; 400 when a search asks more than its `searchLimits` allow (an exact total past `maxAccurateTotal` among them) or a `_typeFilter` chain matches more than `maxTypeFilterMatches`',
    { otherStatuses: [429, 412, 400] },
  ),
  ERR_FHIR_THROTTLED: answer(
    429,
    'throttled',
    '`maxRunningExports` or `maxKickoffsPerHour` reached (with `Retry-After`)',
  ),
  ERR_FHIR_TRANSIENT: answer(
    503,
    'transient',
    'Free space in `exportDir` below `minFreeSpace`; start-up work held with `holdReadiness` not done yet (with `Retry-After`)',
  ),
  ERR_FHIR_TIMEOUT: answer(408, 'timeout', 'The operation took too long'),
  ERR_FHIR_EXCEPTION: answer(500, 'exception', 'An internal FHIR processing failure'),

  // ScimError
  ERR_SCIM_INVALID_FILTER: answer(400, 'invalid', 'A bad SCIM filter', { scimType: 'invalidFilter' }),
  ERR_SCIM_TOO_MANY: answer(400, 'invalid', 'The query would answer too many results', {
    scimType: 'tooMany',
  }),
  ERR_SCIM_UNIQUENESS: answer(
    409,
    'conflict',
    "`userName`, `externalId` or a group's `displayName` is taken",
    {
      scimType: 'uniqueness',
    },
  ),
  ERR_SCIM_MUTABILITY: answer(400, 'invalid', 'Changing `id`, `userType` or `meta`', {
    scimType: 'mutability',
  }),
  ERR_SCIM_INVALID_SYNTAX: answer(400, 'invalid', 'A malformed request shape', { scimType: 'invalidSyntax' }),
  ERR_SCIM_INVALID_PATH: answer(400, 'invalid', 'A bad PATCH path', { scimType: 'invalidPath' }),
  ERR_SCIM_NO_TARGET: answer(
    400,
    'invalid',
    'A PATCH `remove` without a path, or a path that selects nothing',
    {
      scimType: 'noTarget',
    },
  ),
  ERR_SCIM_INVALID_VALUE: answer(400, 'invalid', 'A bad attribute value, or a bad list query parameter', {
    scimType: 'invalidValue',
  }),
  ERR_SCIM_INVALID_VERS: answer(400, 'invalid', 'An unsupported SCIM protocol version', {
    scimType: 'invalidVers',
  }),
  ERR_SCIM_SENSITIVE: answer(400, 'invalid', 'Sensitive information in the request URI', {
    scimType: 'sensitive',
  }),

  // OAuthError
  ERR_OAUTH_INVALID_REQUEST: answer(
    400,
    'invalid',
    'Missing or repeated parameters, wrong content type, several authentication methods',
    { oauthError: 'invalid_request' },
  ),
  ERR_OAUTH_INVALID_CLIENT: answer(
    401,
    'login',
    'Unknown, revoked or project-less client, bad secret, or a refused client assertion',
    { oauthError: 'invalid_client' },
  ),
  ERR_OAUTH_INVALID_GRANT: answer(400, 'invalid', 'The grant is invalid', { oauthError: 'invalid_grant' }),
  ERR_OAUTH_UNAUTHORIZED_CLIENT: answer(400, 'forbidden', 'The client may not use this grant or method', {
    oauthError: 'unauthorized_client',
  }),
  ERR_OAUTH_UNSUPPORTED_GRANT_TYPE: answer(400, 'not-supported', 'Any grant but `client_credentials`', {
    oauthError: 'unsupported_grant_type',
  }),
  ERR_OAUTH_INVALID_SCOPE: answer(400, 'invalid', 'No requested scope can be granted', {
    oauthError: 'invalid_scope',
  }),
  ERR_OAUTH_SLOW_DOWN: answer(
    429,
    'throttled',
    'Too many failed authentications from the address or for the client (with `Retry-After`)',
    { oauthError: 'slow_down' },
  ),
  ERR_OAUTH_TEMPORARILY_UNAVAILABLE: answer(
    503,
    'transient',
    'Too many client-secret checks running and queued; start-up work held with `holdReadiness` not done yet (with `Retry-After: 1`)',
    { oauthError: 'temporarily_unavailable' },
  ),

  // Authentication, below the routers (each router answers them through its own error)
  ERR_ACCESS_TOKEN_INVALID: answer(
    401,
    'login',
    '`AccessTokenError`: a bad, expired or foreign access token',
  ),
  ERR_CLIENT_ASSERTION_INVALID: answer(401, 'login', '`ClientAssertionError`: a refused client assertion'),
  ERR_GATE_FULL: answer(
    503,
    'exception',
    '`GateFullError`: every slot and queue place of a concurrency gate taken',
  ),

  // Storage
  ERR_STORAGE_NOT_FOUND: answer(404, 'not-found', '`NotFoundError`: no such record in the project'),
  ERR_STORAGE_CONFLICT: answer(409, 'conflict', '`ConflictError`: a uniqueness rule would break', {
    scimType: 'uniqueness',
  }),
  ERR_STORAGE_PRECONDITION_FAILED: answer(
    412,
    'conflict',
    '`PreconditionFailedError`: a version precondition did not hold',
  ),
  ERR_STORAGE_INVALID: answer(
    400,
    'invalid',
    '`InvalidRecordError`: a record the storage cannot keep as given',
    {
      scimType: 'invalidValue',
    },
  ),
  ERR_STORAGE_CLOSED: answer(503, 'exception', '`StorageClosedError`: the store is closed (shutting down)'),
  ERR_STORAGE_LOCKED: answer(
    500,
    'exception',
    "`StorageLockedError`: the file store's directory is used by another process",
  ),
  ERR_STORAGE_BROKEN: answer(
    500,
    'exception',
    'Not thrown any more: a failed write is undone, see `ERR_STORAGE_UNAVAILABLE`',
  ),
  ERR_STORAGE_CORRUPT: answer(
    500,
    'exception',
    'A store file cut short or corrupt where data would be lost (the message names it)',
  ),
  ERR_STORAGE_UNAVAILABLE: answer(
    503,
    'transient',
    '`StorageUnavailableError`: disk full, I/O error, read-only dir, no database (`Retry-After: 1`)',
    { oauthError: 'temporarily_unavailable', retryAfter: 1 },
  ),
  ERR_STORAGE_TOO_COSTLY: answer(
    400,
    'too-costly',
    '`SearchTooCostlyError`: a search ran out of its time budget (`searchTimeoutMs`) and was stopped',
    { scimType: 'tooMany' },
  ),
  ERR_STORAGE_UNSUPPORTED_SEARCH: answer(
    400,
    'not-supported',
    '`UnsupportedSearchError`: a store asked a terminology filter (`:in`, `:below`, …) left unresolved',
  ),
  ERR_STORAGE_IN_TRANSACTION: answer(
    500,
    'exception',
    'A write through the store inside a transaction (write through `tx`)',
  ),
  ERR_STORAGE_TRANSACTION_ENDED: answer(
    500,
    'exception',
    'A write through a transaction view after it ended',
  ),
  ERR_STORAGE_TRANSACTION_ABORTED: answer(500, 'exception', 'The transaction was rolled back'),

  // Bulk export (below the router: a failed job keeps an OperationOutcome)
  ERR_EXPORT_TOO_LARGE: answer(
    413,
    'too-costly',
    '`ExportTooLargeError`: the export files would exceed `maxExportSize` (the job fails)',
  ),
  ERR_EXPORT_STOPPED: answer(500, 'exception', 'The export was stopped (cancelled or shutting down)'),
  ERR_EXPORT_JOB_INVALID: answer(500, 'exception', 'An export job record without a valid id or snapshot'),
  ERR_EXPORT_TASK_INVALID: answer(
    500,
    'exception',
    'An export task without a storage descriptor or reader, or a descriptor naming no export',
  ),
  ERR_EXPORT_POOL_CLOSED: answer(500, 'exception', 'The `ExportPool` is closed'),
  ERR_EXPORT_WORKER_NOT_FOUND: answer(
    500,
    'exception',
    'The export worker file is missing (build with tsup or pass `workerFilename`)',
  ),
  ERR_INVALID_TYPE_FILTER: answer(400, 'invalid', 'A `_typeFilter` the export cannot compile'),

  // Configuration
  ERR_INVALID_OPTION: answer(
    500,
    'exception',
    '`InvalidOptionError`: a factory was given an option it cannot use (thrown when called)',
  ),
};
