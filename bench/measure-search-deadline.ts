/**
 * `npx tsx bench/measure-search-deadline.ts`: what a search's deadline costs on the PostgreSQL
 * store (issue 44). A search with `ResourceQuery.deadline` runs in a read-only transaction whose
 * `statement_timeout` is set to what is left of it: one round trip more before its statement
 * (`BEGIN READ ONLY; SET LOCAL statement_timeout = …`, one simple query) and one after (`COMMIT`).
 * This times a plain selective search (`Patient?family=` a whole family name, a few matches, first
 * page with its total) with and without a deadline, alternating, and prints the medians and means.
 *
 * Loads `--patients` generated patients (`bench/dataset.ts`, 401 resources each) into schema
 * `--schema` of `FPK_BENCH_POSTGRES_URL` (else `FPK_TEST_POSTGRES_URL`), skipped when it holds
 * them already, then runs `ANALYZE`.
 *
 *   --patients N   generated patients (default 25)
 *   --schema NAME  schema (default fpk_bench_deadline_<N>; kept unless --drop)
 *   --runs R       timed runs of each kind (default 500, after 20 warm-up runs of each)
 *   --drop         drop the schema at the end
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseSearch } from '../src/fhir/search/search-query.js';
import { postgresStorage } from '../src/postgres.js';
import type { FhirResource, ResourceQuery } from '../src/storage/types.js';
import { allReads } from '../test/helpers/search-reads.js';
import { generatePatients, RESOURCES_PER_PATIENT } from './dataset.js';
import { median, now } from './stats.js';

const { values } = parseArgs({
  options: {
    patients: { type: 'string', default: '25' },
    schema: { type: 'string' },
    runs: { type: 'string', default: '500' },
    drop: { type: 'boolean', default: false },
  },
});
const patients = Number(values.patients);
const runs = Number(values.runs);
const schema = values.schema ?? `fpk_bench_deadline_${patients}`;
const url = process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
if (!url) throw new Error('Set FPK_BENCH_POSTGRES_URL (or FPK_TEST_POSTGRES_URL)');
const PROJECT = 'bench';
const s = `"${schema}"`;

const storage = postgresStorage({ connectionString: url, schema });
const admin = new pg.Pool({ connectionString: url, max: 1 });

async function load(): Promise<void> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${s}.resources WHERE project_id = $1 AND superseded_seq IS NULL`,
    [PROJECT],
  );
  if (rows[0]!.n >= patients * RESOURCES_PER_PATIENT) return;
  let batch: FhirResource[] = [];
  const flush = async () => {
    await storage.writeResources(
      PROJECT,
      batch.map((r) => ({ op: 'update' as const, resource: r as FhirResource & { id: string } })),
    );
    batch = [];
  };
  for (const resource of generatePatients(patients, 42) as Iterable<FhirResource>) {
    if (resource.resourceType === 'Patient' && batch.length > 0) await flush();
    batch.push(resource);
  }
  if (batch.length > 0) await flush();
}

/** The rarest family name's search, parsed once. */
async function selectiveQuery(): Promise<{ query: ResourceQuery; label: string }> {
  const { rows } = await admin.query<{ exact: string }>(
    `SELECT exact FROM ${s}.search_strings
      WHERE key = ANY(ARRAY(SELECT key FROM ${s}.search_keys WHERE resource_type = 'Patient' AND param = 'family'))
      GROUP BY exact ORDER BY count(*), exact LIMIT 1`,
  );
  const label = `Patient?family=${rows[0]!.exact}&_total=accurate`;
  const params = new URLSearchParams({ family: rows[0]!.exact, _total: 'accurate', _count: '20' });
  const parsed = await parseSearch('Patient', params, {}, allReads());
  return { query: parsed.query, label };
}

const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

try {
  await storage.ping();
  await load();
  for (const table of ['resources', 'search_strings', 'search_keys'])
    await admin.query(`ANALYZE ${s}.${table}`);
  const { query, label } = await selectiveQuery();
  const timed: Record<'plain' | 'deadline', number[]> = { plain: [], deadline: [] };
  let matches = 0;
  for (let i = 0; i < runs + 20; i++) {
    for (const kind of ['plain', 'deadline'] as const) {
      const q = kind === 'deadline' ? { ...query, deadline: Date.now() + 10_000 } : query;
      const started = now();
      const page = await storage.searchResources(PROJECT, 'Patient', q);
      const ms = now() - started;
      matches = page.total ?? page.resources.length;
      if (i >= 20) timed[kind].push(ms);
    }
  }
  console.log(
    `${label}: ${matches} matches, ${patients * RESOURCES_PER_PATIENT} resources, ${runs} runs each`,
  );
  console.log('| search | median ms | mean ms |');
  console.log('|---|---:|---:|');
  for (const kind of ['plain', 'deadline'] as const) {
    console.log(`| ${kind} | ${median(timed[kind]).toFixed(3)} | ${mean(timed[kind]).toFixed(3)} |`);
  }
  const extra = median(timed.deadline) - median(timed.plain);
  console.log(
    `deadline overhead: ${extra.toFixed(3)} ms median (${((extra / median(timed.plain)) * 100).toFixed(0)}%)`,
  );
} finally {
  if (values.drop) await admin.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await storage.close();
  await admin.end();
}
