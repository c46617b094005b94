import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { foregroundBusy } from '../../src/common/foreground.js';
import { foregroundRequests, inBackground } from '../../src/http/foreground-requests.js';
import { eventually } from '../helpers/eventually.js';

/*
 * Requests through the platform's routers are foreground work (src/common/foreground.ts), which
 * the embedded stores' searches give way to, except while a costly read of theirs runs.
 */
describe('foregroundRequests', () => {
  it('counts a request until its response closes, once however many routers mount it, and not in background', async () => {
    const seen: Record<string, boolean> = {};
    const app = express();
    app.use(foregroundRequests());
    const inner = express.Router();
    inner.use(foregroundRequests());
    inner.get('/read', (_req, res) => {
      seen.read = foregroundBusy();
      res.json({ ok: true });
    });
    inner.get('/costly', async (req, res) => {
      seen.before = foregroundBusy();
      seen.during = await inBackground(req, () => Promise.resolve(foregroundBusy()));
      // Nested background work runs as it is.
      seen.nested = await inBackground(req, () => inBackground(req, () => Promise.resolve(foregroundBusy())));
      seen.after = foregroundBusy();
      res.json({ ok: true });
    });
    app.use(inner);
    expect(foregroundBusy()).toBe(false);
    await request(app).get('/read').expect(200);
    await request(app).get('/costly').expect(200);
    expect(seen).toEqual({ read: true, before: true, during: false, nested: false, after: true });
    // Counted once despite two mounts: the close of each response brings the count back to none.
    await eventually('every response to close', () => !foregroundBusy());
  });

  it('runs background work of a request no router counted as it is', async () => {
    const app = express();
    app.get('/alone', async (req, res) => {
      res.json({ busy: await inBackground(req, () => Promise.resolve(foregroundBusy())) });
    });
    const { body } = await request(app).get('/alone').expect(200);
    expect(body).toEqual({ busy: false });
  });
});
