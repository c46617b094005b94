/**
 * `node --import tsx bench/measure-costly-searches.ts [options]`: issue 44's costly searches on the
 * file store and on PostgreSQL, side by side over the same data, over HTTP.
 *
 * Loads one dataset into a file store (with its search index, as `npm start` opens it) and into a
 * fresh PostgreSQL schema (`ANALYZE`d after the load, as autovacuum would), mounts a FHIR router on
 * each in this process, then asks each query of the issue of both servers in turns (the store going
 * first alternating), after one untimed round (the file store builds its postings on the first
 * search of a parameter). Prints, per query, each store's median, the PostgreSQL / file ratio and
 * the answer's total and entry count (which must agree), with and without a count (`_total=accurate`
 * and `_total=none`). The queries:
 *
 *   - `Observation?_sort=` nine keys (status, code, date, subject, value-quantity, category,
 *     performer, encounter, -_lastUpdated);
 *   - `Patient?_has:Observation:subject:value-quantity:missing=false`;
 *   - two nested `_has` (Patient ← Observation ← DiagnosticReport `result`; Patient ← Encounter ←
 *     Observation `encounter`);
 *   - type-level `Patient/$everything` (first page);
 *   - `Observation?_offset=11995&_sort=value-quantity`;
 *   - `Observation?code:text=code` repeated 50 times (the issue's 777-character URL), and the same
 *     with `body` (which many Observations' code texts start with).
 *
 * The router's search bounds (`searchLimits`: sort keys, parameters, `_offset`) and turn
 * (`searchTimeoutMs`) are raised above what these queries ask, so that they run.
 *
 * Options:
 *   --data synthea|generated   the Synthea sample (default, `../shared/data/synthea-r4-100` or
 *                              FPK_SYNTHEA_DIR: 38,970 resources, 16,315 Observations) or
 *                              `bench/dataset.ts` (`--patients` patients, 401 resources each)
 *   --patients N               generated patients (default 250: 100,250 resources)
 *   --reps R                   timed rounds (default 5)
 *   --only a,b                 only the queries with these keys (sort, missing, nested, nested2,
 *                              everything, offset, text, text-body)
 *   --totals accurate,none     which `_total` to ask (default both)
 *   --statement-timeout-ms T   the PostgreSQL store's statement timeout (default 120000)
 *   --schema NAME              keep the PostgreSQL data in this schema (reused when it holds the
 *                              dataset; dropped at the end otherwise)
 *   --analyze                  `VACUUM (ANALYZE)` every table after the load (default: the
 *                              statistics the store gathers itself, only `resources` after its
 *                              first 1,000 writes, as a server sees them where autovacuum is off
 *                              or has not run yet)
 *   --no-file                  PostgreSQL only
 *   --help
 *
 * PostgreSQL: FPK_BENCH_POSTGRES_URL, else FPK_TEST_POSTGRES_URL.
 */
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import express from 'express';
import pg from 'pg';
import { fhirRouter } from '../src/fhir/router.js';
import type { Principal } from '../src/http/principal.js';
import { postgresStorage } from '../src/postgres.js';
import { INDEX_TABLES } from '../src/storage/postgres/search-tables.js';
import type { FhirResource, Storage } from '../src/storage/types.js';
import { fileStorage, r4SearchIndexer } from '../src/stores.js';
import { generatePatients } from './dataset.js';
import { fetchJson } from './http-json.js';
import { median, now } from './stats.js';
import { readSynthea } from './synthea.js';

const { values: options } = parseArgs({
  options: {
    data: { type: 'string', default: 'synthea' },
    patients: { type: 'string', default: '250' },
    reps: { type: 'string', default: '5' },
    only: { type: 'string' },
    totals: { type: 'string', default: 'accurate,none' },
    'statement-timeout-ms': { type: 'string', default: '120000' },
    schema: { type: 'string' },
    'no-file': { type: 'boolean', default: false },
    analyze: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

const PROJECT = 'bench';
const principal: Principal = {
  kind: 'client',
  id: 'bench',
  projectId: PROJECT,
  scopes: ['system/*.*'],
  admin: false,
  superAdmin: false,
};

/** One costly query of the issue: a key, and the path and query after the FHIR base. */
interface CostlyQuery {
  key: string;
  label: string;
  path: string;
}

const SORT9 = 'status,code,date,subject,value-quantity,category,performer,encounter,-_lastUpdated';
const QUERIES: readonly CostlyQuery[] = [
  { key: 'sort', label: '_sort with 9 keys', path: `Observation?_sort=${SORT9}` },
  {
    key: 'missing',
    label: '_has with :missing',
    path: 'Patient?_has:Observation:subject:value-quantity:missing=false',
  },
  {
    key: 'nested',
    label: 'nested _has (DiagnosticReport result)',
    path: 'Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final',
  },
  {
    key: 'nested2',
    label: 'nested _has (Observation encounter)',
    path: 'Patient?_has:Encounter:subject:_has:Observation:encounter:status=final',
  },
  { key: 'everything', label: 'type-level Patient/$everything', path: 'Patient/$everything?' },
  {
    key: 'offset',
    label: 'deep _offset, _sort=value-quantity',
    path: 'Observation?_offset=11995&_sort=value-quantity',
  },
  {
    key: 'text',
    label: '50 repeated :text (code)',
    path: `Observation?${Array.from({ length: 50 }, () => 'code:text=code').join('&')}`,
  },
  {
    key: 'text-body',
    label: '50 repeated :text (body)',
    path: `Observation?${Array.from({ length: 50 }, () => 'code:text=body').join('&')}`,
  },
];

const HELP = fs.readFileSync(new URL(import.meta.url), 'utf8').split('*/')[0]!;

/** The dataset's resources. */
function dataset(): { name: string; resources: FhirResource[] } {
  if (options.data === 'generated') {
    const patients = Number(options.patients);
    return {
      name: `generated, ${patients} patients`,
      resources: [...generatePatients(patients, 42)] as FhirResource[],
    };
  }
  const dir = process.env.FPK_SYNTHEA_DIR ?? path.resolve('../shared/data/synthea-r4-100');
  if (!fs.existsSync(dir))
    throw new Error(`No Synthea sample at ${dir} (set FPK_SYNTHEA_DIR or --data generated)`);
  return { name: 'Synthea sample', resources: readSynthea(dir) };
}

/** Writes `resources` in batches of 1,000 (ids kept). */
async function load(storage: Storage, resources: readonly FhirResource[]): Promise<number> {
  const started = now();
  for (let i = 0; i < resources.length; i += 1000) {
    await storage.writeResources(
      PROJECT,
      resources
        .slice(i, i + 1000)
        .map((resource) => ({ op: 'update' as const, resource: resource as FhirResource & { id: string } })),
    );
  }
  return now() - started;
}

/** A FHIR router on `storage`, listening on a free port: its base URL and how to stop it. */
async function serve(storage: Storage): Promise<{ base: string; close: () => void }> {
  const app = express();
  app.use(
    '/fhir',
    fhirRouter({
      storage,
      authenticate: () => principal,
      onError: () => undefined,
      // The issue's queries pass the default bounds (5 sort keys, 30 parameters, `_offset` 10,000)
      // and may take longer than the default turn: raised, so that the queries themselves are timed.
      searchLimits: { maxSortKeys: 9, maxFilters: 60, maxOffset: 100_000 },
      searchTimeoutMs: 600_000,
    }),
  );
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`,
    close: () => server.close(),
  };
}

/** One answer: its time, status, total and entries (matches only). */
interface Answer {
  ms: number;
  status: number;
  total?: number;
  entries: number;
}

async function ask(base: string, query: string): Promise<Answer> {
  const start = now();
  const answer = await fetchJson(`${base}/${query}`);
  const ms = now() - start;
  const body = answer.body as { total?: number; entry?: unknown[]; issue?: unknown[] } | undefined;
  if (answer.status !== 200) console.error(`  ${answer.status} ${JSON.stringify(body).slice(0, 300)}`);
  return {
    ms,
    status: answer.status,
    ...(body?.total === undefined ? {} : { total: body.total }),
    entries: body?.entry?.length ?? 0,
  };
}

/**
 * With `--analyze`, `VACUUM (ANALYZE)` of every table (what autovacuum does after a load); then
 * prints which tables have statistics.
 */
async function statistics(admin: pg.Client, schema: string): Promise<void> {
  const s = `"${schema}"`;
  if (options.analyze) {
    for (const t of [
      'resources',
      'resource_compartments',
      'resource_identifiers',
      ...INDEX_TABLES,
      'search_keys',
    ])
      await admin.query(`VACUUM (ANALYZE) ${s}.${t}`);
  }
  const { rows } = await admin.query<{ relname: string }>(
    `SELECT relname FROM pg_stat_user_tables WHERE schemaname = $1 AND last_analyze IS NOT NULL ORDER BY 1`,
    [schema],
  );
  console.log(`postgres: tables with statistics: ${rows.map((r) => r.relname).join(', ') || 'none'}`);
}

/** The PostgreSQL store on schema `schema`, loaded with `resources` unless it holds them already. */
async function openPostgres(
  url: string,
  schema: string,
  resources: readonly FhirResource[],
): Promise<Storage> {
  const storage = postgresStorage({
    connectionString: url,
    schema,
    statementTimeoutMs: Number(options['statement-timeout-ms']),
  });
  await storage.ping();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    const s = `"${schema}"`;
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.resources WHERE project_id = $1 AND superseded_seq IS NULL`,
      [PROJECT],
    );
    // The sample has resources written twice (shared bundles): its distinct ones count.
    const distinct = new Set(resources.map((r) => `${r.resourceType}/${String(r.id)}`)).size;
    if (rows[0]!.n < distinct) {
      await storage.createProject({ id: PROJECT, name: 'bench', strictMode: false }).catch(() => undefined);
      console.error(`postgres: loading ${resources.length} resources`);
      const ms = await load(storage, resources);
      console.error(`postgres: loaded in ${(ms / 1000).toFixed(1)} s`);
    }
    await statistics(admin, schema);
  } finally {
    await admin.end();
  }
  return storage;
}

/** A store behind its router. */
interface Server {
  store: string;
  storage: Storage;
  base: string;
  close: () => void;
}

const loadAverage = (): string =>
  os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');

/** The file store (unless `--no-file`) and PostgreSQL, each loaded and behind a router, in that order. */
async function openServers(
  url: string,
  schema: string,
  dir: string,
  resources: readonly FhirResource[],
  servers: Server[],
): Promise<void> {
  if (!options['no-file']) {
    const file = await fileStorage({ dir, indexer: r4SearchIndexer });
    await file.createProject({ id: PROJECT, name: 'bench', strictMode: false });
    const ms = await load(file, resources);
    console.error(`file: loaded in ${(ms / 1000).toFixed(1)} s`);
    servers.push({ store: 'file', storage: file, ...(await serve(file)) });
  }
  const postgres = await openPostgres(url, schema, resources);
  servers.push({ store: 'postgres', storage: postgres, ...(await serve(postgres)) });
}

/**
 * `q` asked of every server in turns, the first going first alternating, one untimed round then
 * `reps` timed: a table row with each store's median, the PostgreSQL / file ratio and the answers.
 */
async function timeQuery(servers: readonly Server[], label: string, total: string, q: string, reps: number) {
  const times = new Map<string, number[]>(servers.map((s) => [s.store, []]));
  const last = new Map<string, Answer>();
  for (let round = 0; round <= reps; round++) {
    const order = round % 2 === 0 ? servers : [...servers].reverse();
    for (const server of order) {
      const answer = await ask(server.base, q);
      last.set(server.store, answer);
      if (round > 0) times.get(server.store)!.push(answer.ms);
    }
  }
  const medians = servers.map((s) => median(times.get(s.store)!));
  const file = medians.length > 1 ? medians[0]! : Number.NaN;
  const pgMs = medians.at(-1)!;
  const answers = servers
    .map((s) => {
      const a = last.get(s.store)!;
      return `${s.store} ${a.status} total ${a.total ?? '-'} entries ${a.entries}`;
    })
    .join('; ');
  const fileMs = Number.isNaN(file) ? '-' : file.toFixed(1);
  const ratio = Number.isNaN(file) ? '-' : (pgMs / file).toFixed(2);
  return `| ${label} | ${total} | ${fileMs} | ${pgMs.toFixed(1)} | ${ratio} | ${answers} |`;
}

/** Closes the servers and their stores, removes the file store, and drops a schema of its own. */
async function cleanUp(servers: readonly Server[], dir: string, url: string, schema: string): Promise<void> {
  for (const server of servers) {
    server.close();
    await server.storage.close();
  }
  fs.rmSync(dir, { recursive: true, force: true });
  if (options.schema) return;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}

async function main(): Promise<void> {
  if (options.help) {
    console.log(HELP);
    return;
  }
  const url = process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
  if (!url) throw new Error('Set FPK_BENCH_POSTGRES_URL or FPK_TEST_POSTGRES_URL');
  const reps = Number(options.reps);
  const only = options.only?.split(',');
  const totals = options.totals.split(',');
  const { name, resources } = dataset();
  const observations = resources.filter((r) => r.resourceType === 'Observation').length;
  console.log(
    `Costly searches (issue 44), ${name}: ${resources.length} resources, ${observations} Observations; ` +
      `medians of ${reps}; load average ${loadAverage()}; ${new Date().toISOString()}`,
  );
  const schema = options.schema ?? `fpk_bench_costly_${process.pid}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-costly-'));
  const servers: Server[] = [];
  try {
    await openServers(url, schema, dir, resources, servers);
    const rows: string[] = [];
    for (const query of QUERIES.filter((q) => !only || only.includes(q.key))) {
      // `$everything` has no total.
      for (const total of query.key === 'everything' ? ['-'] : totals) {
        const q = total === '-' ? query.path : `${query.path}&_total=${total}`;
        rows.push(await timeQuery(servers, query.label, total, q, reps));
        console.error(rows.at(-1));
      }
    }
    console.log('| Query | `_total` | file ms | PostgreSQL ms | PG / file | answers |');
    console.log('| --- | --- | ---: | ---: | ---: | --- |');
    for (const row of rows) console.log(row);
    console.log(`load average at the end: ${loadAverage()}`);
  } finally {
    await cleanUp(servers, dir, url, schema);
  }
}

await main();
