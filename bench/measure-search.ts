import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseSearch } from '../src/fhir/search/search-query.js';
import type { FhirResource, Storage } from '../src/storage/types.js';
import { fileStorage } from '../src/stores.js';
import { loadR4Indexer } from '../src/search/index-resource.js';
import { generatePatients } from './dataset.js';
import { median, now } from './stats.js';
import { allReads } from '../test/helpers/search-reads.js';

/*
 * Search on the file store with its search index (issue 30, on by default: postings built per
 * parameter by the first search on it) and without one (`indexer: false`: every search scans its
 * type through `where`), side by side in one run over the same generated Synthea-like data: the
 * first search of each kind (which builds its parameters' postings) and the medians of a selective
 * token search, a string prefix, a date range, a `_summary=count` and a one-level chain, each built
 * as the FHIR router builds it (`parseSearch`), asked again after a clean close and reopen (from
 * the saved postings); the load time into an empty store and again (every resource updated) once
 * the searched parameters are built; the heap each store holds per resource (after a forced GC,
 * postings built), and the time to reopen it.
 *   node --expose-gc --import tsx bench/measure-search.ts [--patients 250] [--reps 15] [--no-scan]
 */

const args = process.argv.slice(2);
const option = (name: string, fallback: string): string => {
  const at = args.indexOf(name);
  return at === -1 ? fallback : args[at + 1]!;
};
const patients = Number(option('--patients', '250'));
const reps = Number(option('--reps', '15'));
/** `--no-scan`: the index alone (the scan columns then repeat the index's), for large stores. */
const scan = !args.includes('--no-scan');
const P = 'bench';

const gc = (): void => {
  const collect = (globalThis as { gc?: () => void }).gc;
  if (!collect) throw new Error('run with node --expose-gc');
  collect();
  collect();
};
const heap = (): number => {
  gc();
  return process.memoryUsage().heapUsed;
};

// Loaded before any heap is measured: the definitions are the process's, not a store's.
await loadR4Indexer();
const resources = [...generatePatients(patients, 42)] as FhirResource[];
const total = resources.length;

// Query values drawn from the data: the Observation code nearest 1% of all resources, the first
// three letters of the first family name, the busiest month of Observation dates.
const codes = new Map<string, number>();
const months = new Map<string, number>();
let family = '';
for (const r of resources) {
  if (r.resourceType === 'Observation') {
    const code = (r.code as { coding: { code: string }[] }).coding[0]!.code;
    codes.set(code, (codes.get(code) ?? 0) + 1);
    const month = String(r.effectiveDateTime).slice(0, 7);
    months.set(month, (months.get(month) ?? 0) + 1);
  }
  if (r.resourceType === 'Patient' && !family)
    family = (r.name as { family: string }[])[0]!.family.slice(0, 3).toLowerCase();
}
const [code, codeCount] = [...codes].sort(
  (a, b) => Math.abs(a[1] - total / 100) - Math.abs(b[1] - total / 100),
)[0]!;
const [month] = [...months].sort((a, b) => b[1] - a[1])[0]!;
const nextMonth = new Date(Date.parse(`${month}-01T00:00:00Z`) + 32 * 86400e3).toISOString().slice(0, 7);

const searches: [string, string, [string, string][]][] = [
  [`Observation?code=${code} (${((codeCount / total) * 100).toFixed(2)}%)`, 'Observation', [['code', code]]],
  [`Patient?name=${family}`, 'Patient', [['name', family]]],
  [
    `Observation?date=ge${month}&date=lt${nextMonth}`,
    'Observation',
    [
      ['date', `ge${month}`],
      ['date', `lt${nextMonth}`],
    ],
  ],
  [
    `Observation?code=${code}&_summary=count`,
    'Observation',
    [
      ['code', code],
      ['_summary', 'count'],
    ],
  ],
  [`Observation?subject:Patient.name=${family}`, 'Observation', [['subject:Patient.name', family]]],
];

async function load(storage: Storage): Promise<number> {
  await storage.createProject({ id: P, name: 'bench', strictMode: false }).catch(() => undefined);
  const start = now();
  for (let i = 0; i < resources.length; i += 500) {
    await storage.writeResources(
      P,
      resources
        .slice(i, i + 500)
        .map((resource) => ({ op: 'update' as const, resource: resource as FhirResource & { id: string } })),
    );
  }
  return now() - start;
}

/** How long after the first search starts a write is issued (the build is under way by then). */
const WRITE_AFTER_MS = 30;

interface Timed {
  first: number;
  /** How long a write issued `WRITE_AFTER_MS` into the first search took (-1: the search ended first). */
  write: number;
  ms: number;
  total: number;
}

/**
 * Each search once (the first: it builds its parameters' postings, while a write is issued), then
 * its median of `reps`.
 */
async function timeSearches(storage: Storage): Promise<Timed[]> {
  const out: Timed[] = [];
  const patient = resources.find((r) => r.resourceType === 'Patient') as FhirResource & { id: string };
  for (const [, type, params] of searches) {
    const ms: number[] = [];
    let found = 0;
    let first = 0;
    let write = -1;
    for (let i = 0; i <= reps; i++) {
      const start = now();
      const { query } = await parseSearch(type, params, {}, allReads());
      let done = false;
      let written: Promise<void> | undefined;
      const timer =
        i === 0
          ? setTimeout(() => {
              if (done) return;
              const issued = now();
              written = storage.updateResource(P, patient).then(() => {
                write = now() - issued;
              });
            }, WRITE_AFTER_MS)
          : undefined;
      // The store's default, an exact total: index and scan must agree on it.
      found = (await storage.searchResources(P, type, query)).total ?? -1;
      done = true;
      clearTimeout(timer);
      if (i === 0) first = now() - start;
      else ms.push(now() - start);
      await written;
    }
    out.push({ first, write, ms: median(ms), total: found });
  }
  return out;
}

interface Run {
  loadMs: number;
  reloadMs: number;
  bytesPerResource: number;
  postingsPerResource: number;
  reopenMs: number;
  searches: Timed[];
  reopened: Timed[];
}

async function measure(indexed: boolean): Promise<Run> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-search-bench-'));
  const open = (): Promise<Storage> =>
    indexed
      ? fileStorage({ dir, durability: 'write' })
      : fileStorage({ dir, durability: 'write', indexer: false });
  try {
    const before = heap();
    let storage = await open();
    const loadMs = await load(storage);
    const loaded = heap();
    const searched = await timeSearches(storage);
    // The postings the searches built (the scan store's delta is the control: about 0).
    const postingsPerResource = (heap() - loaded) / total;
    const bytesPerResource = (loaded - before) / total;
    // Every resource written again: with the index, each write posts the searched parameters.
    const reloadMs = await load(storage);
    await storage.close();
    const start = now();
    storage = await open();
    const reopenMs = now() - start;
    const reopened = await timeSearches(storage);
    await storage.close();
    return {
      loadMs,
      reloadMs,
      bytesPerResource,
      postingsPerResource,
      reopenMs,
      searches: searched,
      reopened,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const withIndex = await measure(true);
const without = scan ? await measure(false) : withIndex;
const f = (ms: number): string => ms.toFixed(1).padStart(9);
console.log(
  `file store, ${total} resources (${patients} patients), medians of ${reps}: index first (builds) / a write during it / index / scan`,
);
const w = (ms: number): string => (ms < 0 ? '-'.padStart(9) : f(ms));
searches.forEach(([label], i) => {
  const a = withIndex.searches[i]!;
  const b = without.searches[i]!;
  console.log(
    `${label.padEnd(58)} ${f(a.first)} ms ${w(a.write)} ms ${f(a.ms)} ms ${f(b.ms)} ms  (total ${a.total}${a.total === b.total ? '' : ` vs ${b.total}!`})`,
  );
});
console.log('after a clean close and reopen (postings saved): index first / index / scan');
searches.forEach(([label], i) => {
  const a = withIndex.reopened[i]!;
  const b = without.reopened[i]!;
  console.log(
    `${label.padEnd(58)} ${f(a.first)} ms ${f(a.ms)} ms ${f(b.ms)} ms  (total ${a.total}${a.total === b.total ? '' : ` vs ${b.total}!`})`,
  );
});
console.log(
  `${'load (writeResources, 500 a batch): index / scan'.padEnd(58)} ${f(withIndex.loadMs)} ms ${f(without.loadMs)} ms`,
);
console.log(
  `${'reload, every resource updated, searched params built'.padEnd(58)} ${f(withIndex.reloadMs)} ms ${f(without.reloadMs)} ms  (${(withIndex.reloadMs / without.reloadMs).toFixed(2)}x)`,
);
console.log(
  `${'reopen (clean close; postings saved)'.padEnd(58)} ${f(withIndex.reopenMs)} ms ${f(without.reopenMs)} ms`,
);
console.log(
  `${'heap per resource, store loaded (nothing searched yet)'.padEnd(58)} ${withIndex.bytesPerResource.toFixed(0).padStart(9)} B  ${without.bytesPerResource.toFixed(0).padStart(9)} B`,
);
console.log(
  `${'heap per resource the searches added (postings built)'.padEnd(58)} ${withIndex.postingsPerResource.toFixed(0).padStart(9)} B  ${without.postingsPerResource.toFixed(0).padStart(9)} B`,
);
