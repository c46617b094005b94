/**
 * `npx tsx bench/profile-pg-index-write.ts`: where the PostgreSQL search index's write time goes.
 * The same generated patients (`--patients`, one `writeResources` batch per patient) are written
 * into fresh schemas by a store without an indexer, by one with the R4 indexer, and by ones with
 * the R4 indexer whose tables lack some of their B-tree indexes (`--variants`, each dropped after
 * the schema is created; with `--btrees`), and, with `--baseline DIR` (an earlier commit's tree,
 * e.g. `git archive <ref> | tar -x -C DIR` with `node_modules` linked), by that tree's store
 * without and with its indexer, all in turns (`--reps`, the order rotating); prints the medians
 * of resources/s and each over the store without index, the write-ahead log each wrote per
 * resource (`pg_current_wal_lsn` before and after the timed writes, a `CHECKPOINT` first when the
 * role may, so that every variant starts alike), then the index rows written per resource and
 * table. A baseline tree without the R4 indexer (before issue 30) has its store without index
 * only. A diagnostic: a table without its indexes answers no search. Uses `FPK_BENCH_POSTGRES_URL`
 * (else `FPK_TEST_POSTGRES_URL`).
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { generatePatients } from './dataset.js';
import { median, now } from './stats.js';
import { R4_PATIENT_COMPARTMENT } from '../src/fhir/compartment.js';
import { loadR4Indexer } from '../src/search/index-resource.js';
import { createPostgresStorage } from '../src/storage/postgres/postgres-storage.js';
import { INDEX_TABLES } from '../src/storage/postgres/search-tables.js';
import type { FhirResource } from '../src/storage/types.js';

const { values } = parseArgs({
  options: {
    patients: { type: 'string', default: '5' },
    reps: { type: 'string', default: '3' },
    btrees: { type: 'boolean', default: false },
    baseline: { type: 'string' },
  },
});
const url = process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
if (!url) throw new Error('Set FPK_BENCH_POSTGRES_URL (or FPK_TEST_POSTGRES_URL)');
const batches: FhirResource[][] = [];
for (const resource of generatePatients(Number(values.patients), 7) as Iterable<FhirResource>) {
  if (resource.resourceType === 'Patient') batches.push([]);
  batches[batches.length - 1]!.push(resource);
}
const total = batches.reduce((n, b) => n + b.length, 0);
const indexer = await loadR4Indexer();
const admin = new pg.Pool({ connectionString: url, max: 1 });
type Open = typeof createPostgresStorage;
/** Each variant: its store, whether it indexes, and the indexes of the index tables it drops (by suffix). */
interface Variant {
  open: Open;
  indexer?: Awaited<ReturnType<typeof loadR4Indexer>>;
  drop: string[];
}
const VARIANTS: Record<string, Variant> = {
  'no index': { open: createPostgresStorage, drop: [] },
  index: { open: createPostgresStorage, indexer, drop: [] },
};
if (values.btrees) {
  VARIANTS['index, no lookup indexes'] = { open: createPostgresStorage, indexer, drop: ['key'] };
  VARIANTS['index, no date GiST'] = { open: createPostgresStorage, indexer, drop: ['span'] };
  VARIANTS['index, no seq indexes'] = { open: createPostgresStorage, indexer, drop: ['seq'] };
  VARIANTS['index, no indexes'] = {
    open: createPostgresStorage,
    indexer,
    drop: ['key', 'span', 'seq'],
  };
}
if (values.baseline) {
  const dir = path.resolve(values.baseline);
  const store = (await import(path.join(dir, 'src/storage/postgres/postgres-storage.ts'))) as {
    createPostgresStorage: Open;
  };
  const search = (await import(path.join(dir, 'src/search/index-resource.ts')).catch(() => undefined)) as
    { loadR4Indexer: typeof loadR4Indexer } | undefined;
  VARIANTS['baseline: no index'] = { open: store.createPostgresStorage, drop: [] };
  if (search) {
    VARIANTS['baseline: index'] = {
      open: store.createPostgresStorage,
      indexer: await search.loadR4Indexer(),
      drop: [],
    };
  }
}
const names = Object.keys(VARIANTS);
const rates = new Map<string, number[]>(names.map((n) => [n, []]));
const walBytes = new Map<string, number[]>(names.map((n) => [n, []]));
const rows = new Map<string, number>();
const walLsn = async (): Promise<string> =>
  (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
for (let rep = 0; rep < Number(values.reps); rep++) {
  const order = names.map((_, i) => names[(i + rep) % names.length]!);
  for (const name of order) {
    const variant = VARIANTS[name]!;
    const schema = `fpk_bench_prof_${randomBytes(4).toString('hex')}`;
    const storage = variant.open({
      connectionString: url,
      schema,
      compartment: R4_PATIENT_COMPARTMENT,
      ...(variant.indexer ? { indexer: variant.indexer } : {}),
    });
    try {
      await storage.ping();
      for (const table of INDEX_TABLES) {
        for (const suffix of variant.drop)
          await admin.query(`DROP INDEX IF EXISTS "${schema}".${table}_${suffix}`);
      }
      await admin.query('CHECKPOINT').catch(() => undefined);
      const walBefore = await walLsn();
      const start = now();
      for (const batch of batches) {
        await storage.writeResources(
          'bench',
          batch.map((resource) => ({ op: 'create' as const, resource })),
        );
      }
      rates.get(name)!.push((total / (now() - start)) * 1000);
      const { rows: wal } = await admin.query<{ bytes: string }>(
        'SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS bytes',
        [walBefore],
      );
      walBytes.get(name)!.push(Number(wal[0]!.bytes) / total);
      if (name === 'index' && rep === 0) {
        for (const table of INDEX_TABLES) {
          const { rows: r } = await admin.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${schema}".${table}`,
          );
          rows.set(table, r[0]!.n / total);
        }
      }
    } finally {
      await storage.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  }
}
await admin.end();
const base = median(rates.get('no index')!);
console.log(`PostgreSQL writeResources, ${total} resources, median of ${values.reps} turns`);
console.log(
  "| variant | resources/s | slowdown over its tree's store without index | WAL bytes per resource |",
);
console.log('|---|---:|---:|---:|');
for (const name of names) {
  const rate = median(rates.get(name)!);
  const own = name.startsWith('baseline') ? median(rates.get('baseline: no index')!) : base;
  const wal = Math.round(median(walBytes.get(name)!));
  console.log(`| ${name} | ${Math.round(rate)} | ${(own / rate).toFixed(2)}x | ${wal} |`);
}
console.log(
  `index rows per resource: ${[...rows].map(([t, n]) => `${t} ${n.toFixed(2)}`).join(', ')}; ` +
    `total ${[...rows.values()].reduce((a, b) => a + b, 0).toFixed(2)}`,
);
