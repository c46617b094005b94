/**
 * `npx tsx bench/measure-total.ts`: what a search's total costs (issue 44), on PostgreSQL and the
 * file store: a first page without a count (the default), an exact count of 100,000 and of
 * 1,000,000 matches (unbounded, and bounded at `maxAccurateTotal`'s default, 100,000), and the
 * estimate. Chooses the default bound: an exact count must stay well under a second.
 *
 * Loads `--resources` Observations (default 1,100,000) into a fresh PostgreSQL schema (by `COPY`,
 * `bench/pg-resource-load.ts`; `ANALYZE` after) and a fresh file store (`writeResources`, batches of
 * 5,000): the first 100,000 with code `urn:bench|tenth`, the others `urn:bench|rest`. Each search is
 * parsed as the FHIR router parses it and run `--runs` times after one untimed run; medians, ms.
 *
 *   --resources N   Observations (default 1100000)
 *   --runs R        timed runs per search (default 5)
 *   --store S       pg, file or both (default both)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseSearch } from '../src/fhir/search/search-query.js';
import { searchTotal } from '../src/fhir/search/search-total.js';
import { R4_PATIENT_COMPARTMENT } from '../src/fhir/compartment.js';
import { loadR4Indexer } from '../src/search/index-resource.js';
import { postgresStorage } from '../src/postgres.js';
import type { FhirResource, ResourceQuery, Storage } from '../src/storage/types.js';
import { fileStorage } from '../src/stores.js';
import { allReads } from '../test/helpers/search-reads.js';
import { copyResourcesIn } from './pg-resource-load.js';
import { median, now } from './stats.js';

const { values } = parseArgs({
  options: {
    resources: { type: 'string', default: '1100000' },
    runs: { type: 'string', default: '5' },
    store: { type: 'string', default: 'both' },
  },
});
const N = Number(values.resources);
const RUNS = Number(values.runs);
const PROJECT = 'bench';
const TENTH = 100_000;

function* observations(): Generator<FhirResource> {
  for (let i = 0; i < N; i++) {
    yield {
      resourceType: 'Observation',
      id: `o${i}`,
      status: 'final',
      code: { coding: [{ system: 'urn:bench', code: i < TENTH ? 'tenth' : 'rest' }] },
      subject: { reference: `Patient/p${i % 1000}` },
    };
  }
}

/** The searches: each a query string and the `maxTotal` an exact count stops past. */
const SEARCHES: [label: string, query: string, maxTotal?: number][] = [
  ['first page, no total (default), 100k match', 'code=urn:bench|tenth'],
  ['first page, no total (default), 1M match', 'code=urn:bench|rest'],
  ['first page, no total, whole type', ''],
  ['_summary=count of 100k, unbounded', 'code=urn:bench|tenth&_summary=count', Infinity],
  ['_summary=count of 1M, unbounded', 'code=urn:bench|rest&_summary=count', Infinity],
  ['_summary=count of 1M, bounded at 100,000 (refused)', 'code=urn:bench|rest&_summary=count', TENTH],
  ['_total=accurate of 1M, bounded at 100,000 (refused)', 'code=urn:bench|rest&_total=accurate', TENTH],
  ['_total=accurate, whole type, unbounded', '_total=accurate', Infinity],
  ['_total=estimate of 100k', 'code=urn:bench|tenth&_total=estimate'],
  ['_total=estimate of 1M', 'code=urn:bench|rest&_total=estimate'],
];

async function timeSearches(storage: Storage, name: string): Promise<void> {
  for (const [label, text, maxTotal] of SEARCHES) {
    const times: number[] = [];
    let total: number | undefined;
    for (let i = 0; i <= RUNS; i++) {
      const start = now();
      const parsed = await parseSearch('Observation', new URLSearchParams(text), {}, allReads());
      const mode = searchTotal(parsed.request);
      const query: ResourceQuery = {
        ...parsed.query,
        // One more than the page, as the FHIR search asks.
        ...(parsed.query.count ? { count: parsed.query.count + 1 } : {}),
        total: mode,
        ...(mode === 'accurate' ? { maxTotal: maxTotal ?? TENTH } : {}),
      };
      total = (await storage.searchResources(PROJECT, 'Observation', query)).total;
      if (i > 0) times.push(now() - start);
    }
    console.log(
      `${name.padEnd(10)} ${label.padEnd(54)} ${median(times).toFixed(1).padStart(9)} ms  total ${total ?? '-'}`,
    );
  }
}

async function measurePostgres(): Promise<void> {
  const url = process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
  if (!url) throw new Error('Set FPK_BENCH_POSTGRES_URL (or FPK_TEST_POSTGRES_URL)');
  const schema = `fpk_bench_total_${process.pid}`;
  const storage = postgresStorage({ connectionString: url, schema, statementTimeoutMs: 0 });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await storage.createProject({ id: PROJECT, name: 'bench', strictMode: false });
    const load = await copyResourcesIn({
      connectionString: url,
      schema,
      projectId: PROJECT,
      resources: observations(),
      indexer: await loadR4Indexer(),
      compartment: R4_PATIENT_COMPARTMENT,
    });
    console.log(`PostgreSQL: ${load.resources} Observations copied in ${(load.ms / 1000).toFixed(1)} s`);
    await admin.query(`VACUUM (ANALYZE) "${schema}".resources`);
    await timeSearches(storage, 'PostgreSQL');
  } finally {
    await storage.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  }
}

async function measureFile(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-bench-total-'));
  const storage = await fileStorage({ dir, durability: 'write' });
  try {
    const start = now();
    let batch: FhirResource[] = [];
    for (const resource of observations()) {
      batch.push(resource);
      if (batch.length === 5000) {
        await storage.writeResources(
          PROJECT,
          batch.map((r) => ({ op: 'create', resource: r })),
        );
        batch = [];
      }
    }
    if (batch.length > 0)
      await storage.writeResources(
        PROJECT,
        batch.map((r) => ({ op: 'create', resource: r })),
      );
    console.log(`file store: ${N} Observations written in ${((now() - start) / 1000).toFixed(1)} s`);
    await timeSearches(storage, 'file');
  } finally {
    await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (values.store !== 'file') await measurePostgres();
if (values.store !== 'pg') await measureFile();
