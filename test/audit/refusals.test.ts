import express, { type Response } from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../src/audit/events.js';
import { recordRefusals } from '../../src/http/audit-refusals.js';
import type { AuditTrail } from '../../src/audit/trail.js';

/** A trail that notes each record and whether the answer's headers had left when it came. */
function probeTrail(current: () => Response | undefined) {
  const seen: { record: AuditRecord; headersSent: boolean | undefined }[] = [];
  const trail: AuditTrail = {
    enabled: true,
    record(record) {
      seen.push({ record, headersSent: current()?.headersSent });
      return undefined;
    },
    flush: () => Promise.resolve(),
    sweep: () => Promise.resolve(0),
    close: () => Promise.resolve(),
  };
  return { trail, seen };
}

describe('recordRefusals', () => {
  it('records 401, 403 and 404 before the headers are written, whichever way the answer is sent', async () => {
    let res: Response | undefined;
    const { trail, seen } = probeTrail(() => res);
    const app = express();
    app.use((_req, response, next) => {
      res = response;
      next();
    });
    app.use(recordRefusals(trail, (path) => path.startsWith('/skipped')));
    app.get('/json', (_req, response) => void response.status(403).json({ error: 'no' }));
    app.get('/head', (_req, response) => {
      response.writeHead(401, { 'WWW-Authenticate': 'Bearer' });
      response.end();
    });
    app.get('/stream', (_req, response) => {
      response.status(404);
      response.write('not ');
      response.end('here');
    });
    app.get('/ok', (_req, response) => void response.json({ ok: true }));
    app.get('/skipped', (_req, response) => void response.sendStatus(403));

    expect((await request(app).get('/json?x=1')).status).toBe(403);
    expect((await request(app).get('/head')).status).toBe(401);
    expect((await request(app).get('/stream')).text).toBe('not here');
    expect((await request(app).get('/ok')).status).toBe(200);
    expect((await request(app).get('/skipped')).status).toBe(403);
    expect(seen).toEqual([
      {
        record: expect.objectContaining({ kind: 'refused', status: 403, path: '/json?x=1' }),
        headersSent: false,
      },
      {
        record: expect.objectContaining({ status: 401, path: '/head', actor: { kind: 'anonymous' } }),
        headersSent: false,
      },
      {
        record: expect.objectContaining({ status: 404, method: 'GET', path: '/stream' }),
        headersSent: false,
      },
    ]);
  });

  it('still answers when the trail cannot record', async () => {
    const trail: AuditTrail = {
      enabled: true,
      record: () => {
        throw new Error('The audit trail is closed');
      },
      flush: () => Promise.resolve(),
      sweep: () => Promise.resolve(0),
      close: () => Promise.resolve(),
    };
    const app = express();
    app.use(recordRefusals(trail, () => false));
    app.get('/x', (_req, response) => void response.sendStatus(404));
    expect((await request(app).get('/x')).status).toBe(404);
  });
});
