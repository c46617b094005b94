import { PlatformError } from '../errors.js';

/**
 * The logger the `logger` options take: pino's shape (`logger.error({ ...fields }, 'message')`),
 * which pino, bunyan-style and most structured loggers (or a small adapter) satisfy.
 */
export interface Logger {
  error(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  debug(fields: object, message?: string): void;
  /** When present, the platform logs through `logger.child({ component: 'fhir-platform-kit' })`. */
  child?(bindings: object): Logger;
}

/** What an error log line says of an error: no request, token, secret or body. */
export interface LoggedError {
  type: string;
  code?: string;
  message: string;
  stack?: string;
}

// A JWT (compact JWS or JWE) or a credential after an HTTP auth scheme: never written to a log line,
// even when some library puts one in an error message.
const SECRETS = /\beyJ[\w-]*\.[\w-]*\.[\w.-]*|\b(Bearer|Basic)\s+[\w+/=.~-]+/g;

/** `text` with JWTs and `Bearer`/`Basic` credentials replaced by `[redacted]`. */
export function redactSecrets(text: string): string {
  return text.replace(SECRETS, (_match, scheme?: string) => (scheme ? `${scheme} [redacted]` : '[redacted]'));
}

/**
 * The loggable part of an error: its class, code, message and stack, with secrets redacted. The
 * object has no prototype: pino's `err` serializer describes anything with a `message` again, and
 * names a plain object's type after its constructor (`"type":"Object"`); without one it keeps ours.
 */
export function describeError(error: unknown): LoggedError {
  const described: LoggedError = Object.create(null) as LoggedError;
  if (!(error instanceof Error)) {
    return Object.assign(described, { type: typeof error, message: redactSecrets(String(error)) });
  }
  const code = error instanceof PlatformError ? error.code : (error as { code?: unknown }).code;
  return Object.assign(described, {
    type: error.name,
    ...(typeof code === 'string' ? { code } : {}),
    message: redactSecrets(error.message),
    ...(error.stack ? { stack: redactSecrets(error.stack) } : {}),
  });
}

/** `logger.child({ component })` when the logger has `child`, else the logger. */
export function componentLogger(logger: Logger): Logger {
  return logger.child ? logger.child({ component: 'fhir-platform-kit' }) : logger;
}
