import type { RequestHandler } from 'express';
import type { Storage } from '../storage/types.js';

/** One readiness check's answer: `'ok'`, or a word saying what is wrong (never an error's text). */
export type CheckStatus = string;

/** The checks of `GET /readyz`, by name; each resolves `'ok'` or what is not ready. */
export type ReadinessChecks = Record<string, () => CheckStatus | Promise<CheckStatus>>;

/** `GET /healthz`: the process serves requests (liveness). */
export function livenessHandler(): RequestHandler {
  return (_req, res) => {
    res.set('Cache-Control', 'no-store').json({ status: 'ok' });
  };
}

/**
 * A check that answers `'ok'` when `run()` resolves within `timeoutMs`, `'timeout'` when it has not
 * by then, and `failed` when it rejects.
 */
export function timedCheck(
  run: () => Promise<unknown>,
  timeoutMs: number,
  failed: CheckStatus,
): () => Promise<CheckStatus> {
  return async () => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<CheckStatus>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
      timer.unref();
    });
    try {
      return await Promise.race([run().then(() => 'ok'), timeout]);
    } catch {
      return failed;
    } finally {
      clearTimeout(timer);
    }
  };
}

/** `'ok'` when `storage.ping()` resolves within `timeoutMs`, `'unreachable'` or `'timeout'` otherwise. */
export function storageCheck(storage: Storage, timeoutMs: number): () => Promise<CheckStatus> {
  return timedCheck(() => storage.ping(), timeoutMs, 'unreachable');
}

/**
 * `GET /readyz`: 200 `{ status: 'ready', checks }` when every check answers `'ok'`, else 503
 * `{ status: 'not ready', checks }` naming what is not (e.g. `{ storage: 'unreachable' }`). Checks
 * run in parallel; the body carries status words only, never an error message or data.
 */
export function readinessHandler(checks: ReadinessChecks): RequestHandler {
  return (_req, res, next) => {
    const names = Object.keys(checks);
    Promise.all(
      names.map(async (name) => {
        try {
          return await checks[name]!();
        } catch {
          return 'failed';
        }
      }),
    )
      .then((results) => {
        const answers = Object.fromEntries(names.map((name, i) => [name, results[i]!]));
        const ready = results.every((result) => result === 'ok');
        res
          .status(ready ? 200 : 503)
          .set('Cache-Control', 'no-store')
          .json({ status: ready ? 'ready' : 'not ready', checks: answers });
      })
      .catch(next);
  };
}
