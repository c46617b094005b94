/**
 * `npx tsx bench/measure-history.ts`: what keeping every version costs, side by side in one run.
 *
 * Each configuration ingests the same work into a fresh store: the resources of `--patients`
 * generated patients (bench/dataset.ts), created, then updated `--versions - 1` times each, in
 * `writeResources` batches of `--batch` writes (the NDJSON upload's path). Every configuration's
 * store is open at once and gets each batch in turn (the order rotating with each batch); a
 * repetition's ingest time per configuration is the sum of its batches' times, and the figures are
 * medians over repetitions.
 *
 *   file, history 'all'          every version kept; resource logs never compacted (the default)
 *   file, { versions: 1 }        the starting point: compaction drops every superseded version, as
 *                                the file store did before history (same `--min-dead` threshold)
 *   postgres, history 'all'      every version kept, with migration 5's history index (the default)
 *   postgres, before             the starting point: the same store with that index dropped after
 *                                open (the schema before migration 5, which kept every version too)
 *   postgres, { versions: 1 }    the sweep deleting superseded versions every 256 writes
 *
 * Reported per configuration: versions written per second (median), bytes on disk per version
 * written and per version kept (file: the resource logs; PostgreSQL: `resources`, its TOAST and
 * indexes, and `resource_compartments`), and ingest time over the starting point's.
 *
 *   --patients N   generated patients (default 10, about 4,000 resources)
 *   --versions V   versions of each resource (default 5)
 *   --batch B      writes per writeResources call (default 500)
 *   --reps R       repetitions (default 3)
 *   --min-dead B   the file store's compactionMinDeadBytes (default 4 MiB)
 *   --store LIST   file,postgres (default both; postgres needs FPK_TEST_POSTGRES_URL or --pg URL)
 *   --pg URL       the PostgreSQL connection string
 *
 * Run with `node --expose-gc --import tsx bench/measure-history.ts` to also measure the file store's
 * version lists: the heap they take once built (a type history of every type), per version.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { postgresStorage } from '../src/postgres.js';
import { fileStorage } from '../src/stores.js';
import type { FhirResource, HistoryRetention, ResourceWrite, Storage } from '../src/storage/types.js';
import { generatePatients } from './dataset.js';
import { median, now } from './stats.js';

const { values } = parseArgs({
  options: {
    patients: { type: 'string', default: '10' },
    versions: { type: 'string', default: '5' },
    batch: { type: 'string', default: '500' },
    reps: { type: 'string', default: '3' },
    'min-dead': { type: 'string', default: String(4 * 1024 * 1024) },
    store: { type: 'string', default: 'file,postgres' },
    pg: { type: 'string', default: process.env.FPK_TEST_POSTGRES_URL ?? '' },
  },
});
const int = (name: string): number => {
  const n = Number(values[name as keyof typeof values]);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
};
const PATIENTS = int('patients');
const VERSIONS = int('versions');
const BATCH = int('batch');
const REPS = int('reps');
const MIN_DEAD = int('min-dead');
const stores = (values.store ?? '').split(',');
const pgUrl = values.pg ?? '';

interface Config {
  name: string;
  /** The configuration this one is compared with. */
  baseline?: string;
  open(): Promise<{
    storage: Storage;
    bytes(): Promise<number>;
    kept(): Promise<number>;
    done(): Promise<void>;
  }>;
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.log'))
      total += fs.statSync(path.join(entry.parentPath, entry.name)).size;
  }
  return total;
}

function fileConfig(name: string, history: HistoryRetention, baseline?: string): Config {
  return {
    name,
    ...(baseline ? { baseline } : {}),
    async open() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-bench-history-'));
      const storage = await fileStorage({ dir, history, compactionMinDeadBytes: MIN_DEAD });
      const resources = () => path.join(dir, 'projects');
      return {
        storage,
        bytes: () => Promise.resolve(dirBytes(resources())),
        kept() {
          let lines = 0;
          for (const entry of fs.readdirSync(resources(), { withFileTypes: true, recursive: true })) {
            if (!entry.isFile() || !entry.parentPath.endsWith('resources') || !entry.name.endsWith('.log'))
              continue;
            const text = fs.readFileSync(path.join(entry.parentPath, entry.name), 'latin1');
            for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lines += 1;
          }
          return Promise.resolve(lines);
        },
        async done() {
          await storage.close();
          fs.rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  };
}

let schemaSeq = 0;
function pgConfig(name: string, history: HistoryRetention, dropIndexes: boolean, baseline?: string): Config {
  return {
    name,
    ...(baseline ? { baseline } : {}),
    async open() {
      const schema = `bench_history_${process.pid}_${schemaSeq++}`;
      const storage = postgresStorage({ connectionString: pgUrl, schema, history });
      await storage.ping();
      const admin = new pg.Client({ connectionString: pgUrl });
      await admin.connect();
      const s = `"${schema}"`;
      // The first call made the tables (migration 5 included): the schema before it lacks this one.
      if (dropIndexes) {
        await admin.query(`DROP INDEX ${s}.resources_history_instance`);
      }
      const count = async (sql: string): Promise<number> =>
        Number((await admin.query<{ n: string }>(sql)).rows[0]!.n);
      return {
        storage,
        bytes: async () => {
          await admin.query(`VACUUM ${s}.resources`);
          return count(
            `SELECT (pg_total_relation_size('${s}.resources') + pg_total_relation_size('${s}.resource_compartments'))::text AS n`,
          );
        },
        kept: () => count(`SELECT count(*)::text AS n FROM ${s}.resources`),
        async done() {
          await storage.close();
          await admin.query(`DROP SCHEMA ${s} CASCADE`);
          await admin.end();
        },
      };
    },
  };
}

const configs: Config[] = [];
if (stores.includes('file')) {
  configs.push(fileConfig("file, history 'all'", 'all', 'file, { versions: 1 }'));
  configs.push(fileConfig('file, { versions: 1 }', { versions: 1 }));
}
if (stores.includes('postgres')) {
  if (!pgUrl) throw new Error('--store postgres needs --pg URL or FPK_TEST_POSTGRES_URL');
  configs.push(pgConfig("postgres, history 'all'", 'all', false, 'postgres, before'));
  configs.push(pgConfig('postgres, before', 'all', true));
  configs.push(pgConfig('postgres, { versions: 1 }', { versions: 1 }, false, 'postgres, before'));
}

const resources = [...generatePatients(PATIENTS)] as FhirResource[];

/** The batches of the ingest: every resource's first version, then each round of updates. */
function* batches(): Generator<ResourceWrite[]> {
  for (let v = 1; v <= VERSIONS; v++) {
    for (let i = 0; i < resources.length; i += BATCH) {
      yield resources.slice(i, i + BATCH).map((r) => ({
        op: 'update',
        resource: { ...r, id: r.id!, meta: { tag: [{ code: `v${v}` }] } },
      }));
    }
  }
}

/** The whole ingest into one store (for the memory measurement). */
async function ingest(storage: Storage): Promise<{ versions: number }> {
  let versions = 0;
  for (const writes of batches()) {
    await storage.writeResources('p1', writes);
    versions += writes.length;
  }
  return { versions };
}

interface Row {
  ms: number[];
  versions: number;
  bytes: number[];
  kept: number[];
}
const rows = new Map<string, Row>(configs.map((c) => [c.name, { ms: [], versions: 0, bytes: [], kept: [] }]));

console.error(
  `history bench: ${resources.length} resources x ${VERSIONS} versions, batches of ${BATCH}, ${REPS} reps`,
);
// Every configuration's store is open at once and gets each batch in turn (the order rotating
// with each batch), so that the load of a shared machine, which drifts over seconds, weighs on
// them alike; each one's ingest time is the sum of its batches' times.
for (let rep = 0; rep < REPS; rep++) {
  const opened = [];
  for (const config of configs) opened.push({ config, store: await config.open(), ms: 0, versions: 0 });
  try {
    let k = 0;
    for (const writes of batches()) {
      for (let j = 0; j < opened.length; j++) {
        const o = opened[(j + k) % opened.length]!;
        const start = now();
        await o.store.storage.writeResources('p1', writes);
        o.ms += now() - start;
        o.versions += writes.length;
      }
      k += 1;
    }
    for (const o of opened) {
      const row = rows.get(o.config.name)!;
      row.ms.push(o.ms);
      row.versions = o.versions;
      row.bytes.push(await o.store.bytes());
      row.kept.push(await o.store.kept());
      console.error(`  rep ${rep + 1}: ${o.config.name}: ${Math.round(o.ms)} ms`);
    }
  } finally {
    for (const o of opened) await o.store.done();
  }
}

const fmt = (n: number, digits = 0): string =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
console.log(
  '| Configuration | Versions/s (median) | Ingest time / starting point | Bytes per version written | Versions kept | Bytes per version kept |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
for (const config of configs) {
  const row = rows.get(config.name)!;
  const ms = median(row.ms);
  const base = config.baseline ? median(rows.get(config.baseline)!.ms) : undefined;
  const bytes = median(row.bytes);
  const kept = median(row.kept);
  console.log(
    `| ${config.name} | ${fmt((row.versions / ms) * 1000)} | ${base ? fmt(ms / base, 3) : '1 (starting point)'} | ` +
      `${fmt(bytes / row.versions)} | ${fmt(kept)} | ${fmt(bytes / kept)} |`,
  );
}
/** The heap the file store's version lists take, per version (needs `--expose-gc`). */
async function versionListBytes(): Promise<number | undefined> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return undefined;
  const opened = await fileConfig('lists', 'all').open();
  try {
    const { versions } = await ingest(opened.storage);
    gc();
    gc();
    const before = process.memoryUsage().heapUsed;
    for (const type of new Set(resources.map((r) => r.resourceType)))
      await opened.storage.readHistory('p1', { type, count: 1 });
    gc();
    gc();
    return (process.memoryUsage().heapUsed - before) / versions;
  } finally {
    await opened.done();
  }
}

if (stores.includes('file')) {
  const perVersion = await versionListBytes();
  if (perVersion !== undefined)
    console.log(`\nfile store version lists: ${fmt(perVersion)} bytes of heap per version`);
}
console.log('');
for (const config of configs)
  console.log(
    `${config.name}: ingest ms ${rows
      .get(config.name)!
      .ms.map((ms) => Math.round(ms))
      .join(', ')}`,
  );
