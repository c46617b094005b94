import { ScimError } from '../http/http-error.js';
import {
  ConflictError,
  InvalidRecordError,
  NotFoundError,
  PreconditionFailedError,
  StorageError,
} from '../storage/errors.js';

/** Maps storage failures to SCIM errors (RFC 7644 §3.12); anything else is returned as it is. */
export function scimStorageError(error: unknown): unknown {
  if (!(error instanceof StorageError)) return error;
  if (error instanceof NotFoundError)
    return new ScimError(error.deleted ? 410 : 404, undefined, 'Resource not found', { cause: error });
  if (error instanceof ConflictError) {
    const what = error.attribute
      ? `${error.attribute} is already in use`
      : 'Conflict with an existing resource';
    return new ScimError(409, 'uniqueness', what, { cause: error });
  }
  if (error instanceof PreconditionFailedError) {
    return new ScimError(412, undefined, 'The resource changed (version mismatch)', { cause: error });
  }
  if (error instanceof InvalidRecordError)
    return new ScimError(400, 'invalidValue', error.message, { cause: error });
  return error;
}

/** Runs a storage call, its failures as SCIM errors. */
export async function scimStorageCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    throw scimStorageError(error);
  }
}
