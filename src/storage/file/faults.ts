import { StorageError, StorageUnavailableError } from '../errors.js';
import { isSystemError } from '../system-error.js';

/** The file operations of the file store a test can make fail (see `FaultHook`). */
export type FileOp = 'mkdir' | 'open' | 'write' | 'fsync' | 'truncate' | 'rename' | 'link' | 'read';

/**
 * Internal test seam, never a public option: called just before each file operation that writes
 * (or creates, syncs, renames) a file of the store, and before each read of a resource's record or
 * of an export snapshot's block in this thread, with the operation and the path. Throwing makes
 * that operation fail as the disk would (an `ENOSPC` or `EIO` errno error); the hook may also touch
 * the file first (say, append half a record) to leave what a torn write leaves. Production stores
 * have none: the cost is one property check per operation.
 */
export type FaultHook = (op: FileOp, file: string) => void;

/**
 * A failure of the file system as the `StorageUnavailableError` callers get (the original as its
 * `cause`, its message after `what`); a `StorageError` or a bug passes unchanged.
 */
export function unavailable(error: unknown, what: string): unknown {
  if (error instanceof StorageError || !isSystemError(error)) return error;
  return new StorageUnavailableError(`${what}: ${error.message}`, { cause: error });
}
