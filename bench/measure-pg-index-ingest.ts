/**
 * `npx tsx bench/measure-pg-index-ingest.ts`: what the search index costs PostgreSQL writes. The
 * same generated patients (`--patients`, 401 resources each, one `writeResources` batch per
 * patient) are written into a fresh schema by a store without an indexer and by one with the R4
 * indexer, in turns (`--reps`), and the medians of resources/s and their ratio printed. Uses
 * `FPK_BENCH_POSTGRES_URL` (else `FPK_TEST_POSTGRES_URL`); the schemas are dropped.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { generatePatients } from './dataset.js';
import { median, now } from './stats.js';
import { R4_PATIENT_COMPARTMENT } from '../src/fhir/compartment.js';
import { loadR4Indexer } from '../src/search/index-resource.js';
import { createPostgresStorage } from '../src/storage/postgres/postgres-storage.js';
import type { FhirResource } from '../src/storage/types.js';

const { values } = parseArgs({
  options: { patients: { type: 'string', default: '5' }, reps: { type: 'string', default: '3' } },
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
const rates: Record<'without' | 'with', number[]> = { without: [], with: [] };
for (let rep = 0; rep < Number(values.reps); rep++) {
  for (const mode of rep % 2 ? (['with', 'without'] as const) : (['without', 'with'] as const)) {
    const schema = `fpk_bench_ingest_${randomBytes(4).toString('hex')}`;
    const storage = createPostgresStorage({
      connectionString: url,
      schema,
      compartment: R4_PATIENT_COMPARTMENT,
      ...(mode === 'with' ? { indexer } : {}),
    });
    try {
      await storage.ping();
      const start = now();
      for (const batch of batches) {
        await storage.writeResources(
          'bench',
          batch.map((resource) => ({ op: 'create' as const, resource })),
        );
      }
      rates[mode].push((total / (now() - start)) * 1000);
    } finally {
      await storage.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  }
}
await admin.end();
// The indexer's own time (JavaScript, in the writer's thread) over the same resources.
const started = now();
for (const batch of batches) for (const resource of batch) indexer.index(resource);
const indexMs = now() - started;
const without = median(rates.without);
const withIndex = median(rates.with);
console.log(`PostgreSQL writeResources, ${total} resources, median of ${values.reps} turns`);
console.log(
  `without index: ${Math.round(without)} resources/s; with the R4 index: ${Math.round(withIndex)} resources/s`,
);
console.log(`slowdown: ${(without / withIndex).toFixed(2)}x`);
const rest = 1000 / withIndex - indexMs / total;
console.log(
  `indexer alone: ${(indexMs / total).toFixed(3)} ms per resource; the rest of an indexed write: ${rest.toFixed(3)} ms ` +
    `(${(rest / (1000 / without)).toFixed(2)}x the write without index)`,
);
