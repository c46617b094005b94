/**
 * `npx tsx bench/compare-ingest.ts`: the ingest work measured side by side against earlier commits.
 *
 * Each baseline's tree is extracted with `git archive <ref>`, and its own bench server process
 * (`bench/server-process.ts` of that commit, with the command protocol of that commit) runs next
 * to this tree's, both at once. The same client work then goes to every server in turns, the
 * order rotating with each repetition, each run into a fresh project of freshly started and
 * warmed-up servers (see `warmUp`):
 *
 *   - the Synthea sample as transaction Bundles over HTTP into a strict project, one patient
 *     bundle at a time, and with `--txn-concurrency` in flight (`measure-transactions.ts`);
 *   - an HTTP NDJSON upload of generated patients into a lenient and into a strict project
 *     (`measure-upload.ts`).
 *
 * Prints the medians (resources/s) per server and this tree's speed-up over each baseline, by
 * wall time and by the server process's CPU time (which other jobs on a busy machine disturb
 * less).
 *
 *   --baseline REF      a commit to compare with; repeatable (default 91bfaef: the code when
 *                       issue 13 was filed); `none`: this tree alone (with --profile)
 *   --this REF          measure commit REF (extracted like a baseline) instead of the working tree,
 *                       which then stays free to edit while the run goes on
 *   --reps R            repetitions (default 3)
 *   --patients N        generated patients in the NDJSON upload (default 25 ≈ 10k resources)
 *   --synthea DIR       the Synthea bundle directory (default ../shared/data/synthea-r4-100)
 *   --txn-concurrency N patient bundles in flight in the concurrent row (default 4; 0 skips it)
 *   --prefer VALUE      a `Prefer` header on the Synthea transactions (`return=minimal`: answers
 *                       without the stored resources; a diagnostic, the target rows send none)
 *   --no-upload         skip the NDJSON uploads
 *   --no-synthea        skip the Synthea transactions
 *   --memory            also the server's memory per task: its peak RSS over its RSS just before
 *                       (after a forced GC), and its heap used after a forced GC once the task is
 *                       done (what the task left behind: for an upload, the store's index of what
 *                       it wrote). With a large `--patients` this is the large-upload memory
 *                       check, side by side in fresh servers
 *   --profile DIR       a V8 CPU profile of this tree's server process into DIR (summarise it with
 *                       `bench/profile-summary.ts`; `--last MS` keeps the final load's samples)
 *   --store S           file (default) or postgres: each server on a fresh store of that kind (a
 *                       fresh schema of --database-url, dropped when the server closes); with
 *                       postgres, a `CHECKPOINT` (when the role may) before each timed run, so that
 *                       no run pays for flushing the log an earlier one wrote
 *   --database-url U    PostgreSQL for --store postgres (default $FPK_BENCH_POSTGRES_URL, else
 *                       $FPK_TEST_POSTGRES_URL)
 *   --out FILE          JSON output (default bench/out/compare-ingest.json)
 *   --help              this text
 *
 * A baseline whose dependencies differ from this tree's gets its own `npm ci --ignore-scripts`
 * (once: the extracted trees stay in `$TMPDIR/fpk-baselines/`).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { generatePatients } from './dataset.js';
import { postBundles, syntheaBundleFiles } from './measure-transactions.js';
import { uploadNdjson } from './measure-upload.js';
import type { ServerProcess } from './server-process.js';
import { median } from './stats.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..');

const { values } = parseArgs({
  options: {
    baseline: { type: 'string', multiple: true },
    this: { type: 'string' },
    reps: { type: 'string', default: '3' },
    patients: { type: 'string', default: '25' },
    synthea: { type: 'string', default: path.resolve(HERE, '../../shared/data/synthea-r4-100') },
    'txn-concurrency': { type: 'string', default: '4' },
    prefer: { type: 'string' },
    'no-upload': { type: 'boolean', default: false },
    'no-synthea': { type: 'boolean', default: false },
    memory: { type: 'boolean', default: false },
    profile: { type: 'string' },
    store: { type: 'string', default: 'file' },
    'database-url': { type: 'string' },
    out: { type: 'string', default: path.join(HERE, 'out', 'compare-ingest.json') },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  // The usage is this file's opening comment.
  const source = fs.readFileSync(fileURLToPath(import.meta.url), 'utf8');
  const usage = source.slice(source.indexOf('/**') + 3, source.indexOf('*/'));
  process.stdout.write(`${usage.replace(/^ \* ?/gm, '').trim()}\n`);
  process.exit(0);
}

function int(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
  return n;
}

const baselines = (values.baseline ?? ['91bfaef']).filter((ref) => ref !== 'none');
const reps = Math.max(1, int('reps', values.reps));
const patients = int('patients', values.patients);
const concurrency = int('txn-concurrency', values['txn-concurrency']);
const log = (message: string): void => console.error(`[compare] ${message}`);
if (values.store !== 'file' && values.store !== 'postgres') throw new Error('--store: file or postgres');
const store = values.store;
const databaseUrl =
  values['database-url'] ?? process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
if (store === 'postgres' && !databaseUrl)
  throw new Error('--store postgres: set --database-url or FPK_BENCH_POSTGRES_URL');

type StartServer = (options: {
  store: 'file' | 'postgres';
  databaseUrl?: string;
  dir: string;
  exportDir: string;
  probeDir: string;
  profileDir?: string;
}) => Promise<ServerProcess>;

/** A tree whose bench server takes part. */
interface Contender {
  name: string;
  commit: string;
  tree: string;
  profileDir?: string;
}

/** A contender's running server. */
interface Running extends Contender {
  server: ServerProcess;
  data: string;
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-compare-'));
const git = (...args: string[]): string => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();

/**
 * Extracts `ref` with `git archive` into `$TMPDIR/fpk-baselines/<commit>` (kept for
 * the next run; outside the repository, which `tsc` and the linters cover);
 * answers the tree's root. Its `node_modules` is a symlink to this tree's when every dependency
 * it declares is there, else its own `npm ci --ignore-scripts`.
 */
function extract(ref: string): { tree: string; commit: string } {
  const commit = git('rev-parse', '--short', `${ref}^{commit}`);
  const tree = path.join(os.tmpdir(), 'fpk-baselines', commit);
  if (fs.existsSync(path.join(tree, 'node_modules'))) return { tree, commit };
  fs.rmSync(tree, { recursive: true, force: true });
  fs.mkdirSync(tree, { recursive: true });
  execFileSync('sh', ['-c', `git archive ${commit} | tar -x -C "${tree}"`], { cwd: ROOT });
  const manifest = JSON.parse(fs.readFileSync(path.join(tree, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
  };
  const ours = fs.realpathSync(path.join(ROOT, 'node_modules'));
  const missing = Object.keys(manifest.dependencies ?? {}).filter(
    (name) => !fs.existsSync(path.join(ours, name, 'package.json')),
  );
  if (missing.length === 0) {
    fs.symlinkSync(ours, path.join(tree, 'node_modules'));
  } else {
    log(`${commit} needs ${missing.join(', ')}: npm ci --ignore-scripts in ${tree}`);
    execFileSync('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], {
      cwd: tree,
      stdio: 'inherit',
    });
  }
  return { tree, commit };
}

let started = 0;

/**
 * CPU time (user + system, ms) the process `pid` has used so far, every thread included; NaN
 * where `/proc` is missing. Less sensitive than wall time to other jobs on a busy machine.
 */
function cpuMs(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime: fields 14 and 15 of stat(5), in clock ticks (100 per second on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return Number.NaN;
  }
}

/** Starts `contender`'s bench server on a fresh store of the kind `--store` names. */
async function start(contender: Contender): Promise<Running> {
  const module = (await import(
    pathToFileURL(path.join(contender.tree, 'bench', 'server-process.ts')).href
  )) as {
    startServer: StartServer;
  };
  const data = path.join(work, `data-${++started}`);
  const server = await module.startServer({
    store,
    ...(store === 'postgres' ? { databaseUrl } : {}),
    dir: path.join(data, 'store'),
    exportDir: path.join(data, 'export'),
    probeDir: path.join(data, 'probe'),
    ...(contender.profileDir ? { profileDir: contender.profileDir } : {}),
  });
  return { ...contender, server, data };
}

/** Writes the NDJSON of `count` generated patients; answers its resource count. */
function writeNdjson(file: string, count: number): number {
  let lines = 0;
  const fd = fs.openSync(file, 'w');
  for (const resource of generatePatients(count, 43)) {
    fs.writeSync(fd, `${JSON.stringify(resource)}\n`);
    lines++;
  }
  fs.closeSync(fd);
  return lines;
}

interface Task {
  key: string;
  label: string;
  run(contender: Running, project: string): Promise<{ ms: number; resources: number }>;
  strict: boolean;
}

const tasks: Task[] = [];
if (!values['no-synthea'] && fs.existsSync(values.synthea)) {
  for (const inFlight of concurrency > 1 ? [1, concurrency] : [1]) {
    tasks.push({
      key: `synthea.transactions.${inFlight}`,
      label: `Synthea transaction Bundles, strict, ${inFlight} in flight${values.prefer ? `, Prefer: ${values.prefer}` : ''}`,
      strict: true,
      run: async ({ server }, token) =>
        postBundles(`${server.info.origin}/fhir/R4`, token, values.synthea, inFlight, values.prefer),
    });
  }
}
if (!values['no-upload'] && patients > 0) {
  const file = path.join(work, 'upload.ndjson');
  const lines = writeNdjson(file, patients);
  for (const strict of [false, true]) {
    tasks.push({
      key: `upload.${strict ? 'strict' : 'lenient'}`,
      label: `NDJSON upload, ${lines} resources, ${strict ? 'strict' : 'lenient'}`,
      strict,
      run: async ({ server }, token) => {
        const result = await uploadNdjson(`${server.info.origin}/fhir/R4`, token, file);
        if (result.failed > 0) log(`warning: ${result.failed} lines rejected`);
        return { ms: result.ms, resources: lines };
      },
    });
  }
}

// Warm-up before each measurement, on every freshly started server, into throwaway projects:
// the shared Synthea bundles and two patients' (a strict project), and 3 generated patients' lines
// (a lenient and a strict project), so that loading the R4 definitions, compiling the validators
// and the JIT are not part of what is measured.
const warmSynthea = path.join(work, 'warm-synthea');
const warmNdjson = path.join(work, 'warm.ndjson');
fs.mkdirSync(warmSynthea);
if (fs.existsSync(values.synthea)) {
  const files = syntheaBundleFiles(values.synthea);
  const shared = files.filter((f) => /^(hospital|practitioner)Information/.test(path.basename(f)));
  for (const file of [...shared, ...files.slice(shared.length, shared.length + 2)])
    fs.symlinkSync(file, path.join(warmSynthea, path.basename(file)));
}
writeNdjson(warmNdjson, 3);

async function warmUp({ server }: Running): Promise<void> {
  const fhirBase = `${server.info.origin}/fhir/R4`;
  if (fs.readdirSync(warmSynthea).length > 0) {
    const project = await server.call('newProject', { name: 'warm-up-synthea', strict: true });
    await postBundles(fhirBase, project.token, warmSynthea);
  }
  for (const strict of [false, true]) {
    const project = await server.call('newProject', { name: 'warm-up-upload', strict });
    await uploadNdjson(fhirBase, project.token, warmNdjson);
  }
}

/**
 * Writes PostgreSQL's dirty pages now (a superuser or `pg_checkpoint` may; else nothing): a run
 * that writes a few hundred MB of log otherwise meets, now and then, a checkpoint an earlier run
 * started, and takes 3–5 times as long whichever tree it measures.
 */
async function checkpoint(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
    await client.query('CHECKPOINT');
  } catch {
    // Not permitted, or no server: the run goes on without.
  } finally {
    await client.end().catch(() => undefined);
  }
}

const startedAt = new Date();
const load = os.loadavg();
const contenders: Contender[] = [];
try {
  const profileDir = values.profile && path.resolve(values.profile);
  const self = values.this
    ? { name: values.this, ...extract(values.this) }
    : { name: 'this tree', tree: ROOT, commit: git('rev-parse', '--short', 'HEAD') };
  contenders.push({ ...self, ...(profileDir ? { profileDir } : {}) });
  for (const ref of baselines) contenders.push({ name: ref, ...extract(ref) });
  const ms = new Map<string, number[]>();
  const cpu = new Map<string, number[]>();
  /** With --memory: MiB of peak RSS over the RSS before, and of heap used after the task. */
  const peak = new Map<string, number[]>();
  const heap = new Map<string, number[]>();
  const MiB = 1024 * 1024;
  const resources = new Map<string, number>();
  for (let rep = 0; rep < reps; rep++) {
    for (const task of tasks) {
      // Fresh servers for each measurement, warmed up, all running while each takes its turn (the
      // bench server's own access token expires after a few minutes in older commits, and no run
      // inherits another's store); the order rotates with each repetition so that no server always goes first.
      const running: Running[] = [];
      try {
        for (const contender of contenders) running.push(await start(contender));
        for (const contender of running) await warmUp(contender);
        for (let i = 0; i < running.length; i++) {
          const contender = running[(i + rep) % running.length]!;
          const project = await contender.server.call('newProject', {
            name: `${task.key}-${rep}`,
            strict: task.strict,
          });
          if (databaseUrl && store === 'postgres') await checkpoint(databaseUrl);
          const memoryBefore = values.memory ? await contender.server.call('resetPeak', {}) : undefined;
          const cpuBefore = cpuMs(contender.server.info.pid);
          const result = await task.run(contender, project.token);
          const cpuUsed = cpuMs(contender.server.info.pid) - cpuBefore;
          const key = `${task.key}|${contender.name}`;
          let memoryNote = '';
          if (memoryBefore) {
            const during = await contender.server.call('memory', {});
            const after = await contender.server.call('resetPeak', {});
            const peakMiB = (during.peakRss - memoryBefore.rss) / MiB;
            const heapMiB = after.heapUsed / MiB;
            peak.set(key, [...(peak.get(key) ?? []), peakMiB]);
            heap.set(key, [...(heap.get(key) ?? []), heapMiB]);
            memoryNote = `, peak RSS +${peakMiB.toFixed(0)} MiB (${during.peakSource}), heap after GC ${heapMiB.toFixed(0)} MiB`;
          }
          log(
            `${task.label}, ${contender.name} (${contender.commit}), ${rep + 1}/${reps}: ${Math.round(result.ms)} ms, server CPU ${Math.round(cpuUsed)} ms${memoryNote}`,
          );
          ms.set(key, [...(ms.get(key) ?? []), result.ms]);
          cpu.set(key, [...(cpu.get(key) ?? []), cpuUsed]);
          resources.set(task.key, result.resources);
        }
      } finally {
        for (const r of running) {
          await r.server.close();
          fs.rmSync(r.data, { recursive: true, force: true });
        }
      }
    }
  }
  const table = tasks.map((task) => {
    const rates = contenders.map(
      (c) => resources.get(task.key)! / (median(ms.get(`${task.key}|${c.name}`)!) / 1000),
    );
    const cpuRates = contenders.map(
      (c) => resources.get(task.key)! / (median(cpu.get(`${task.key}|${c.name}`)!) / 1000),
    );
    return {
      key: task.key,
      label: task.label,
      resources: resources.get(task.key)!,
      rates: Object.fromEntries(contenders.map((c, i) => [c.name, Math.round(rates[i]!)])),
      ms: Object.fromEntries(
        contenders.map((c) => [c.name, ms.get(`${task.key}|${c.name}`)!.map(Math.round)]),
      ),
      speedUp: Object.fromEntries(
        contenders.slice(1).map((c, i) => [c.name, +(rates[0]! / rates[i + 1]!).toFixed(2)]),
      ),
      /** Resources per second of the server process's CPU time (user + system). */
      cpuRates: Object.fromEntries(contenders.map((c, i) => [c.name, Math.round(cpuRates[i]!)])),
      cpuMs: Object.fromEntries(
        contenders.map((c) => [c.name, cpu.get(`${task.key}|${c.name}`)!.map(Math.round)]),
      ),
      cpuSpeedUp: Object.fromEntries(
        contenders.slice(1).map((c, i) => [c.name, +(cpuRates[0]! / cpuRates[i + 1]!).toFixed(2)]),
      ),
      ...(values.memory
        ? {
            /** MiB, medians: peak RSS over the RSS before; heap used after a forced GC. */
            peakRssMiB: Object.fromEntries(
              contenders.map((c) => [c.name, Math.round(median(peak.get(`${task.key}|${c.name}`)!))]),
            ),
            heapAfterMiB: Object.fromEntries(
              contenders.map((c) => [c.name, Math.round(median(heap.get(`${task.key}|${c.name}`)!))]),
            ),
          }
        : {}),
    };
  });
  const loadAfter = os.loadavg();
  const header = [
    'Work (resources/s, medians)',
    ...contenders.map((c) => `${c.name} ${c.commit}`),
    ...contenders.slice(1).map((c) => `x vs ${c.name}`),
  ];
  const rows = [
    ...table.map((t) => [
      t.label,
      ...contenders.map((c) => t.rates[c.name]!.toLocaleString('en-US')),
      ...contenders.slice(1).map((c) => `${t.speedUp[c.name]}x`),
    ]),
    ...table.map((t) => [
      `${t.label}, per server CPU second`,
      ...contenders.map((c) => t.cpuRates[c.name]!.toLocaleString('en-US')),
      ...contenders.slice(1).map((c) => `${t.cpuSpeedUp[c.name]}x`),
    ]),
    ...table.flatMap((t) => {
      const { peakRssMiB: peakRss, heapAfterMiB: heapAfter } = t;
      if (!peakRss || !heapAfter) return [];
      const blanks = contenders.slice(1).map(() => '');
      return [
        [
          `${t.label}, server peak RSS over before (MiB)`,
          ...contenders.map((c) => String(peakRss[c.name])),
          ...blanks,
        ],
        [
          `${t.label}, server heap after GC (MiB)`,
          ...contenders.map((c) => String(heapAfter[c.name])),
          ...blanks,
        ],
      ];
    }),
  ];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(
    [
      `${startedAt.toISOString()}; ${reps} reps; load average ${load.map((l) => l.toFixed(2)).join(' ')} before, ${loadAfter.map((l) => l.toFixed(2)).join(' ')} after`,
      line(header),
      line(widths.map((w) => '-'.repeat(w))),
      ...rows.map(line),
    ].join('\n'),
  );
  fs.mkdirSync(path.dirname(values.out), { recursive: true });
  fs.writeFileSync(
    values.out,
    `${JSON.stringify(
      {
        startedAt: startedAt.toISOString(),
        reps,
        loadBefore: load,
        loadAfter,
        contenders: contenders.map((c) => ({ name: c.name, commit: c.commit })),
        table,
      },
      null,
      2,
    )}\n`,
  );
} finally {
  fs.rmSync(work, { recursive: true, force: true });
}
