/**
 * `npx tsx bench/measure-pg-index-http.ts`: what the PostgreSQL search index costs ingest over
 * HTTP (issue 30's budget: at most 1.3x). Two bench server processes (`server-child.ts`) run at
 * once on the PostgreSQL store, one with the R4 search index (the default) and one without; in
 * each repetition, in turns (the order alternating), the Synthea sample goes to each as a loader
 * sends it: transaction Bundles over HTTP into a fresh strict project, one Bundle at a time
 * (`measure-transactions.ts`). Prints the medians (resources/s) and their ratio.
 *
 *   --reps R          repetitions (default 3)
 *   --synthea DIR     the Synthea bundle directory (default ../shared/data/synthea-r4-100)
 *   --bundles N       the shared bundles and the first N patient bundles only (default: all)
 *   --database-url U  PostgreSQL (default $FPK_BENCH_POSTGRES_URL, else $FPK_TEST_POSTGRES_URL)
 *   --compile C       how the servers compile the sources: tsx or plain (as `dist/` is built; default
 *                     $FPK_BENCH_COMPILE, else tsx; see server-process.ts)
 *   --profile DIR     V8 CPU profiles of both servers into DIR/with and DIR/without
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { postBundles, syntheaBundleFiles } from './measure-transactions.js';
import { benchCompile, startServer, type BenchCompile, type ServerProcess } from './server-process.js';
import { median } from './stats.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({
  options: {
    reps: { type: 'string', default: '3' },
    synthea: { type: 'string', default: path.resolve(HERE, '../../shared/data/synthea-r4-100') },
    bundles: { type: 'string' },
    'database-url': { type: 'string' },
    compile: { type: 'string' },
    profile: { type: 'string' },
  },
});
const databaseUrl =
  values['database-url'] ?? process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
if (!databaseUrl) throw new Error('Set FPK_BENCH_POSTGRES_URL (or FPK_TEST_POSTGRES_URL)');
if (values.compile !== undefined && values.compile !== 'tsx' && values.compile !== 'plain')
  throw new Error('--compile: tsx or plain');
const compile: BenchCompile = values.compile ?? benchCompile();
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-pg-index-http-'));
// A subset: links to the shared bundles and the first N patients' bundles.
let dir = path.resolve(values.synthea);
if (values.bundles !== undefined) {
  const files = syntheaBundleFiles(dir);
  const shared = files.filter((f) => /^(hospital|practitioner)Information/.test(path.basename(f)));
  const subset = path.join(work, 'synthea');
  fs.mkdirSync(subset);
  for (const file of [...shared, ...files.slice(shared.length, shared.length + Number(values.bundles))])
    fs.symlinkSync(file, path.join(subset, path.basename(file)));
  dir = subset;
}
const modes = ['without', 'with'] as const;
const servers = new Map<(typeof modes)[number], ServerProcess>();
const rates: Record<(typeof modes)[number], number[]> = { without: [], with: [] };
let resources = 0;
try {
  for (const mode of modes) {
    const base = path.join(work, mode);
    servers.set(
      mode,
      await startServer({
        compile,
        ...(values.profile === undefined ? {} : { profileDir: path.resolve(values.profile, mode) }),
        store: 'postgres',
        databaseUrl,
        searchIndex: mode === 'with',
        dir: path.join(base, 'store'),
        exportDir: path.join(base, 'export'),
        probeDir: path.join(base, 'probe'),
      }),
    );
  }
  for (let rep = 0; rep < Number(values.reps); rep++) {
    for (const mode of rep % 2 ? [...modes].reverse() : modes) {
      const server = servers.get(mode)!;
      const project = await server.call('newProject', { name: `txn-${mode}-${rep}`, strict: true });
      const run = await postBundles(`${server.info.origin}/fhir/R4`, project.token, dir, 1);
      resources = run.resources;
      rates[mode].push(run.resources / (run.ms / 1000));
      console.error(`${mode} index, run ${rep + 1}: ${Math.round(rates[mode].at(-1)!)} resources/s`);
    }
  }
} finally {
  for (const server of servers.values()) await server.close();
  fs.rmSync(work, { recursive: true, force: true });
}
const [without, withIndex] = [median(rates.without), median(rates.with)];
console.log(
  `Synthea transactions over HTTP on PostgreSQL, ${resources} resources, strict project, median of ${values.reps}, servers compiled by ${compile}`,
);
console.log(
  `without search index: ${Math.round(without)} resources/s; with: ${Math.round(withIndex)} resources/s`,
);
console.log(`slowdown: ${(without / withIndex).toFixed(2)}x`);
