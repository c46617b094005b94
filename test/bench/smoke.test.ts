import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runBenchmark } from '../../bench/benchmark.js';
import type { BenchOptions, BenchResults } from '../../bench/benchmark.js';
import { renderComparison, renderTable } from '../../bench/table.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { tempDir } from '../helpers/temp-dir.js';

const work = tempDir('bench-smoke-');

const KEYS = [
  'dataset.resources',
  'load.storage.rate',
  'load.upload.rate',
  'load.uploadStrict.rate',
  'load.uploadStrict.ratio',
  'validation.reference.rate',
  'validation.default.rate',
  'validation.speedup',
  'validation.parseRatio',
  'export.bytes',
  'baseline.copyFile.ms',
  'baseline.stream.ms',
  'baseline.stream.throughput',
  'export.system.ms',
  'export.system.rate',
  'export.system.ratio',
  'export.system.ratioCopyFile',
  'export.group.members',
  'export.group.ms',
  'export.group.ratio',
  'export.group.kickoffMs',
  'export.floor.ms',
  'download.bytes',
  'download.handler.throughput',
  'download.plain.throughput',
  'download.ratio',
  'scim.users',
  'scim.load.rate',
  'scim.lookup.median',
  'scim.lookup.p99',
  'scim.create.median',
  'scim.create.p99',
  'scim.patch.median',
  'scim.patch.p99',
  'export.floorWithUsers.ms',
  ...['scimCreate', 'fhirRead'].flatMap((k) => [
    `audit.${k}.on.p50`,
    `audit.${k}.off.p50`,
    `audit.${k}.ratio`,
  ]),
  'memory.workerRatio',
  'memory.exportRssRatio',
  ...['N', '5N'].flatMap((n) =>
    [
      'resources',
      'workerIsolatePeak',
      'workerHeapUsedPeak',
      'exportRssIncrease',
      'exportPeakRss',
      'rssAfterLoad',
      'heapUsedAfterLoad',
      'lifetimePeakRss',
      'exportRate',
    ].map((k) => `memory.${n}.${k}`),
  ),
];

const TINY: Omit<BenchOptions, 'store'> = {
  patients: 2,
  memoryFactor: 2,
  reps: 1,
  otherReps: 1,
  fastReps: 1,
  uploadPatients: 1,
  scimUsers: 30,
  scimRequests: { lookups: 5, creates: 3, patches: 3 },
  auditRequests: 10,
  synthea: false,
  seed: 1,
  workDir: work,
  log: () => undefined,
};

describe('benchmark smoke run', () => {
  it('runs every measurement on a tiny dataset and reports every figure', async () => {
    const results = await runBenchmark({ ...TINY, store: 'file' });
    const byKey = new Map(results.figures.map((f) => [f.key, f]));
    for (const key of KEYS) {
      expect(byKey.has(key), key).toBe(true);
      expect(Number.isFinite(byKey.get(key)!.value), key).toBe(true);
    }
    expect(byKey.get('dataset.resources')!.value).toBeGreaterThan(700);
    expect(byKey.get('memory.5N.resources')!.value).toBe(2 * byKey.get('memory.N.resources')!.value);
    expect(byKey.get('export.group.members')!.value).toBe(1);
    expect(results.meta.store).toBe('file');
    expect(results.meta.workerExports).toBe(true);
    // Targets carry a verdict; the JSON round-trips.
    for (const f of results.figures.filter((f) => f.target)) expect(typeof f.pass).toBe('boolean');
    expect(JSON.parse(JSON.stringify(results))).toEqual(results);
    expect(renderTable(results)).toContain('System export / streamed copy');
    // The run cleans up after itself.
    expect(fs.readdirSync(work)).toEqual([]);
  });
});

// `npm run bench -- --store postgres` (or `file,postgres`): the same figures plus the COPY baseline.
const postgresUrl = postgresTestUrl('benchmark smoke run on PostgreSQL');
describe.runIf(postgresUrl)('benchmark smoke run on PostgreSQL', () => {
  it('reports every figure and the COPY TO STDOUT baseline of the same rows', async () => {
    const results = await runBenchmark({ ...TINY, store: 'postgres', databaseUrl: postgresUrl! });
    const byKey = new Map(results.figures.map((f) => [f.key, f]));
    for (const key of [
      ...KEYS,
      'baseline.pgCopy.ms',
      'baseline.pgCopy.rate',
      'export.system.overPgCopy',
      'download.gzip.bytes',
      'download.gzip.ratio',
    ]) {
      expect(byKey.has(key), key).toBe(true);
      expect(Number.isFinite(byKey.get(key)!.value), key).toBe(true);
    }
    expect(results.meta.store).toBe('postgres');
    expect(results.meta.workerExports).toBe(true);
    expect(typeof byKey.get('export.system.overPgCopy')!.pass).toBe('boolean');
    expect(typeof byKey.get('download.gzip.ratio')!.pass).toBe('boolean');
    // The export's files are in the database: the gzip download sends them as stored, smaller.
    const download = results.samples.download as { bytes: number; gzipBytes: number };
    expect(download.gzipBytes).toBeGreaterThan(0);
    expect(download.gzipBytes).toBeLessThan(download.bytes / 2);
    // The COPY baseline wrote the rows the export did.
    const copies = results.samples.pgCopy as { rows: number }[];
    expect(copies[0]!.rows).toBe((results.samples.export as { resources: number }).resources);
    expect(fs.readdirSync(work)).toEqual([]);
    // Beside a file run (this run's figures without the PostgreSQL-only ones, so that the test
    // does not depend on the other's results): a column per store, the COPY rows for PostgreSQL.
    const fileRun: BenchResults = {
      ...results,
      meta: { ...results.meta, store: 'file' },
      figures: results.figures.filter((f) => !f.key.includes('pgCopy') && !f.key.includes('PgCopy')),
    };
    const table = renderComparison([fileRun, results]);
    expect(table).toMatch(/Figure +file +postgres +Unit/);
    expect(table).toContain('COPY TO STDOUT throughput');
    expect(table).toContain('kick-off to manifest / COPY TO STDOUT');
  });
});
