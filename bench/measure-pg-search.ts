/**
 * `npx tsx bench/measure-pg-search.ts`: FHIR search on the PostgreSQL store, answered in SQL over
 * its index tables (issue 30), at a given size.
 *
 * Loads `--patients` generated patients (`bench/dataset.ts`, 401 resources each: 250 ≈ 100k
 * resources) into schema `--schema` of `FPK_BENCH_POSTGRES_URL` (else `FPK_TEST_POSTGRES_URL`)
 * through `writeResources` (one batch per patient; skipped when the schema already holds them),
 * runs `ANALYZE` (what autovacuum does after a load; with `--vacuum`, `VACUUM (ANALYZE)`: what it
 * also does once enough rows were inserted, marking the pages all-visible so that index-only scans
 * skip the heap), then times each query `--runs` times (parse
 * and store search, first page of 20, total included) and prints the medians:
 *
 *   - the selective token (`Observation?code=http://loinc.org|2345-7`, about 1% of the resources),
 *     its first page and its `_summary=count`;
 *   - a string prefix (`Patient?name=` three letters of a family name);
 *   - a date range (`Observation?date=ge…&date=lt…`, a month);
 *   - a one-level chain (`Observation?subject:Patient.name=` a whole family name);
 *   - the index size per live resource (`pg_total_relation_size` of the index tables) next to the
 *     resources table's.
 *
 *   --patients N   generated patients (default 250)
 *   --schema NAME  schema (default fpk_bench_search_<N>; kept for the next run unless --drop)
 *   --runs R       timed runs per query (default 15, after 2 warm-up runs)
 *   --vacuum       VACUUM (ANALYZE) the tables instead of ANALYZE
 *   --drop         drop the schema at the end
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { generatePatients, RESOURCES_PER_PATIENT } from './dataset.js';
import { now } from './stats.js';
import { pgSearchQueries, timePgSearch } from './pg-search-queries.js';
import { postgresStorage } from '../src/postgres.js';
import type { FhirResource } from '../src/storage/types.js';

const { values } = parseArgs({
  options: {
    patients: { type: 'string', default: '250' },
    schema: { type: 'string' },
    runs: { type: 'string', default: '15' },
    drop: { type: 'boolean', default: false },
    vacuum: { type: 'boolean', default: false },
  },
});
const patients = Number(values.patients);
const runs = Number(values.runs);
const schema = values.schema ?? `fpk_bench_search_${patients}`;
const url = process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
if (!url) throw new Error('Set FPK_BENCH_POSTGRES_URL (or FPK_TEST_POSTGRES_URL)');
const PROJECT = 'bench';
const s = `"${schema}"`;

const storage = postgresStorage({ connectionString: url, schema, statementTimeoutMs: 0 });
const admin = new pg.Pool({ connectionString: url, max: 1 });
const one = async <T>(sql: string, params: unknown[] = []): Promise<T> =>
  (await admin.query(sql, params)).rows[0] as T;

try {
  await storage.ping();
  const { n } = await one<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${s}.resources WHERE project_id = $1 AND superseded_seq IS NULL`,
    [PROJECT],
  );
  if (n < patients * RESOURCES_PER_PATIENT) {
    const started = now();
    let batch: FhirResource[] = [];
    let written = n;
    for (const resource of generatePatients(patients, 42) as Iterable<FhirResource>) {
      if (resource.resourceType === 'Patient' && batch.length > 0) {
        await storage.writeResources(
          PROJECT,
          batch.map((r) => ({ op: 'update' as const, resource: r as FhirResource & { id: string } })),
        );
        written += batch.length;
        batch = [];
        if (written % 20_000 < RESOURCES_PER_PATIENT)
          console.error(`loaded ${written} in ${Math.round((now() - started) / 1000)} s`);
      }
      batch.push(resource);
    }
    if (batch.length > 0) {
      await storage.writeResources(
        PROJECT,
        batch.map((r) => ({ op: 'update' as const, resource: r as FhirResource & { id: string } })),
      );
    }
    console.error(`load: ${Math.round(now() - started)} ms`);
  }
  const analyze = values.vacuum ? 'VACUUM (ANALYZE)' : 'ANALYZE';
  await admin.query(`${analyze} ${s}.resources`);
  for (const t of [
    'search_tokens',
    'search_strings',
    'search_dates',
    'search_numbers',
    'search_references',
    'search_uris',
  ]) {
    await admin.query(`${analyze} ${s}.${t}`);
  }
  const { live } = await one<{ live: number }>(
    `SELECT count(*)::int AS live FROM ${s}.resources WHERE superseded_seq IS NULL AND NOT deleted`,
  );
  const queries = await pgSearchQueries(admin, s);
  console.log(`PostgreSQL search, ${live} live resources (${patients} patients), median of ${runs} runs`);
  console.log('| query | matches | median ms | target ms |');
  console.log('|---|---:|---:|---:|');
  for (const search of queries) {
    const { medianMs, total } = await timePgSearch(storage, PROJECT, search, runs);
    console.log(
      `| ${search.label}: \`${search.type}?${search.query}\` | ${total} | ${medianMs.toFixed(1)} | ${search.targetMs} |`,
    );
  }
  const size = await one<{ index: string; resources: string }>(
    `SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'search\\_%' AND c.relname <> 'search_index_state') AS index,
            pg_total_relation_size('${s}.resources') AS resources`,
    [schema],
  );
  console.log(
    `index tables: ${Math.round(Number(size.index) / live)} bytes per live resource ` +
      `(resources table: ${Math.round(Number(size.resources) / live)} bytes per live resource)`,
  );
} finally {
  await storage.close();
  if (values.drop) await admin.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await admin.end();
}
