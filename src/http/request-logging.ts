import type { Request, RequestHandler, Response } from 'express';
import { describeError, type Logger } from '../common/logger.js';
import { findPrincipal } from './authenticate.js';
import { defaultErrorLogger, type ErrorLogger } from './error-rendering.js';
import type { Principal } from './principal.js';

// The host's logger at the HTTP layer: where errors of requests go, and one line per request.

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
