import http from 'node:http';
import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { BASE, bulkTestApp, pathOf, poll, token } from '../helpers/bulk-export.js';
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

async function importKickoff(app: App, auth: string, body: unknown): Promise<request.Response> {
  return request(app)
    .post(`${BASE}/$import`)
    .set('Authorization', auth)
    .set('Prefer', 'respond-async')
    .set('Content-Type', 'application/fhir+json')
    .send(JSON.stringify(body));
}

async function importDone(app: App, auth: string, body: unknown): Promise<Record<string, any>> {
  const res = await importKickoff(app, auth, body);
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const location = res.headers['content-location'] as string;
  expect(location).toMatch(/\/fhir\/R4\/\$import-status\/[0-9a-f-]{36}$/);
  const done = await poll(app, auth, pathOf(location));
  expect(done.status, done.text).toBe(200);
  return { ...JSON.parse(done.text), statusPath: pathOf(location) };
}

async function project(storage: Storage, id: string, strictMode = false): Promise<void> {
  await storage.createProject({ id, name: id, strictMode });
}

async function allOf(storage: Storage, projectId: string, type: string): Promise<FhirResource[]> {
  const page = await storage.searchResources(projectId, type, { count: 1000 } as never);
  return (page as unknown as { resources: FhirResource[] }).resources;
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
      const counts = Object.fromEntries(manifest.output.map((o: any) => [o.type, o.count]));
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
      expect(manifest.error[0].count).toBe(1);
      const errors = await request(app)
        .get(pathOf(manifest.error[0].url))
        .set('Authorization', auth)
        .buffer(true);
      expect(errors.status).toBe(200);
      const outcome = JSON.parse(String(errors.text ?? errors.body).trim());
      expect(outcome.resourceType).toBe('OperationOutcome');
      expect(JSON.stringify(outcome)).toMatch(/line 2/);
      const x1 = await storage.readResource('proj-a', 'Patient', 'x1');
      expect(x1.managingOrganization).toEqual({ reference: 'Organization/o9' });
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
