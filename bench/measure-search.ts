import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { R4_PATIENT_COMPARTMENT } from '../src/fhir/compartment.js';
import { parseSearch } from '../src/fhir/search-query.js';
import type { SearchResolver } from '../src/search/match.js';
import { createFileStorage } from '../src/storage/file/file-storage.js';
import type { FhirResource, Storage } from '../src/storage/types.js';
import { fileStorage } from '../src/stores.js';
import { loadR4Indexer } from '../src/search/index-resource.js';
import { generatePatients } from './dataset.js';
import { median, now } from './stats.js';

/*
 * Search on the file store with its search index (issue 30) and without one (every search scans
 * its type through `where`), side by side in one run over the same generated Synthea-like data:
 * the medians of a selective token search, a string prefix, a date range, a `_summary=count` and
 * a one-level chain, each built as the FHIR router builds it (`parseSearch`); the heap each store
 * holds per resource once loaded (after a forced GC), and the time to reopen it (the index is
 * rebuilt from the logs).
 *   node --expose-gc --import tsx bench/measure-search.ts [--patients 250] [--reps 15]
 */

const args = process.argv.slice(2);
const option = (name: string, fallback: string): string => {
  const at = args.indexOf(name);
  return at === -1 ? fallback : args[at + 1]!;
};
const patients = Number(option('--patients', '250'));
const reps = Number(option('--reps', '15'));
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
  await storage.createProject({ id: P, name: 'bench', strictMode: false });
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

function resolver(storage: Storage): SearchResolver {
  return {
    async *resources(type) {
      yield* (await storage.searchResources(P, type, {})).resources;
    },
  };
}

async function timeSearches(storage: Storage): Promise<{ ms: number; total: number }[]> {
  const out: { ms: number; total: number }[] = [];
  for (const [, type, params] of searches) {
    const ms: number[] = [];
    let found = 0;
    for (let i = 0; i < reps; i++) {
      const start = now();
      const { query } = await parseSearch(type, params, {}, resolver(storage));
      found = (await storage.searchResources(P, type, query)).total;
      ms.push(now() - start);
    }
    out.push({ ms: median(ms), total: found });
  }
  return out;
}

interface Run {
  loadMs: number;
  bytesPerResource: number;
  reopenMs: number;
  searches: { ms: number; total: number }[];
}

async function measure(indexed: boolean): Promise<Run> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-search-bench-'));
  const open = (): Promise<Storage> =>
    indexed
      ? fileStorage({ dir, durability: 'write' })
      : createFileStorage({ dir, durability: 'write', compartment: R4_PATIENT_COMPARTMENT });
  try {
    const before = heap();
    let storage = await open();
    const loadMs = await load(storage);
    const bytesPerResource = (heap() - before) / total;
    await storage.close();
    const start = now();
    storage = await open();
    const reopenMs = now() - start;
    const result = { loadMs, bytesPerResource, reopenMs, searches: await timeSearches(storage) };
    await storage.close();
    return result;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const withIndex = await measure(true);
const without = await measure(false);
const f = (ms: number): string => ms.toFixed(1).padStart(9);
console.log(`file store, ${total} resources (${patients} patients), medians of ${reps}: index / scan`);
searches.forEach(([label], i) => {
  const a = withIndex.searches[i]!;
  const b = without.searches[i]!;
  console.log(
    `${label.padEnd(58)} ${f(a.ms)} ms ${f(b.ms)} ms  (total ${a.total}${a.total === b.total ? '' : ` vs ${b.total}!`})`,
  );
});
console.log(
  `${'load (writeResources, 500 a batch)'.padEnd(58)} ${f(withIndex.loadMs)} ms ${f(without.loadMs)} ms`,
);
console.log(
  `${'reopen (clean close; the index rebuilt)'.padEnd(58)} ${f(withIndex.reopenMs)} ms ${f(without.reopenMs)} ms`,
);
console.log(
  `${'heap per resource'.padEnd(58)} ${withIndex.bytesPerResource.toFixed(0).padStart(9)} B  ${without.bytesPerResource.toFixed(0).padStart(9)} B  (index: ${(withIndex.bytesPerResource - without.bytesPerResource).toFixed(0)} B)`,
);
