import type { RequestHandler } from 'express';
import { optionError } from '../common/options.js';
import type { ErrorFormat, ErrorFormatOf } from './error-paths.js';
import { renderError } from './error-rendering.js';
import type { CheckStatus, ReadinessChecks } from './health.js';
import { FhirError, OAuthError, ScimError, type HttpError } from './http-error.js';

/**
 * Start-up work of the host that readiness waits for (`FhirPlatform.holdReadiness`): each piece is a
 * readiness check by its name, `'pending'` until its promise resolves (`'ok'`) or rejects
 * (`'failed'`).
 */
export interface ReadinessHolds {
  /**
   * Holds readiness until `work` resolves, under the check `name`; a new `work` under a name
   * already held replaces the old one (whose settling is then ignored).
   * @throws InvalidOptionError for a `name` that is no word or names a check of the platform, or a
   *   `work` that is no promise.
   */
  hold(name: string, work: PromiseLike<unknown>): void;
  /** True while some held work has not resolved (still pending, or failed). */
  holding(): boolean;
}

const NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

/**
 * Holds over `checks` (the checks `readinessHandler` answers, read per request): each held name is
 * added to them. `ownNames` are the platform's own checks (whether mounted or not), and cannot be
 * held.
 */
export function readinessHolds(
  owner: string,
  checks: ReadinessChecks,
  ownNames: readonly string[],
): ReadinessHolds {
  const own = new Set([...ownNames, ...Object.keys(checks)]);
  const statuses = new Map<string, CheckStatus>();
  // The newest hold of each name: an older one that settles later changes nothing.
  const newest = new Map<string, object>();
  return {
    hold(name, work) {
      if (typeof name !== 'string' || !NAME.test(name))
        optionError(owner, 'name', 'name must be a word of letters, digits, "-" or "_" (at most 64)');
      if (own.has(name)) optionError(owner, 'name', `${name} is a readiness check of the platform itself`);
      if (typeof (work as Partial<PromiseLike<unknown>> | undefined)?.then !== 'function')
        optionError(owner, 'work', 'work must be a promise');
      const mark = {};
      newest.set(name, mark);
      statuses.set(name, 'pending');
      checks[name] = () => statuses.get(name) ?? 'pending';
      const settle = (status: CheckStatus) => () => {
        if (newest.get(name) === mark) statuses.set(name, status);
      };
      void Promise.resolve(work).then(settle('ok'), settle('failed'));
    },
    holding: () => [...statuses.values()].some((status) => status !== 'ok'),
  };
}

const NOT_READY = 'The server is not ready: its start-up work has not completed; retry shortly';

/** The 503 of a request that arrives while readiness is held, as the routers of `format` answer one. */
function notReady(format: ErrorFormat): HttpError {
  const options = { headers: { 'Retry-After': '1' } };
  switch (format) {
    case 'oauth':
      return new OAuthError(503, 'temporarily_unavailable', NOT_READY, options);
    case 'scim':
      return new ScimError(503, undefined, NOT_READY, options);
    case 'fhir':
      return new FhirError(503, 'transient', NOT_READY, options);
  }
}

/**
 * Answers every request 503 with `Retry-After: 1` while `holds` holds readiness, in the protocol of
 * its path (`formatOf`): FHIR `transient`, OAuth `temporarily_unavailable` (RFC 6749 §5.2), SCIM
 * 503 (RFC 7644 §3.12). A client then waits rather than take the 401 of credentials not yet written
 * for a wrong secret. Mount it after the health probes.
 */
export function notReadyGate(holds: ReadinessHolds, formatOf: ErrorFormatOf): RequestHandler {
  return (req, res, next) => {
    if (!holds.holding()) return next();
    const format = formatOf(req.url);
    const answer = renderError(notReady(format), format);
    res.status(answer.status).set(answer.headers).send(answer.body);
  };
}
