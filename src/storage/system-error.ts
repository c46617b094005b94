/**
 * True for a Node system error: the operating system refused a file or socket operation
 * (`ENOSPC`, `EIO`, `EROFS`, `EACCES`, `ECONNREFUSED`, `EAI_AGAIN`, …), as `fs` and `net` throw it.
 */
export function isSystemError(error: unknown): error is NodeJS.ErrnoException {
  if (typeof error !== 'object' || error === null) return false;
  const { code, syscall } = error as NodeJS.ErrnoException;
  return typeof code === 'string' && /^E[A-Z0-9_]+$/.test(code) && typeof syscall === 'string';
}
