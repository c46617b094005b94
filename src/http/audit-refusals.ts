import type { ServerResponse } from 'node:http';
import type { RequestHandler } from 'express';
import { findPrincipal } from './authenticate.js';
import type { AuditTrail } from '../audit/trail.js';

const REFUSED = new Set([401, 403, 404]);

/**
 * Calls `listener` once, just before the response's status line and headers are written (every
 * answer goes through `writeHead`: Node's `end()`, `write()` and `flushHeaders()` call it when the
 * headers are not out yet), with the status about to be sent. Written here rather than taken from
 * `on-headers`: the same dozen lines, and one dependency less.
 */
export function beforeHeaders(res: ServerResponse, listener: (status: number) => void): void {
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => ServerResponse;
  let called = false;
  res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    if (!called) {
      called = true;
      if (typeof args[0] === 'number') this.statusCode = args[0];
      listener(this.statusCode);
    }
    return writeHead(...args);
  };
}

/**
 * Records every request answered 401, 403 or 404 (one place for every router mounted after it):
 * the caller when it was identified (else `anonymous` in the platform log), method, path with
 * query (the trail keeps `maxUrlLength` characters of it, and counts refusals per source and
 * window rather than recording each: docs/audit.md "Floods of refusals"). The event is recorded before the answer's headers are written, so that an answer that
 * left the process always has its event (in the journal). `skip` leaves out requests whose
 * refusal is recorded elsewhere (the token endpoint).
 */
export function recordRefusals(trail: AuditTrail, skip: (path: string) => boolean): RequestHandler {
  return (req, res, next) => {
    if (!trail.enabled || skip(req.path)) {
      next();
      return;
    }
    beforeHeaders(res, (status) => {
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
        // A trail that cannot record (the platform's reports to onError): the refusal still goes out.
      }
    });
    next();
  };
}
