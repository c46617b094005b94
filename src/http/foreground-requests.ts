import type { Request, RequestHandler } from 'express';
import { foregroundWork, type ForegroundUnit } from '../common/foreground.js';

/*
 * Every request through the platform's routers counts as foreground work (`common/foreground.ts`)
 * from its arrival until its response closes, except while a costly read of it waits for its turn
 * or runs (`inBackground`): the embedded stores' searches give way to the others.
 */

const units = new WeakMap<Request, ForegroundUnit>();

/** Counts each request as foreground work until its response closes (once, however many routers mount it). */
export function foregroundRequests(): RequestHandler {
  return (req, res, next) => {
    if (!units.has(req)) {
      const unit = foregroundWork();
      units.set(req, unit);
      res.once('close', () => unit.end());
    }
    next();
  };
}

/** Runs `work` of `req` as background work (a costly read; see `ForegroundUnit.background`). */
export function inBackground<T>(req: Request, work: () => Promise<T>): Promise<T> {
  const unit = units.get(req);
  return unit ? unit.background(work) : work();
}
