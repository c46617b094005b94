import type { Request, RequestHandler, Response } from 'express';
import type { Principal } from '../auth/principal.js';
import { PlatformError } from '../errors.js';
import { defaultErrorLogger, type ErrorLogger } from './error-rendering.js';
import { findPrincipal } from './authenticate.js';

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

/** The loggable part of an error: its class, code, message and stack, with secrets redacted. */
export function describeError(error: unknown): LoggedError {
  if (!(error instanceof Error)) return { type: typeof error, message: redactSecrets(String(error)) };
  const code = error instanceof PlatformError ? error.code : (error as { code?: unknown }).code;
  return {
    type: error.name,
    ...(typeof code === 'string' ? { code } : {}),
    message: redactSecrets(error.message),
    ...(error.stack ? { stack: redactSecrets(error.stack) } : {}),
  };
}

/** The request's path without its query string (which may hold secrets). */
export function pathOf(req: Request): string {
  const url = req.originalUrl || req.url;
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/** Who called, for a log line: ids only. */
function callerFields(principal: Principal | undefined): Record<string, string> {
  if (!principal) return {};
  return {
    ...(principal.projectId ? { projectId: principal.projectId } : {}),
    ...(principal.kind === 'user' ? { userId: principal.id } : { clientId: principal.id }),
  };
}

/**
 * The error sink of a factory: `onError` and `logger` both receive every error answered with a 5xx
 * (or failing in the background, such as an export job); with neither, errors go to stderr.
 * Through `logger` an error is one `error` line: `{ err: { type, code, message, stack }, method,
 * path }` (secrets redacted, no query string, no body).
 */
export function errorSink(options: { onError?: ErrorLogger; logger?: Logger }): ErrorLogger {
  const { onError, logger } = options;
  if (!logger) return onError ?? defaultErrorLogger;
  return (error, req) => {
    if (onError) onError(error, req);
    const fields = req ? { method: req.method, path: pathOf(req) } : {};
    logger.error({ err: describeError(error), ...fields }, 'fhir-platform-kit error');
  };
}

/**
 * One `info` line per finished request: `{ method, path, status, ms, projectId, clientId | userId }`
 * (the path without its query string; no header, token or body).
 */
export function requestLogger(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const start = process.hrtime.bigint();
    let logged = false;
    const done = (response: Response) => {
      if (logged) return;
      logged = true;
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      logger.info(
        {
          method: req.method,
          path: pathOf(req),
          status: response.statusCode,
          ms: Math.round(ms * 10) / 10,
          ...callerFields(findPrincipal(response)),
          ...(response.writableFinished ? {} : { aborted: true }),
        },
        'request',
      );
    };
    res.once('finish', () => done(res));
    res.once('close', () => done(res));
    next();
  };
}

/** `logger.child({ component })` when the logger has `child`, else the logger. */
export function componentLogger(logger: Logger): Logger {
  return logger.child ? logger.child({ component: 'fhir-platform-kit' }) : logger;
}
