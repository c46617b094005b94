// `npm run bench`: runs every measurement once and prints one table; the same figures go to
// `bench/out/results.json`. `npm run bench -- --help` lists the options (USAGE below).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runBenchmark, runImportBenchmark, type BenchOptions, type BenchResults } from './benchmark.js';
import { runFairness } from './fairness.js';
import { runHuge } from './huge.js';
import { RESOURCES_PER_PATIENT } from './dataset.js';
import type { StoreKind } from './server-protocol.js';
import { renderComparison, renderMarkdown, renderTable } from './table.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));

const USAGE = `Usage: npm run bench -- [options]

Runs every measurement once and prints one table (the same figures go to bench/out/results.json).

  --patients N      main dataset size (default 250 ≈ 100k resources)
  --large           1,000,000 resources (2,494 patients); memory compared with N/5
  --huge            with --store postgres: issue 32's 10M-resource run (bench/huge.ts; 24,938
                    patients unless --patients): NDJSON upload of --upload-patients (default 125),
                    the rest by COPY, system and Group exports, searches, SCIM at --scim-users
                    (default 1000000), database size, memory; run by hand
  --fairness        only issue 44's tenant-fairness benchmark (bench/fairness.ts), on each --store:
                    a noisy project of --patients patients runs the issue's costly queries, 12 at
                    once, while a quiet project reads, searches, gets tokens and asks /readyz, alone
                    then beside it; the quiet p99 loaded / idle must stay within 3x and none of its
                    requests may fail (exit code 1 when a target is missed)
  --fairness-requests N  with --fairness: the quiet project's requests in each phase (default 400)
  --upload-patients N  with --huge: patients loaded by NDJSON upload (default 125 ≈ 50k resources)
  --search-runs N   with --huge: timed runs of each search (default 9)
  --reps R          repetitions of each main timing (default 3)
  --scim-users U    SCIM users (default 100000; 0 skips SCIM)
  --scim-requests L,C,P  timed SCIM lookups, creates and PATCHes (default 500,200,200)
  --audit-requests A  SCIM creates and FHIR reads timed on each of two servers, audit trail on
                    (with its journal) and off, in 40 alternating rounds (default 400; 0 skips the comparison)
  --store S         file (default), memory or postgres; a comma-separated list (file,postgres)
                    runs each in turn and prints one table with a column per store
  --database-url U  PostgreSQL for --store postgres (default $FPK_BENCH_POSTGRES_URL, else
                    $FPK_TEST_POSTGRES_URL, else postgres://postgres@127.0.0.1:5432/test);
                    each server process works in a fresh schema, dropped at its end
  --durability D    file store durability: fsync (default) or write (no fsync; diagnostic only)
  --probe-gc        also sample the export worker's live memory after forced GCs (diagnostic)
  --validator V     default, or reference: strict projects validate with @medplum/core alone
                    (diagnostic: the strict upload as before the validator's fast path)
  --group-percent P percent of the patients in the exported Group (default 1)
  --synthea DIR     the Synthea bundle directory (default ../shared/data/synthea-r4-100)
  --no-synthea      skip the Synthea sample
  --txn-concurrency N  patient bundles in flight in the concurrent Synthea transaction row (default 4)
  --import-resources N  generated resources of the $import section (default 50000; 1000000 for
                    the issue's 1M run): the Synthea sample and N generated resources, one NDJSON
                    file per type served with a manifest by a plain Node server, each imported
                    (POST /$import, kick-off to completed status) and uploaded (the same files, a
                    request each) --reps times in turns into fresh lenient projects; memory at N/5
                    and N
  --no-import       skip the $import section
  --import-only     only the $import section, on each --store
  --no-memory       skip the second data size
  --no-search       skip the search section (the main dataset loaded again into an indexed store
                    of the kind under test, and issue 30's searches timed against their targets)
  --profile         V8 CPU profiles of the server and its export workers in bench/out/profiles
  --out FILE        JSON output (default bench/out/results.json)
  --markdown        print Markdown instead of plain text: the targets (figure, target, value,
                    verdict), then every figure; docs/performance.md's targets table is this
  --from FILE       measure nothing: print the tables of a saved run (an --out file)
  --help            this text
`;

const { values } = parseArgs({
  options: {
    help: { type: 'boolean', default: false },
    markdown: { type: 'boolean', default: false },
    from: { type: 'string' },
    patients: { type: 'string' },
    large: { type: 'boolean', default: false },
    huge: { type: 'boolean', default: false },
    fairness: { type: 'boolean', default: false },
    'fairness-requests': { type: 'string' },
    'upload-patients': { type: 'string' },
    'search-runs': { type: 'string' },
    reps: { type: 'string' },
    'scim-users': { type: 'string' },
    'scim-requests': { type: 'string', default: '500,200,200' },
    'audit-requests': { type: 'string' },
    store: { type: 'string', default: 'file' },
    'database-url': { type: 'string' },
    durability: { type: 'string', default: 'fsync' },
    synthea: { type: 'string', default: path.resolve(HERE, '../../shared/data/synthea-r4-100') },
    'no-synthea': { type: 'boolean', default: false },
    'txn-concurrency': { type: 'string' },
    'no-memory': { type: 'boolean', default: false },
    'import-resources': { type: 'string' },
    'no-import': { type: 'boolean', default: false },
    'import-only': { type: 'boolean', default: false },
    'no-search': { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    'probe-gc': { type: 'boolean', default: false },
    validator: { type: 'string', default: 'default' },
    'group-percent': { type: 'string' },
    out: { type: 'string', default: path.join(HERE, 'out', 'results.json') },
  },
});

/** The tables of `results` (one run, or one per store), as text or Markdown. */
function render(results: BenchResults[]): string {
  if (values.markdown) return renderMarkdown(results);
  return results.length === 1 ? renderTable(results[0]!) : renderComparison(results);
}

if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
if (values.from) {
  const saved = JSON.parse(fs.readFileSync(values.from, 'utf8')) as BenchResults | BenchResults[];
  console.log(render(Array.isArray(saved) ? saved : [saved]));
  process.exit(0);
}

function int(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
  return n;
}

const stores = values.store.split(',');
for (const store of stores) {
  if (store !== 'file' && store !== 'memory' && store !== 'postgres')
    throw new Error('--store must be file, memory or postgres (or a comma-separated list of them)');
}
if (values.durability !== 'fsync' && values.durability !== 'write')
  throw new Error('--durability must be fsync or write');
if (values.validator !== 'default' && values.validator !== 'reference')
  throw new Error('--validator must be default or reference');
const large = values.large;
const huge = values.huge;
if (huge && values.store !== 'postgres') throw new Error('--huge runs on --store postgres alone');
if (huge && values.fairness) throw new Error('--huge and --fairness are separate runs');
const patients = int(
  'patients',
  values.patients,
  huge
    ? Math.ceil(10_000_000 / RESOURCES_PER_PATIENT)
    : large
      ? Math.ceil(1_000_000 / RESOURCES_PER_PATIENT)
      : 250,
);
const [lookups, creates, patches] = values['scim-requests']
  .split(',')
  .map((v, i) => int(['lookups', 'creates', 'patches'][i]!, v, 0));
const outDir = path.dirname(values.out);
fs.mkdirSync(outDir, { recursive: true });
const databaseUrl =
  values['database-url'] ??
  process.env.FPK_BENCH_POSTGRES_URL ??
  process.env.FPK_TEST_POSTGRES_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const options = (store: StoreKind): BenchOptions => ({
  patients,
  memoryFactor: values['no-memory'] ? 0 : large ? 0.2 : 5,
  reps: int('reps', values.reps, 3),
  otherReps: 1,
  fastReps: 5,
  uploadPatients: huge ? int('upload-patients', values['upload-patients'], 125) : Math.min(patients, 25),
  scimUsers: int('scim-users', values['scim-users'], huge ? 1_000_000 : 100_000),
  scimRequests: { lookups: lookups ?? 500, creates: creates ?? 200, patches: patches ?? 200 },
  auditRequests: int('audit-requests', values['audit-requests'], 400),
  store,
  ...(store === 'postgres' ? { databaseUrl } : {}),
  durability: values.durability as 'fsync' | 'write',
  probeGc: values['probe-gc'],
  validator: values.validator as 'default' | 'reference',
  groupPercent: int('group-percent', values['group-percent'], 1) || 1,
  synthea: values['no-synthea'] ? false : path.resolve(values.synthea),
  txnConcurrency: int('txn-concurrency', values['txn-concurrency'], 4) || 4,
  search: !values['no-search'],
  importResources: values['no-import'] ? 0 : int('import-resources', values['import-resources'], 50_000),
  seed: 42,
  workDir: os.tmpdir(),
  ...(values.profile ? { profileDir: path.join(outDir, 'profiles') } : {}),
  log: (line) => console.error(`[bench] ${store}: ${line}`),
});

const results: BenchResults[] = [];
if (huge) {
  results.push(
    await runHuge({
      ...options('postgres'),
      databaseUrl,
      searchRuns: int('search-runs', values['search-runs'], 9) || 9,
    }),
  );
} else if (values.fairness) {
  const quietRequests = int('fairness-requests', values['fairness-requests'], 400) || 400;
  for (const store of stores as StoreKind[])
    results.push(await runFairness({ ...options(store), quietRequests }));
} else if (values['import-only']) {
  for (const store of stores as StoreKind[]) results.push(await runImportBenchmark(options(store)));
} else for (const store of stores as StoreKind[]) results.push(await runBenchmark(options(store)));
fs.writeFileSync(values.out, `${JSON.stringify(results.length === 1 ? results[0] : results, null, 2)}\n`);
console.log(render(results));
console.log(`\nJSON: ${path.relative(process.cwd(), values.out)}`);
if (values.fairness) {
  const missed = results.flatMap((run) =>
    run.figures
      .filter((f) => f.pass === false)
      .map((f) => `${run.meta.store}: ${f.label} ${f.value} ${f.unit} (target ${f.target})`),
  );
  for (const line of missed) console.log(`FAIL ${line}`);
  if (missed.length > 0) process.exitCode = 1;
}
