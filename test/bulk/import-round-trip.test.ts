// Issue 48's round trip: a project exported by one `serve` process and `$import`ed by another (two
// real servers, each with its own store, both directions between the file store and PostgreSQL)
// arrives whole: every resource equal apart from its version and time, the same counts per type,
// the same answers to searches; then a `_since` export of updates, deletions and new resources,
// imported into the same project, leaves the two projects equal again.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { generatePatients } from '../../bench/dataset.js';
import { readSynthea } from '../../bench/synthea.js';
import type { FhirResource } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { eventually } from '../helpers/eventually.js';
import { databaseFactory } from '../helpers/pg-database.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { SUPER_ADMIN, startServe, type ServeProcess } from '../helpers/serve-process.js';
import { tempDir } from '../helpers/temp-dir.js';

/** The shared Synthea sample (CI has it; a clone does not): `FPK_SYNTHEA_DIR` points elsewhere. */
const SYNTHEA =
  process.env.FPK_SYNTHEA_DIR ??
  fileURLToPath(new URL('../../../shared/data/synthea-r4-100/', import.meta.url));
/** Patient bundles of the sample loaded (with the shared Organizations and Practitioners). */
const SYNTHEA_PATIENTS = 20;
const inCi = !!process.env.CI && process.env.CI !== 'false' && process.env.CI !== '0';

type Resource = FhirResource & { id: string };
type Bundle = {
  total?: number;
  link?: { relation: string; url: string }[];
  entry?: { resource: Resource; search?: { mode?: string } }[];
};
interface Manifest {
  transactionTime: string;
  output: { type: string; url: string; count: number }[];
  deleted?: { type: string; url: string; count: number }[];
  error: { type: string; url: string; count?: number }[];
}

/** A signed-in client of one server's project. */
interface Session {
  server: ServeProcess;
  projectId: string;
  token: string;
  /** The client's credentials, for tokens of other scopes. */
  client: { id: string; secret: string };
}

async function checked(res: Response, what: string, status = 200): Promise<Response> {
  if (res.status !== status) throw new Error(`${what}: ${res.status} ${await res.text()}`);
  return res;
}

async function tokenFor(server: ServeProcess, id: string, secret: string, scope?: string): Promise<string> {
  const res = await fetch(`${server.origin}/oauth2/token`, {
    method: 'POST',
    headers: {
      authorization: `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`,
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) }),
  });
  return ((await (await checked(res, 'token')).json()) as { access_token: string }).access_token;
}

function parameters(parameter: Record<string, unknown>[]): string {
  return JSON.stringify({ resourceType: 'Parameters', parameter });
}

/** `GET`/`POST`/… on the session's FHIR base (or an absolute URL of it) with its token. */
function call(session: Session, target: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${session.token}`);
  if (!headers.has('accept')) headers.set('accept', 'application/fhir+json');
  const url = target.startsWith('http') ? target : `${session.server.fhir}/${target}`;
  return fetch(url, { ...init, headers });
}

async function json<T>(session: Session, target: string, init: RequestInit = {}, status = 200): Promise<T> {
  const res = await checked(await call(session, target, init), `${init.method ?? 'GET'} ${target}`, status);
  return (await res.json()) as T;
}

/** A new project on `server` (`Project/$init`) with a backend client of `system/*.*` rights. */
async function newProject(server: ServeProcess, name: string): Promise<Session> {
  const root = await tokenFor(server, SUPER_ADMIN.id, SUPER_ADMIN.secret);
  const admin: Session = { server, projectId: '', token: root, client: SUPER_ADMIN };
  const post = (target: string, body: string) =>
    json<Record<string, unknown>>(
      admin,
      target,
      { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body },
      201,
    );
  const project = await post('Project/$init', parameters([{ name: 'name', valueString: name }]));
  const client = await post(
    `Project/${String(project.id)}/$new-client`,
    parameters([
      { name: 'name', valueString: `${name} backend` },
      { name: 'scope', valueString: 'system/*.*' },
      { name: 'admin', valueBoolean: true },
    ]),
  );
  const credentials = { id: String(client.id), secret: String(client.secret) };
  const token = await tokenFor(server, credentials.id, credentials.secret, 'system/*.*');
  return { server, projectId: String(project.id), token, client: credentials };
}

/** Loads `resources` through the NDJSON upload, one file per type; every line must load. */
async function upload(session: Session, resources: FhirResource[]): Promise<void> {
  const byType = new Map<string, string[]>();
  for (const r of resources) {
    const lines = byType.get(r.resourceType) ?? [];
    lines.push(JSON.stringify(r));
    byType.set(r.resourceType, lines);
  }
  const form = new FormData();
  for (const [type, lines] of byType)
    form.append(
      'file',
      new Blob([`${lines.join('\n')}\n`], { type: 'application/fhir+ndjson' }),
      `${type}.ndjson`,
    );
  const outcome = await json<{ issue: { severity: string }[] }>(session, '', { method: 'POST', body: form });
  expect(outcome.issue.filter((i) => i.severity === 'error')).toEqual([]);
}

/** The test data: generated patients, and a part of the Synthea sample when present. */
function dataset(): FhirResource[] {
  const generated = [...generatePatients(2, 4848)] as FhirResource[];
  // meta a client gives (tags, security labels, a profile) travels with the resource.
  for (const r of generated.filter((r) => r.resourceType === 'Patient'))
    r.meta = {
      tag: [{ system: 'urn:example:tags', code: 'round-trip' }],
      security: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-Confidentiality', code: 'N' }],
      profile: ['http://hl7.org/fhir/us/core/StructureDefinition/us-core-patient'],
    };
  // A Group of the generated patients, as a Group export would be asked for.
  const members = generated.filter((r) => r.resourceType === 'Patient');
  generated.push({
    resourceType: 'Group',
    id: 'round-trip-cohort',
    type: 'person',
    actual: true,
    member: members.map((p) => ({ entity: { reference: `Patient/${p.id}` } })),
  });
  if (!fs.existsSync(SYNTHEA)) {
    if (inCi) throw new Error(`The Synthea sample is missing at ${SYNTHEA} (CI must have it)`);
    console.warn(`import round trip: no Synthea sample at ${SYNTHEA}; generated data only`);
    return generated;
  }
  // The first patients' bundles and the bundles of shared resources they refer to (not the Groups,
  // whose members are all 100 patients), read through a directory of links to them.
  const names = fs.readdirSync(SYNTHEA).filter((f) => f.endsWith('.json'));
  const shared = names.filter((f) => /^(hospital|practitioner)Information/.test(f));
  const patients = names
    .filter((f) => !/Information/.test(f))
    .sort()
    .slice(0, SYNTHEA_PATIENTS);
  const dir = tempDir('fpk-synthea-');
  for (const name of [...shared, ...patients]) fs.symlinkSync(path.join(SYNTHEA, name), path.join(dir, name));
  // Shared resources repeat across bundles: the last copy wins, as on the server.
  const unique = new Map<string, FhirResource>();
  for (const r of readSynthea(dir)) unique.set(`${r.resourceType}/${r.id}`, r);
  return [...generated, ...unique.values()];
}

/** Waits for an async job's status URL to answer 200, then answers its body. */
async function completed<T>(session: Session, statusUrl: string): Promise<T> {
  return eventually(
    `${statusUrl} to complete`,
    async () => {
      const res = await call(session, statusUrl);
      if (res.status === 202) {
        await res.arrayBuffer();
        return undefined;
      }
      return (await (await checked(res, statusUrl)).json()) as T;
    },
    { intervalMs: 100 },
  );
}

/** Every resource of an export (by `Type/id`) and the deleted ones, from a completed manifest. */
interface Exported {
  statusUrl: string;
  manifest: Manifest;
  resources: Map<string, Resource>;
  deleted: string[];
}

async function ndjsonOf(session: Session, url: string): Promise<FhirResource[]> {
  const res = await checked(
    await call(session, url, { headers: { accept: 'application/fhir+ndjson' } }),
    url,
  );
  return (await res.text())
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as FhirResource);
}

/** Kicks an export of the session's project off; answers its status URL. */
async function kickoffExport(session: Session, since?: string): Promise<string> {
  const query = since ? `?_since=${encodeURIComponent(since)}` : '';
  const kick = await checked(
    await call(session, `$export${query}`, { headers: { prefer: 'respond-async' } }),
    'export kick-off',
    202,
  );
  return kick.headers.get('content-location')!;
}

async function exportProject(session: Session, since?: string): Promise<Exported> {
  return exported(session, await kickoffExport(session, since));
}

/** Waits for an export and reads all its files. */
async function exported(session: Session, statusUrl: string): Promise<Exported> {
  const manifest = await completed<Manifest>(session, statusUrl);
  expect(manifest.error).toEqual([]);
  const resources = new Map<string, Resource>();
  for (const file of manifest.output) {
    const lines = await ndjsonOf(session, file.url);
    expect(lines).toHaveLength(file.count);
    for (const r of lines) resources.set(`${r.resourceType}/${r.id}`, r as Resource);
  }
  const deleted: string[] = [];
  for (const file of manifest.deleted ?? []) {
    for (const bundle of await ndjsonOf(session, file.url)) {
      for (const e of (bundle as { entry?: { request: { url: string } }[] }).entry ?? [])
        deleted.push(e.request.url);
    }
  }
  return { statusUrl, manifest, resources, deleted };
}

/** `$import` of a source export (its status URL) into the session's project; answers the import manifest. */
async function importExport(target: Session, source: Session, manifestUrl: string): Promise<Manifest> {
  const kick = await checked(
    await call(target, '$import', {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json', prefer: 'respond-async' },
      body: parameters([
        { name: 'manifestUrl', valueUrl: manifestUrl },
        { name: 'accessToken', valueString: source.token },
      ]),
    }),
    'import kick-off',
    202,
  );
  const manifest = await completed<Manifest>(target, kick.headers.get('content-location')!);
  expect(manifest.error).toEqual([]);
  return manifest;
}

/** A resource less what each server gives a write itself (`meta.versionId`, `meta.lastUpdated`). */
function contentOf(resource: FhirResource): unknown {
  const { meta, ...rest } = resource as FhirResource & { meta?: Record<string, unknown> };
  const { versionId: _v, lastUpdated: _l, ...kept } = meta ?? {};
  return Object.keys(kept).length > 0 ? { ...rest, meta: kept } : rest;
}

/**
 * The target's export, less what it held before any import, must equal the source's, resource by
 * resource; references the source wrote absolute to itself (`sourceBase`) arrive relative.
 */
function expectSameResources(source: Exported, target: Exported, own: Set<string>, sourceBase: string): void {
  const targetKeys = [...target.resources.keys()].filter((k) => !own.has(k)).sort();
  expect(targetKeys).toEqual([...source.resources.keys()].sort());
  const absolute = `"reference":"${sourceBase}/`;
  const expected = (key: string) =>
    JSON.parse(
      JSON.stringify(contentOf(source.resources.get(key)!)).replaceAll(absolute, '"reference":"'),
    ) as unknown;
  const different = targetKeys.filter(
    (key) => JSON.stringify(contentOf(target.resources.get(key)!)) !== JSON.stringify(expected(key)),
  );
  if (different.length > 0) {
    const key = different[0]!;
    expect(contentOf(target.resources.get(key)!), `${different.length} differ, ${key} first`).toEqual(
      expected(key),
    );
  }
}

/** `_summary=count` of every type on both sides (less the target's own resources). */
async function expectSameCounts(
  source: Session,
  target: Session,
  types: string[],
  own: Set<string>,
): Promise<void> {
  const counts = async (session: Session, skip: Set<string>) => {
    const out: Record<string, number> = {};
    for (const type of types) {
      const bundle = await json<Bundle>(session, `${type}?_summary=count`);
      out[type] = bundle.total! - [...skip].filter((k) => k.startsWith(`${type}/`)).length;
    }
    return out;
  };
  expect(await counts(target, own)).toEqual(await counts(source, new Set()));
}

/** Every page of a search (following `next`): the matches and the included resources, by `Type/id`. */
async function searchAll(session: Session, query: string, own: Set<string>) {
  const match: string[] = [];
  const include = new Set<string>();
  let total: number | undefined;
  let pages = 0;
  for (let next: string | undefined = query; next !== undefined; pages++) {
    const bundle: Bundle = await json<Bundle>(session, next);
    total ??= bundle.total;
    for (const e of bundle.entry ?? []) {
      const key = `${e.resource.resourceType}/${e.resource.id}`;
      if (own.has(key)) continue;
      if (e.search?.mode === 'include') include.add(key);
      else match.push(key);
    }
    next = bundle.link?.find((l) => l.relation === 'next')?.url;
  }
  return { match: match.sort(), include: [...include].sort(), total, pages };
}

/** The same searches answer the same on both sides: matches, includes and totals, over every page. */
async function expectSameSearches(
  source: Session,
  target: Session,
  queries: string[],
  own: Set<string>,
): Promise<void> {
  for (const query of queries) {
    const expected = await searchAll(source, query, new Set());
    const actual = await searchAll(target, query, own);
    expect(expected.match.length, `${query} matches something`).toBeGreaterThan(0);
    expect(new Set(expected.match).size, `${query}: no match twice over the pages`).toBe(
      expected.match.length,
    );
    expect({ query, match: actual.match, include: actual.include }).toEqual({
      query,
      match: expected.match,
      include: expected.include,
    });
    expect(actual.pages, `${query}: pages`).toBe(expected.pages);
    if (expected.total !== undefined) expect(actual.total, query).toBe(expected.total);
  }
}

/** Searches drawn from the data: by name, patient, code, date, chains, reverse chains, includes, paging. */
function queriesOf(exported: Exported): string[] {
  const all = [...exported.resources.values()];
  const of = (type: string) => all.filter((r) => r.resourceType === type);
  const patients = of('Patient') as (Resource & {
    name?: { family?: string }[];
    gender?: string;
    birthDate?: string;
  })[];
  const patient = patients.find((p) =>
    of('Observation').some((o) => JSON.stringify(o).includes(`Patient/${p.id}"`)),
  )!;
  const family = patient.name?.[0]?.family ?? '';
  const coding = (r: FhirResource) =>
    (r as { code?: { coding?: { system: string; code: string }[] } }).code?.coding?.[0];
  const mostFrequent = (type: string) => {
    const counts = new Map<string, number>();
    for (const r of of(type)) {
      const c = coding(r);
      if (c) counts.set(`${c.system}|${c.code}`, (counts.get(`${c.system}|${c.code}`) ?? 0) + 1);
    }
    return [...counts].sort((a, b) => b[1] - a[1])[0]![0];
  };
  const condition = encodeURIComponent(mostFrequent('Condition'));
  const observation = encodeURIComponent(mostFrequent('Observation'));
  return [
    `Patient?name=${encodeURIComponent(family)}`,
    `Patient?gender=${patient.gender}&birthdate=le${patient.birthDate}&_total=accurate`,
    `Observation?patient=Patient/${patient.id}&_count=50&_total=accurate`,
    `Observation?code=${observation}&date=ge2000-01-01&_count=100`,
    `Condition?code=${condition}&_include=Condition:patient`,
    `Encounter?patient.name=${encodeURIComponent(family)}&_count=25`,
    `Patient?_has:Condition:patient:code=${condition}`,
    'Encounter?_count=200&_total=accurate',
  ];
}

/** The source's resources a test changes after the first export: some updated, deleted, new. */
async function changeSource(source: Session, exported: Exported) {
  const of = (type: string) => [...exported.resources.values()].filter((r) => r.resourceType === type);
  const put = async (r: FhirResource, status = 200) =>
    checked(
      await call(source, `${r.resourceType}/${r.id}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/fhir+json' },
        body: JSON.stringify(r),
      }),
      `PUT ${r.resourceType}/${r.id}`,
      status,
    );
  const updated: string[] = [];
  // Not the first patient, whom the searches of `queriesOf` look for by name.
  for (const p of of('Patient').slice(1, 3)) {
    await put({ ...p, name: [{ use: 'official', family: 'Roundtripper', given: ['Changed'] }] });
    updated.push(`Patient/${p.id}`);
  }
  for (const o of of('Observation').slice(0, 10)) {
    await put({ ...o, status: 'amended' });
    updated.push(`Observation/${o.id}`);
  }
  const deleted = [
    ...of('Observation').slice(10, 20),
    ...of('Condition').slice(0, 2),
    ...of('Encounter').slice(0, 1),
  ].map((r) => `${r.resourceType}/${r.id}`);
  for (const key of deleted) {
    const res = await call(source, key, { method: 'DELETE' });
    expect([200, 204], `DELETE ${key}`).toContain(res.status);
    await res.arrayBuffer();
  }
  // Deleted, then written again under its id: present, never deleted on the target.
  const again = of('Observation')[20]!;
  await (await call(source, `Observation/${again.id}`, { method: 'DELETE' })).arrayBuffer();
  await put({ ...again, status: 'corrected' }, 201);
  updated.push(`Observation/${again.id}`);
  // Created, then deleted: a deletion of what the target never had.
  const transient = { resourceType: 'Patient', id: 'round-trip-transient', gender: 'other' };
  await put(transient, 201);
  await (await call(source, 'Patient/round-trip-transient', { method: 'DELETE' })).arrayBuffer();
  const created: string[] = [];
  const patient = await json<Resource>(
    source,
    'Patient',
    {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({
        resourceType: 'Patient',
        gender: 'female',
        name: [{ family: 'Roundtripper', given: ['New'] }],
      }),
    },
    201,
  );
  created.push(`Patient/${patient.id}`);
  for (let i = 0; i < 3; i++) {
    const observation = await json<Resource>(
      source,
      'Observation',
      {
        method: 'POST',
        headers: { 'content-type': 'application/fhir+json' },
        body: JSON.stringify({
          resourceType: 'Observation',
          status: 'final',
          code: { coding: [{ system: 'http://loinc.org', code: '8867-4' }] },
          subject: { reference: `Patient/${patient.id}` },
          effectiveDateTime: `2024-01-0${i + 1}T10:00:00Z`,
          valueQuantity: { value: 60 + i, unit: '/min' },
        }),
      },
      201,
    );
    created.push(`Observation/${observation.id}`);
  }
  return { updated, deleted, created, transient: 'Patient/round-trip-transient', newPatient: patient.id };
}

/** Both servers (closed after the test): the source on `from`, the target on `to`. */
async function servers(from: 'file' | 'postgres', to: 'file' | 'postgres', database: () => Promise<string>) {
  const start = async (store: 'file' | 'postgres') => {
    const server = await startServe({
      dataDir: tempDir('fpk-round-trip-'),
      ...(store === 'postgres' ? { databaseUrl: await database() } : {}),
    });
    afterTest(() => server.close());
    return server;
  };
  return { source: await start(from), target: await start(to) };
}

const url = postgresTestUrl('$import round trip between the file store and PostgreSQL');
if (url) {
  const database = databaseFactory(url);
  describe.each([
    ['file', 'postgres'],
    ['postgres', 'file'],
  ] as const)('$import round trip: %s store → %s store, two serve processes', (from, to) => {
    it('carries a whole project, then a _since export of its changes', async () => {
      const { source: sourceServer, target: targetServer } = await servers(from, to, database);
      const source = await newProject(sourceServer, 'Round trip source');
      const target = await newProject(targetServer, 'Round trip target');
      const data = dataset();
      // One reference the source holds absolute, to itself: the import makes it relative.
      const absolute = {
        ...data.find((r) => r.resourceType === 'Observation')!,
        id: 'absolute-reference',
        subject: {
          reference: `${sourceServer.fhir}/Patient/${data.find((r) => r.resourceType === 'Patient')!.id}`,
        },
      };
      await upload(source, [...data, absolute]);
      // What the target project holds of its own ($init's admin profile): left out of comparisons.
      const own = new Set((await exportProject(target)).resources.keys());

      const first = await exportProject(source);
      // The importing token has write rights on the exported types only (as the issue asks of a
      // caller), not `system/*.*`: deletions are authorized by the types they name.
      const scope = [...new Set(first.manifest.output.map((o) => `system/${o.type}.cruds`))].join(' ');
      const importer = {
        ...target,
        token: await tokenFor(targetServer, target.client.id, target.client.secret, scope),
      };
      const imported = await importExport(importer, source, first.statusUrl);
      const byType = (m: Manifest) => {
        const out: Record<string, number> = {};
        for (const o of m.output) out[o.type] = (out[o.type] ?? 0) + o.count;
        return out;
      };
      expect(byType(imported)).toEqual(byType(first.manifest));
      const types = Object.keys(byType(first.manifest)).sort();
      expectSameResources(first, await exportProject(target), own, sourceServer.fhir);
      await expectSameCounts(source, target, types, own);
      const queries = queriesOf(first);
      await expectSameSearches(source, target, queries, own);

      const changes = await changeSource(source, first);
      // Imported at once, the export perhaps still running: the import waits out its 202s.
      const secondStatus = await kickoffExport(source, first.manifest.transactionTime);
      const incremental = await importExport(importer, source, secondStatus);
      const second = await exported(source, secondStatus);
      expect([...second.resources.keys()].sort()).toEqual([...changes.updated, ...changes.created].sort());
      expect(second.deleted.sort()).toEqual([...changes.deleted, changes.transient].sort());
      expect(incremental.deleted?.reduce((n, d) => n + d.count, 0)).toBe(second.deleted.length);

      const now = await exportProject(source);
      expectSameResources(now, await exportProject(target), own, sourceServer.fhir);
      await expectSameCounts(source, target, types, own);
      const carried = await json<Resource>(target, 'Observation/absolute-reference');
      expect(carried.subject).toEqual({
        reference: absolute.subject.reference.slice(sourceServer.fhir.length + 1),
      });
      for (const key of [...changes.deleted, changes.transient])
        expect([404, 410], key).toContain((await call(target, key)).status);
      for (const key of changes.updated) {
        const read = await json<Resource>(target, key);
        expect(read.meta?.versionId, `${key} is a new version on the target`).toBe('2');
      }
      await expectSameSearches(
        source,
        target,
        [
          ...queries,
          'Patient?name=Roundtripper',
          `Observation?patient=Patient/${changes.newPatient}&_include=Observation:patient`,
          'Observation?status=amended',
        ],
        own,
      );
    });
  });
}
