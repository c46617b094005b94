import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pg from 'pg';
import { parseSearch } from '../src/fhir/search/search-query.js';
import { searchTotal } from '../src/fhir/search/search-total.js';
import { postgresStorage } from '../src/postgres.js';
import type { FhirResource, ResourceQuery, Storage } from '../src/storage/types.js';
import { fileStorage, memoryStorage, r4SearchIndexer } from '../src/stores.js';
import { generatePatients } from './dataset.js';
import type { StoreKind } from './server-protocol.js';
import { median, now } from './stats.js';
import { allReads } from '../test/helpers/search-reads.js';

/*
 * The search section of `npm run bench` (issue 30): the generated patients loaded into a store of
 * the kind under test, opened in the bench process with its search index (the file and memory
 * stores with `indexer: r4SearchIndexer`, PostgreSQL with its default R4 index in a fresh schema,
 * dropped at the end), then the searches, each built as the FHIR router builds it
 * (`parseSearch`, and the total `_total` asks: none for a page) and timed `reps` times after a
 * warm-up (the number of matches counted once more, untimed): the first page (20) of a selective
 * token (the Observation code nearest 1% of the resources), its `_summary=count`, a name prefix
 * (three letters), a date range (the busiest month of Observation dates) and a one-level chain (a
 * whole family name). Also the index's size: bytes per resource of the index tables (PostgreSQL), or
 * the heap the loaded store holds per resource (file and memory stores, after forced GCs).
 */

/** One timed search. */
export interface SearchTiming {
  key: string;
  label: string;
  query: string;
  medianMs: number;
  total: number;
  /** The target at 1,000,000 resources (ms). */
  targetMs: number;
}

/** What {@link measureStoreSearch} answers. */
export interface StoreSearchFigures {
  resources: number;
  loadMs: number;
  searches: SearchTiming[];
  /** Index table bytes (PostgreSQL) or heap bytes (other stores) per resource. */
  bytesPerResource: number;
  sizeKind: 'index tables' | 'heap';
}

const PROJECT = 'search-bench';

/** A forced full collection, whether or not node runs with `--expose-gc`. */
function collect(): void {
  let gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
  gc();
}

/** The queries' values, drawn from the data as `bench/measure-search.ts` draws them. */
function queries(resources: readonly FhirResource[]): Omit<SearchTiming, 'medianMs' | 'total'>[] {
  const codes = new Map<string, number>();
  const months = new Map<string, number>();
  let family = '';
  for (const r of resources) {
    if (r.resourceType === 'Observation') {
      const coding = (r.code as { coding: { system: string; code: string }[] }).coding[0]!;
      const token = `${coding.system}|${coding.code}`;
      codes.set(token, (codes.get(token) ?? 0) + 1);
      const month = String(r.effectiveDateTime).slice(0, 7);
      months.set(month, (months.get(month) ?? 0) + 1);
    }
    if (r.resourceType === 'Patient' && !family) family = (r.name as { family: string }[])[0]!.family;
  }
  const onePercent = resources.length / 100;
  const [code] = [...codes].sort((a, b) => Math.abs(a[1] - onePercent) - Math.abs(b[1] - onePercent))[0]!;
  const [month] = [...months].sort((a, b) => b[1] - a[1])[0]!;
  const next = new Date(Date.parse(`${month}-01T00:00:00Z`) + 32 * 86400e3).toISOString().slice(0, 7);
  return [
    {
      key: 'token',
      label: 'selective token (~1%), first page',
      query: `Observation?code=${code}`,
      targetMs: 20,
    },
    {
      key: 'count',
      label: 'selective token (~1%), _summary=count',
      query: `Observation?code=${code}&_summary=count`,
      targetMs: 50,
    },
    {
      key: 'prefix',
      label: 'name prefix, first page',
      query: `Patient?name=${family.slice(0, 3).toLowerCase()}`,
      targetMs: 20,
    },
    {
      key: 'date',
      label: 'date range (a month), first page',
      query: `Observation?date=ge${month}&date=lt${next}`,
      targetMs: 20,
    },
    {
      key: 'chain',
      label: 'one-level chain, first page',
      query: `Observation?subject:Patient.name=${family}`,
      targetMs: 100,
    },
  ];
}

/** Loads `patients` generated patients into a fresh indexed store of kind `store`, then times the searches. */
export async function measureStoreSearch(options: {
  store: StoreKind;
  patients: number;
  seed: number;
  reps: number;
  databaseUrl?: string;
  workDir: string;
  log: (line: string) => void;
}): Promise<StoreSearchFigures> {
  const resources = [...generatePatients(options.patients, options.seed)] as FhirResource[];
  const dir = fs.mkdtempSync(path.join(options.workDir || os.tmpdir(), 'fpk-search-'));
  const schema = `fpk_bench_search_${randomBytes(4).toString('hex')}`;
  const postgres = options.store === 'postgres';
  const admin = postgres ? new pg.Pool({ connectionString: options.databaseUrl, max: 1 }) : undefined;
  let storage: Storage | undefined;
  try {
    // The indexer and the definitions are the process's, not the store's: loaded before the heap is.
    (await r4SearchIndexer()).index({ resourceType: 'Patient' });
    await parseSearch('Patient', [['name', 'x']], {}, allReads());
    collect();
    const heapBefore = process.memoryUsage().heapUsed;
    storage = postgres
      ? postgresStorage({ connectionString: options.databaseUrl, schema, statementTimeoutMs: 0 })
      : options.store === 'file'
        ? await fileStorage({ dir, indexer: r4SearchIndexer })
        : memoryStorage({ indexer: r4SearchIndexer });
    await storage.createProject({ id: PROJECT, name: 'search bench', strictMode: false });
    options.log(`search: loading ${resources.length} resources into an indexed ${options.store} store`);
    const started = now();
    let batch: FhirResource[] = [];
    const flush = async (): Promise<void> => {
      if (batch.length === 0) return;
      await storage!.writeResources(
        PROJECT,
        batch.map((resource) => ({
          op: 'update' as const,
          resource: resource as FhirResource & { id: string },
        })),
      );
      batch = [];
    };
    for (const resource of resources) {
      if (resource.resourceType === 'Patient') await flush();
      batch.push(resource);
    }
    await flush();
    const loadMs = now() - started;
    let bytesPerResource: number;
    if (admin) {
      const s = `"${schema}"`;
      for (const t of [
        'resources',
        'search_tokens',
        'search_strings',
        'search_dates',
        'search_numbers',
        'search_references',
        'search_uris',
      ])
        await admin.query(`ANALYZE ${s}.${t}`); // What autovacuum does after a load.
      const { rows } = await admin.query<{ bytes: string }>(
        `SELECT sum(pg_total_relation_size(c.oid)) AS bytes FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'search\\_%' AND c.relname <> 'search_index_state'`,
        [schema],
      );
      bytesPerResource = Number(rows[0]!.bytes) / resources.length;
    } else {
      collect();
      bytesPerResource = (process.memoryUsage().heapUsed - heapBefore) / resources.length;
    }
    const searches: SearchTiming[] = [];
    for (const q of queries(resources)) {
      options.log(`search: ${q.query}`);
      const [type, text] = q.query.split('?') as [string, string];
      const times: number[] = [];
      let total: number | undefined;
      let query: ResourceQuery = {};
      for (let i = 0; i < options.reps + 1; i++) {
        const start = now();
        const parsed = await parseSearch(type, new URLSearchParams(text), {}, allReads());
        // The total the FHIR search asks: none for a page, unless `_total` or a count asks.
        query = parsed.query;
        total = (
          await storage.searchResources(PROJECT, type, { ...query, total: searchTotal(parsed.request) })
        ).total;
        if (i > 0) times.push(now() - start);
      }
      // The number of matches, counted once more (untimed) when the search did not count them.
      const { order: _order, ...counted } = query;
      total ??= (await storage.searchResources(PROJECT, type, { ...counted, count: 0 })).total ?? 0;
      searches.push({ ...q, medianMs: median(times), total });
    }
    return {
      resources: resources.length,
      loadMs,
      searches,
      bytesPerResource,
      sizeKind: postgres ? 'index tables' : 'heap',
    };
  } finally {
    await storage?.close();
    if (admin) {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
