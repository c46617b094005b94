import type { RequestHandler } from 'express';
import { findPrincipal } from '../http/authenticate.js';
import type { AuditTrail } from './trail.js';

const REFUSED = new Set([401, 403, 404]);

/**
 * Records every request answered 401, 403 or 404 (one place for every router mounted after it):
 * the caller when it was identified (else `anonymous` in the platform log), method, path with
 * query. `skip` leaves out requests whose refusal is recorded elsewhere (the token endpoint).
 */
export function recordRefusals(trail: AuditTrail, skip: (path: string) => boolean): RequestHandler {
  return (req, res, next) => {
    if (!trail.enabled || skip(req.path)) {
      next();
      return;
    }
    res.on('finish', () => {
      const status = res.statusCode;
      if (!REFUSED.has(status)) return;
      const principal = findPrincipal(res);
      try {
        trail.record({
          kind: 'refused',
          status: status as 401 | 403 | 404,
          method: req.method,
          path: req.originalUrl,
          projectId: principal?.projectId ?? null,
          actor: principal ? { kind: principal.kind, id: principal.id } : { kind: 'anonymous' },
          ...(req.ip ? { address: req.ip } : {}),
        });
      } catch {
        // After close(): the answer is already sent; nothing to record into.
      }
    });
    next();
  };
}
