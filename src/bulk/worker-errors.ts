/**
 * Errors crossing the worker boundary. A thrown error reaches the main thread through the
 * structured clone, which keeps its `name`, `message`, `stack` and `cause` but drops every other
 * property: an `ENOSPC` of a worker's file write would arrive without its `code`, and a failed
 * export would be reported as an exception rather than as a transient disk fault. The worker puts
 * the code into a plain `cause` ({@link toCrossing}); the pool puts it back ({@link fromCrossing}).
 */
interface CodeCause {
  workerErrorCode: string;
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** In the worker: `error` with its code in a clonable `cause` (an error without a code unchanged). */
export function toCrossing(error: unknown): unknown {
  const code = codeOf(error);
  if (code === undefined || !(error instanceof Error)) return error;
  const crossing = new Error(error.message, { cause: { workerErrorCode: code } satisfies CodeCause });
  crossing.name = error.name;
  if (error.stack !== undefined) crossing.stack = error.stack;
  return crossing;
}

/** In the main thread: an error from a worker with its `code` back (others unchanged). */
export function fromCrossing(error: unknown): unknown {
  if (!(error instanceof Error) || codeOf(error) !== undefined) return error;
  const code = (error.cause as Partial<CodeCause> | null | undefined)?.workerErrorCode;
  return typeof code === 'string' ? Object.assign(error, { code }) : error;
}
