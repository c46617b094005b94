import express from 'express';
import request from 'supertest';
import { expect } from 'vitest';
import {
  bulkExportRouter,
  type BulkExportRouter,
  type BulkExportRouterOptions,
} from '../../src/bulk/router.js';
import type { Principal } from '../../src/http/principal.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { fixtureStorage } from '../bulk/fixtures/fixture-storage.js';
import { afterTest } from './cleanup.js';
import { tempDir } from './temp-dir.js';
import { testAuthenticate, testToken } from './test-auth.js';
import { PATIENCE_MS } from './eventually.js';

export { tempDir } from './temp-dir.js';

export const BASE = '/fhir/R4';

type App = Parameters<typeof request>[0];

export function token(projectId: string | null, extra: Partial<Principal> = {}): string {
  return testToken({ projectId, ...extra });
}

/** An app with the bulk router under /fhir/R4 and a catch-all that proves `next()` is called. */
export function createApp(storage: Storage, options: Partial<BulkExportRouterOptions> = {}) {
  const router = bulkExportRouter({
    storage,
    authenticate: testAuthenticate,
    exportDir: options.exportDir ?? tempDir('bulk-out-'),
    onError: () => undefined,
    ...options,
  });
  const app = express();
  app.use(BASE, router);
  app.use((_req, res) => {
    res.status(418).json({ fellThrough: true });
  });
  return { app, router };
}

export type FixtureStorage = ReturnType<typeof fixtureStorage>;

/** Options of {@link bulkTestApp}: the router's, plus the store and what to seed it with. */
export interface BulkTestAppOptions<S extends Storage> extends Partial<BulkExportRouterOptions> {
  /** The store; its owner closes it. @default a fixture store in a temporary directory */
  storage?: S;
  /** What {@link seed} writes into `proj-a`, or `false` for nothing. @default sampleResources() */
  seed?: FhirResource[] | false;
}

export interface BulkTestApp<S extends Storage> {
  storage: S;
  app: express.Express;
  router: BulkExportRouter;
  /** Where the router writes its files. */
  exportDir: string;
  /** A token of `proj-a` with `system/*.*`. */
  auth: string;
}

/**
 * The usual bulk test setup: a store (seeded), the app of {@link createApp} (files in a temporary
 * directory unless `exportDir` is given), its router closed after the test, and a token of `proj-a`.
 */
export async function bulkTestApp<S extends Storage = FixtureStorage>(
  options: BulkTestAppOptions<S> = {},
): Promise<BulkTestApp<S>> {
  const { storage: given, seed: resources, ...routerOptions } = options;
  const storage = given ?? (fixtureStorage({ dir: tempDir() }) as Storage as S);
  if (resources !== false) await seed(storage, resources);
  const exportDir = routerOptions.exportDir ?? tempDir('bulk-out-');
  const { app, router } = createApp(storage, { ...routerOptions, exportDir });
  afterTest(() => router.close());
  return { storage, app, router, exportDir, auth: token('proj-a') };
}

/**
 * A store opened by `open` (a `forEachStore` suite's) with the projects `proj-a` and `proj-b`,
 * closed after the test.
 */
export async function openWithProjects(open: () => Storage | Promise<Storage>): Promise<Storage> {
  const storage = await open();
  afterTest(() => storage.close());
  await storage.createProject({ id: 'proj-a', name: 'A', strictMode: false });
  await storage.createProject({ id: 'proj-b', name: 'B', strictMode: false });
  return storage;
}

const ref = (type: string, id: string) => ({ reference: `${type}/${id}` });

/** The sample data of most tests (project `proj-a`) and one resource of `proj-b`. */
export function sampleResources(): FhirResource[] {
  const patients = ['p1', 'p2', 'p3', 'p4'].map((id) => ({
    resourceType: 'Patient',
    id,
    name: [{ family: id }],
    gender: 'female',
  }));
  return [
    ...patients,
    {
      resourceType: 'Observation',
      id: 'o1',
      status: 'final',
      code: { text: 'a' },
      subject: ref('Patient', 'p1'),
    },
    {
      resourceType: 'Observation',
      id: 'o2',
      status: 'final',
      code: { text: 'b' },
      subject: ref('Patient', 'p2'),
    },
    {
      resourceType: 'Observation',
      id: 'o3',
      status: 'final',
      code: { text: 'c' },
      subject: ref('Patient', 'p3'),
    },
    {
      resourceType: 'Observation',
      id: 'o4',
      status: 'final',
      code: { text: 'd' },
      subject: ref('Patient', 'p4'),
    },
    { resourceType: 'Condition', id: 'c1', subject: ref('Patient', 'p1') },
    {
      resourceType: 'Encounter',
      id: 'e1',
      status: 'finished',
      class: { code: 'AMB' },
      subject: ref('Patient', 'p2'),
    },
    { resourceType: 'Organization', id: 'org1', name: 'Org' },
    {
      resourceType: 'Group',
      id: 'g1',
      type: 'person',
      actual: true,
      member: [{ entity: ref('Patient', 'p1') }, { entity: ref('Group', 'g2') }],
    },
    {
      resourceType: 'Group',
      id: 'g2',
      type: 'person',
      actual: true,
      member: [
        { entity: ref('Patient', 'p3') },
        { entity: ref('Group', 'g1') },
        { entity: ref('Patient', 'p4'), inactive: true },
      ],
    },
  ];
}

export async function seed(storage: Storage, resources: FhirResource[] = sampleResources()): Promise<void> {
  await storage.writeResources(
    'proj-a',
    resources.map((resource) => ({ op: 'update', resource: resource as FhirResource & { id: string } })),
  );
  await storage.writeResources('proj-b', [
    { op: 'update', resource: { resourceType: 'Patient', id: 'pb1' } },
  ]);
}

export function pathOf(url: string): string {
  const u = new URL(url);
  return `${u.pathname}${u.search}`;
}

export interface Manifest {
  transactionTime: string;
  request: string;
  requiresAccessToken: boolean;
  output: { type: string; url: string; count: number }[];
  error: { type: string; url: string; count: number }[];
  deleted?: { type: string; url: string; count: number }[];
}

/** Kicks off, checks the 202, returns the status path. */
export async function kickoff(
  app: express.Express,
  auth: string,
  target: string,
  init: { method?: 'get' | 'post'; body?: unknown; prefer?: string } = {},
): Promise<string> {
  const method = init.method ?? 'get';
  const agent = request(app);
  let req = (method === 'get' ? agent.get(`${BASE}${target}`) : agent.post(`${BASE}${target}`))
    .set('Authorization', auth)
    .set('Accept', 'application/fhir+json');
  req = req.set('Prefer', init.prefer ?? 'respond-async');
  if (init.body !== undefined)
    req = req.set('Content-Type', 'application/fhir+json').send(JSON.stringify(init.body));
  const res = await req;
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const location = res.headers['content-location'] as string;
  expect(location).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/fhir\/R4\/\$export-status\/[0-9a-f-]{36}$/);
  return pathOf(location);
}

/**
 * Polls the status URL until it is no longer 202 (each 202 must carry `X-Progress` and a
 * `Retry-After` in seconds); returns the final response.
 */
export async function poll(
  app: App,
  auth: string,
  statusPath: string,
  intervalMs = 25,
  limitMs = PATIENCE_MS,
): Promise<request.Response> {
  const started = Date.now();
  for (;;) {
    const res = await request(app).get(statusPath).set('Authorization', auth);
    if (res.status !== 202) return res;
    expect(res.headers['x-progress']).toBeTruthy();
    expect(res.headers['retry-after']).toMatch(/^\d+$/);
    if (Date.now() - started > limitMs) throw new Error('export did not finish');
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Polls a running export (every status 202) until its `X-Progress` counts at least `resources`. */
export async function waitForProgress(
  app: App,
  auth: string,
  statusPath: string,
  resources = 1,
  { intervalMs = 20, limitMs = PATIENCE_MS } = {},
): Promise<void> {
  const started = Date.now();
  for (;;) {
    const res = await request(app).get(statusPath).set('Authorization', auth);
    expect(res.status).toBe(202);
    if (Number(/^(\d+) resources/.exec(res.headers['x-progress'] as string)?.[1] ?? 0) >= resources) return;
    if (Date.now() - started > limitMs) throw new Error('export never made progress');
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

export async function exportManifest(
  app: express.Express,
  auth: string,
  target: string,
  init: { method?: 'get' | 'post'; body?: unknown; prefer?: string } = {},
): Promise<Manifest> {
  const statusPath = await kickoff(app, auth, target, init);
  const res = await poll(app, auth, statusPath);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.headers.expires).toBeTruthy();
  return JSON.parse(res.text) as Manifest;
}

/** Downloads one file and returns its parsed lines. */
export async function download(app: express.Express, auth: string, url: string): Promise<FhirResource[]> {
  const res = await request(app)
    .get(pathOf(url))
    .set('Authorization', auth)
    .buffer(true)
    .parse((r, cb) => {
      let text = '';
      r.setEncoding('utf8');
      r.on('data', (c: string) => (text += c));
      r.on('end', () => cb(null, text));
    });
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/fhir\+ndjson/);
  const text = res.body as string;
  expect(text.endsWith('\n')).toBe(true);
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as FhirResource);
}

/** Downloads every output file; returns resources by type, checking each manifest count. */
export async function downloadAll(
  app: express.Express,
  auth: string,
  manifest: Manifest,
): Promise<Map<string, FhirResource[]>> {
  const byType = new Map<string, FhirResource[]>();
  for (const entry of manifest.output) {
    const lines = await download(app, auth, entry.url);
    expect(lines.length).toBe(entry.count);
    for (const r of lines) expect(r.resourceType).toBe(entry.type);
    byType.set(entry.type, [...(byType.get(entry.type) ?? []), ...lines]);
  }
  return byType;
}

/** `Type/id` of every exported resource, sorted. */
export function keysOf(byType: Map<string, FhirResource[]>): string[] {
  return [...byType.values()]
    .flat()
    .map((r) => `${r.resourceType}/${r.id}`)
    .sort();
}

/** Checks every exported resource line by line against the store. */
export async function expectMatchesStore(
  storage: Storage,
  projectId: string,
  byType: Map<string, FhirResource[]>,
): Promise<void> {
  for (const resources of byType.values()) {
    for (const r of resources)
      expect(r).toEqual(await storage.readResource(projectId, r.resourceType, r.id!));
  }
}
