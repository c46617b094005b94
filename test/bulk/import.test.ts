import http from 'node:http';
import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { BASE, bulkTestApp, createApp, pathOf, poll, tempDir, token } from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { listen } from '../helpers/listen.js';

type App = Parameters<typeof request>[0];

/** Serves `app` on a loopback port (closed after the test); answers its base URL. */
async function serve(app: express.Express): Promise<string> {
  const { server, origin } = await listen(app);
  afterTest(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return origin;
}

/** A server of NDJSON files by path; a file may be a function that holds the response. */
async function fileServer(
  files: Record<string, string | ((res: http.ServerResponse) => void)>,
): Promise<string> {
  const app = express();
  app.get('/files/:name', (req, res) => {
    const file = files[req.params.name];
    if (file === undefined) {
      res.status(404).end();
      return;
    }
    if (typeof file === 'function') {
      file(res);
      return;
    }
    res.type('application/fhir+ndjson').send(file);
  });
  return serve(app);
}

function parameters(parameter: Record<string, unknown>[]) {
  return { resourceType: 'Parameters', parameter };
}

function input(type: string, url: string) {
  return {
    name: 'input',
    part: [
      { name: 'type', valueCode: type },
      { name: 'url', valueUri: url },
    ],
  };
}

interface ImportEntry {
  type: string;
  inputUrl: string;
  count: number;
  url: string;
}

interface ImportManifest {
  output: ImportEntry[];
  deleted: ImportEntry[];
  error: ImportEntry[];
  extension?: Record<string, unknown>;
  statusPath: string;
}

async function importKickoff(app: App, auth: string, body: unknown): Promise<request.Response> {
  return request(app)
    .post(`${BASE}/$import`)
    .set('Authorization', auth)
    .set('Prefer', 'respond-async')
    .set('Content-Type', 'application/fhir+json')
    .send(JSON.stringify(body));
}

async function importDone(app: App, auth: string, body: unknown): Promise<ImportManifest> {
  const res = await importKickoff(app, auth, body);
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const location = res.headers['content-location'] as string;
  expect(location).toMatch(/\/fhir\/R4\/\$import-status\/[0-9a-f-]{36}$/);
  const done = await poll(app, auth, pathOf(location));
  expect(done.status, done.text).toBe(200);
  return { ...(JSON.parse(done.text) as Omit<ImportManifest, 'statusPath'>), statusPath: pathOf(location) };
}

/** A file server answer that sends `head`, then waits for `release()` to send `tail`. */
function heldFile(head: string, tail: string) {
  let requested!: () => void;
  const wasRequested = new Promise<void>((resolve) => (requested = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const serveFile = (res: http.ServerResponse) => {
    requested();
    res.writeHead(200, { 'content-type': 'application/fhir+ndjson' });
    res.write(head);
    void released.then(() => res.end(tail));
  };
  return { serveFile, wasRequested, release };
}

const patientLine = (id: string, extra: Record<string, unknown> = {}) =>
  `${JSON.stringify({ resourceType: 'Patient', id, ...extra })}\n`;

async function project(storage: Storage, id: string, strictMode = false): Promise<void> {
  await storage.createProject({ id, name: id, strictMode });
}

forEachStore('$import', (store, open) =>
  describe(`$import (${store})`, () => {
    /** A target store (closed after the test) with the project `id`, and the bulk app over it. */
    const target = async (id: string, options: Parameters<typeof bulkTestApp>[0] = {}) => {
      const storage = await open();
      afterTest(() => storage.close());
      await project(storage, id);
      return bulkTestApp({ ...options, storage, seed: false });
    };

    it('pulls the files of another server export manifest into the project, ids kept', async () => {
      const source = await bulkTestApp();
      const sourceBase = await serve(source.app);
      const kick = await request(sourceBase)
        .get(`${BASE}/$export`)
        .set('Authorization', source.auth)
        .set('Prefer', 'respond-async');
      expect(kick.status).toBe(202);
      const statusUrl = kick.headers['content-location'] as string;
      const { app, storage } = await target('proj-t');
      const manifest = await importDone(
        app,
        token('proj-t'),
        parameters([
          { name: 'manifestUrl', valueUri: statusUrl },
          { name: 'accessToken', valueString: source.auth.slice('Bearer '.length) },
        ]),
      );
      const counts = Object.fromEntries(manifest.output.map((o) => [o.type, o.count]));
      expect(counts).toMatchObject({ Patient: 4, Observation: 4, Group: 2 });
      expect(manifest.error).toEqual([]);
      const read = await storage.readResource('proj-t', 'Observation', 'o1');
      expect(read.subject).toEqual({ reference: 'Patient/p1' });
      expect(read.meta?.versionId).toBe('1');
      // Nothing reaches another project.
      await expect(storage.readResource('proj-a', 'Observation', 'o1')).rejects.toThrow();
    });

    it('loads input files, rewrites the source references and lists refused lines in an error file', async () => {
      const base = await fileServer({
        'p.ndjson': [
          JSON.stringify({
            resourceType: 'Patient',
            id: 'x1',
            managingOrganization: { reference: 'https://src.example/fhir/Organization/o9' },
          }),
          '{not json',
          JSON.stringify({ resourceType: 'Patient', id: 'x2' }),
          '',
        ].join('\n'),
      });
      const { app, storage } = await target('proj-a');
      const auth = token('proj-a');
      const manifest = await importDone(
        app,
        auth,
        parameters([
          { name: 'inputFormat', valueString: 'application/fhir+ndjson' },
          { name: 'inputSource', valueUri: 'https://src.example/fhir' },
          input('Patient', `${base}/files/p.ndjson`),
        ]),
      );
      expect(manifest.output).toEqual([{ type: 'Patient', inputUrl: `${base}/files/p.ndjson`, count: 2 }]);
      expect(manifest.error).toHaveLength(1);
      expect(manifest.error[0]!.count).toBe(1);
      const errors = await request(app)
        .get(pathOf(manifest.error[0]!.url))
        .set('Authorization', auth)
        .buffer(true);
      expect(errors.status).toBe(200);
      const outcome = JSON.parse(String(errors.text ?? errors.body).trim());
      expect(outcome.resourceType).toBe('OperationOutcome');
      expect(JSON.stringify(outcome)).toMatch(/line 2/);
      const x1 = await storage.readResource('proj-a', 'Patient', 'x1');
      expect(x1.managingOrganization).toEqual({ reference: 'Organization/o9' });
    });

    it('a cancel lets the file being loaded finish whole and loads no other', async () => {
      const held = heldFile(patientLine('b1'), patientLine('b2'));
      let thirdRequests = 0;
      const base = await fileServer({
        'a.ndjson': patientLine('a1'),
        'b.ndjson': held.serveFile,
        'c.ndjson': (res) => {
          thirdRequests++;
          res.end(patientLine('c1'));
        },
      });
      const { app, storage, router } = await target('proj-a', { closeTimeout: 60_000 });
      const auth = token('proj-a');
      const kicked = await importKickoff(
        app,
        auth,
        parameters(['a', 'b', 'c'].map((f) => input('Patient', `${base}/files/${f}.ndjson`))),
      );
      expect(kicked.status).toBe(202);
      const statusPath = pathOf(kicked.headers['content-location'] as string);
      await held.wasRequested;
      const cancel = await request(app).delete(statusPath).set('Authorization', auth);
      expect(cancel.status).toBe(202);
      expect((await request(app).get(statusPath).set('Authorization', auth)).status).toBe(404);
      held.release();
      // Closing drains the run: it ends once the file being loaded is loaded.
      await router.close();
      expect((await storage.readResource('proj-a', 'Patient', 'b2')).id).toBe('b2');
      await expect(storage.readResource('proj-a', 'Patient', 'c1')).rejects.toThrow();
      expect(thirdRequests).toBe(0);
    });

    it('a job stopped by a restart goes on with the file it was loading, not the files done', async () => {
      const held = heldFile(patientLine('r2'), patientLine('r3'));
      let secondRequests = 0;
      const base = await fileServer({
        'done.ndjson': patientLine('r1'),
        'cut.ndjson': (res) => {
          secondRequests++;
          if (secondRequests === 1) held.serveFile(res);
          else res.end(patientLine('r2') + patientLine('r3'));
        },
      });
      const storage = await open();
      afterTest(() => storage.close());
      await project(storage, 'proj-a');
      // Without a shared queue, a router resumes the jobs of its own export directory.
      const exportDir = tempDir('import-out-');
      const first = createApp(storage, { exportDir });
      const auth = token('proj-a');
      const kicked = await importKickoff(
        first.app,
        auth,
        parameters([
          input('Patient', `${base}/files/done.ndjson`),
          input('Patient', `${base}/files/cut.ndjson`),
        ]),
      );
      expect(kicked.status).toBe(202);
      const statusPath = pathOf(kicked.headers['content-location'] as string);
      await held.wasRequested;
      await first.router.close();
      held.release();
      const second = createApp(storage, { exportDir });
      afterTest(() => second.router.close());
      const done = await poll(second.app, auth, statusPath);
      expect(done.status, done.text).toBe(200);
      const manifest = JSON.parse(done.text) as { output: { count: number }[] };
      expect(manifest.output.map((o) => o.count)).toEqual([1, 2]);
      expect(secondRequests).toBe(2);
      // The file done before the restart was not loaded again.
      expect((await storage.readResource('proj-a', 'Patient', 'r1')).meta?.versionId).toBe('1');
      expect((await storage.readResource('proj-a', 'Patient', 'r3')).id).toBe('r3');
    });

    it("applies a manifest's deleted files, and fails with 403 when the owner may not write a listed type", async () => {
      const deleted = JSON.stringify({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [{ request: { method: 'DELETE', url: 'Patient/gone' } }],
      });
      let manifestBase = '';
      const base = await fileServer({
        'p.ndjson': patientLine('kept'),
        'o.ndjson': `${JSON.stringify({ resourceType: 'Observation', id: 'o1', status: 'final', code: { text: 'x' } })}\n`,
        'del.ndjson': `${deleted}\n`,
        'manifest.json': (res) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              transactionTime: '2026-01-01T00:00:00Z',
              request: `${manifestBase}/$export?_since=2025-01-01T00:00:00Z`,
              requiresAccessToken: false,
              output: [
                { type: 'Patient', url: `${manifestBase}/files/p.ndjson` },
                { type: 'Observation', url: `${manifestBase}/files/o.ndjson` },
              ],
              deleted: [{ type: 'Bundle', url: `${manifestBase}/files/del.ndjson` }],
              error: [],
            }),
          );
        },
      });
      manifestBase = base;
      const { app, storage } = await target('proj-a');
      await storage.writeResources('proj-a', [
        { op: 'update', resource: { resourceType: 'Patient', id: 'gone' } },
      ]);
      const auth = token('proj-a');
      const manifest = await importDone(
        app,
        auth,
        parameters([{ name: 'manifestUrl', valueUri: `${base}/files/manifest.json` }]),
      );
      expect(manifest.deleted).toEqual([{ type: 'Bundle', inputUrl: `${base}/files/del.ndjson`, count: 1 }]);
      expect(manifest.extension).toEqual({ sourceTransactionTime: '2026-01-01T00:00:00Z' });
      await expect(storage.readResource('proj-a', 'Patient', 'gone')).rejects.toThrow();
      expect((await storage.readResource('proj-a', 'Patient', 'kept')).id).toBe('kept');

      const narrow = token('proj-a', { scopes: ['system/Patient.cruds'] });
      const kicked = await importKickoff(
        app,
        narrow,
        parameters([{ name: 'manifestUrl', valueUri: `${base}/files/manifest.json` }]),
      );
      expect(kicked.status).toBe(202);
      const failed = await poll(app, narrow, pathOf(kicked.headers['content-location'] as string));
      expect(failed.status).toBe(403);
      expect(JSON.parse(failed.text).issue[0].code).toBe('forbidden');
    });

    it('validates the lines of a strict project as an upload does', async () => {
      const base = await fileServer({
        'p.ndjson':
          patientLine('ok') + patientLine('bad', { gender: 'sometimes' }) + patientLine('odd', { colour: 1 }),
      });
      const storage = await open();
      afterTest(() => storage.close());
      await project(storage, 'proj-s', true);
      const { app } = await bulkTestApp({ storage, seed: false });
      const auth = token('proj-s');
      const manifest = await importDone(app, auth, parameters([input('Patient', `${base}/files/p.ndjson`)]));
      expect(manifest.output[0]!.count).toBe(1);
      expect(manifest.error[0]!.count).toBe(2);
      const errors = await request(app)
        .get(pathOf(manifest.error[0]!.url))
        .set('Authorization', auth)
        .buffer(true);
      const lines = String(errors.text)
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { issue: unknown[] });
      expect(lines).toHaveLength(2);
      expect(JSON.stringify(lines[0])).toMatch(/line 2/);
      expect(JSON.stringify(lines[1])).toMatch(/line 3/);
    });

    it('refuses bad bodies, unwritable types and private addresses', async () => {
      const { app } = await target('proj-a', { import: { allowPrivateAddresses: false } });
      const auth = token('proj-a');
      const none = await importKickoff(app, auth, parameters([]));
      expect(none.status).toBe(400);
      const notParameters = await importKickoff(app, auth, { resourceType: 'Patient' });
      expect(notParameters.status).toBe(400);
      const badType = await importKickoff(
        app,
        auth,
        parameters([input('Nope', 'https://example.org/a.ndjson')]),
      );
      expect(badType.status).toBe(400);
      const loopback = await importKickoff(
        app,
        auth,
        parameters([input('Patient', 'http://127.0.0.1:9/a.ndjson')]),
      );
      expect(loopback.status).toBe(400);
      expect(JSON.stringify(loopback.body)).toMatch(/public address/);
      const narrow = token('proj-a', { scopes: ['system/Patient.cruds'] });
      const forbidden = await importKickoff(
        app,
        narrow,
        parameters([input('Observation', 'https://example.org/o.ndjson')]),
      );
      expect(forbidden.status).toBe(403);
      const unauthenticated = await request(app).post(`${BASE}/$import`).send({});
      expect(unauthenticated.status).toBe(401);
    });
  }),
);
