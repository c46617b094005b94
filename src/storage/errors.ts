import { PlatformError, type StorageErrorCode } from '../errors.js';

/** Base class of every storage failure; `code` is stable and documented in docs/errors.md. */
export class StorageError extends PlatformError {
  declare readonly code: StorageErrorCode;
  constructor(code: StorageErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** The record does not exist in that project (or was deleted). */
export class NotFoundError extends StorageError {
  /** True when the resource existed and was deleted (FHIR answers 410 Gone for it). */
  readonly deleted: boolean;
  constructor(message: string, options?: { deleted?: boolean; cause?: unknown }) {
    super('ERR_STORAGE_NOT_FOUND', message, options);
    this.deleted = options?.deleted ?? false;
  }
}

/** A uniqueness rule would break (existing id, `userName`, `externalId`, …). */
export class ConflictError extends StorageError {
  /** The attribute whose uniqueness would break, when known. */
  readonly attribute?: string;
  constructor(message: string, options?: { attribute?: string; cause?: unknown }) {
    super('ERR_STORAGE_CONFLICT', message, options);
    this.attribute = options?.attribute;
  }
}

/** A version precondition (`ifMatch`, `ifVersion`) did not hold. */
export class PreconditionFailedError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_PRECONDITION_FAILED', message, options);
  }
}

/** The store was closed, or is locked by another process. */
export class StorageClosedError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_CLOSED', message, options);
  }
}

/** The directory is in use by another process. */
export class StorageLockedError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_LOCKED', message, options);
  }
}

/**
 * The storage cannot read or write its files or reach its database (disk full, an I/O error, a
 * read-only or inaccessible directory, the database unreachable). The store recovers by itself, so
 * the same call may succeed later (routers answer 503 with `Retry-After`). The file store keeps
 * nothing of a write that fails so; with PostgreSQL, a connection lost while a commit was in
 * flight leaves that commit's outcome unknown. `cause` is the original error (its `code`:
 * `ENOSPC`, `EIO`, `EROFS`, `ECONNREFUSED`, a SQLSTATE, …).
 */
export class StorageUnavailableError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_UNAVAILABLE', message, options);
  }
}

/**
 * A search ran out of its time (`ResourceQuery.deadline`): the store stopped it and released what
 * it held. The request, not the store, is at fault: asked again as it is, it would run out again
 * (routers answer 400 `too-costly`, telling the caller to narrow it).
 */
export class SearchTooCostlyError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_TOO_COSTLY', message, options);
  }
}

/**
 * A search the store does not answer as given: a token terminology filter (`:in`, `:not-in`, a
 * token's `:below` / `:above`) the caller did not resolve into plain values first (the FHIR router
 * does). Refused rather than read as a plain token test, which would answer wrongly (routers answer
 * 400 `not-supported`).
 */
export class UnsupportedSearchError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_UNSUPPORTED_SEARCH', message, options);
  }
}

/** A record the storage cannot keep as given (bad resource type, empty id or userName, …). */
export class InvalidRecordError extends StorageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORAGE_INVALID', message, options);
  }
}
