/**
 * The error family routers throw. Each router renders it in its own protocol: SCIM Error JSON,
 * FHIR OperationOutcome or OAuth 2.0 error JSON. `code` is stable (see docs/errors.md).
 */
export class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  /** Extra response headers (`WWW-Authenticate`, `Retry-After`, `Allow`, …). */
  readonly headers: Record<string, string>;
  constructor(
    status: number,
    code: string,
    message: string,
    options?: { headers?: Record<string, string>; cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.headers = options?.headers ?? {};
  }
}

/** RFC 7644 §3.12 error with an optional `scimType`. */
export class ScimError extends HttpError {
  readonly scimType?: string;
  constructor(
    status: number,
    scimType: string | undefined,
    message: string,
    options?: { headers?: Record<string, string>; cause?: unknown },
  ) {
    super(status, scimType ? `ERR_SCIM_${scimType.toUpperCase()}` : `ERR_SCIM_${status}`, message, options);
    this.scimType = scimType;
  }
}

/** A FHIR error rendered as an OperationOutcome with one issue. */
export class FhirError extends HttpError {
  /** OperationOutcome `issue.code` (`invalid`, `not-found`, `forbidden`, …). */
  readonly issueCode: string;
  readonly expression?: string[];
  constructor(
    status: number,
    issueCode: string,
    message: string,
    options?: { expression?: string[]; headers?: Record<string, string>; cause?: unknown },
  ) {
    super(status, `ERR_FHIR_${issueCode.toUpperCase().replace(/-/g, '_')}`, message, options);
    this.issueCode = issueCode;
    this.expression = options?.expression;
  }
}

/** RFC 6749 §5.2 error (`invalid_client`, `invalid_request`, …). */
export class OAuthError extends HttpError {
  readonly error: string;
  constructor(
    status: number,
    error: string,
    description: string,
    options?: { headers?: Record<string, string>; cause?: unknown },
  ) {
    super(status, `ERR_OAUTH_${error.toUpperCase()}`, description, options);
    this.error = error;
  }
}
