/**
 * `npm run bench -- --store postgres --huge`: issue 32 item 4, the PostgreSQL store at 10M
 * resources (24,938 generated patients; `--patients` for another size), run by hand. Every figure
 * is printed with its target where the issue (or the design's targets) gives one:
 *
 * - load: the first `uploadPatients` patients by NDJSON upload over HTTP (the rate, and the time it
 *   would take for the whole dataset at that rate), the rest with `COPY` into the store's tables
 *   (`pg-resource-load.ts`, the rows the store writes), indexes rebuilt after it;
 * - a system export (kick-off to complete manifest, files in the database), `COPY (SELECT …) TO
 *   STDOUT` of the same rows beside it, then every file downloaded;
 * - a Group export of 1% of the patients, against the system export;
 * - issue 30's searches (`pg-search-queries.ts`), medians;
 * - SCIM at `scimUsers` users (loaded with `COPY`, `pg-user-load.ts`): a walk of every page;
 * - database size per resource; peak RSS of each process (the server, which also runs the COPY
 *   loader and the export worker threads; the export worker's own isolate; this process).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { postgresStorage } from '../src/postgres.js';
import { quoteIdentifier } from '../src/storage/postgres/schema.js';
import { runMeta, writeNdjson, type BenchOptions, type BenchResults, type Figure } from './benchmark.js';
import { RESOURCES_PER_PATIENT } from './dataset.js';
import { timedDownload } from './measure-download.js';
import { runHttpExport, type ExportRun } from './measure-export.js';
import { measureScimPages } from './measure-scim.js';
import { uploadNdjson } from './measure-upload.js';
import { pgSearchQueries, timePgSearch } from './pg-search-queries.js';
import { startServer } from './server-process.js';
import type { WorkerProbe } from './server-protocol.js';
import { now } from './stats.js';

export interface HugeOptions extends BenchOptions {
  databaseUrl: string;
  /** Timed runs of each search (after 2 untimed). */
  searchRuns: number;
}

const MB = 1024 * 1024;
const round = (n: number): number => Math.round(n * 1000) / 1000;

/** This process's peak RSS (Linux `VmHWM`), else its current RSS. */
function ownPeakRss(): number {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (match) return Number(match[1]) * 1024;
  } catch {
    // Not Linux.
  }
  return process.memoryUsage.rss();
}

export async function runHuge(options: HugeOptions): Promise<BenchResults> {
  const started = Date.now();
  const { log, patients } = options;
  const figures: Figure[] = [];
  const samples: Record<string, unknown> = {};
  const add = (figure: Figure): void => {
    figures.push({
      ...figure,
      value: Math.abs(figure.value) < 10 ? round(figure.value) : Math.round(figure.value * 10) / 10,
    });
    log(
      `${figure.label}: ${figures.at(-1)!.value} ${figure.unit}${figure.target ? ` (target ${figure.target}: ${figure.pass ? 'ok' : 'MISSED'})` : ''}`,
    );
  };
  /** A ratio figure `a / b` with its bound `max`. */
  const ratio = (key: string, label: string, a: number, b: number, max: number): void =>
    add({ key, label, value: a / b, unit: 'x', target: `≤ ${max}`, pass: a / b <= max });
  const load = (): string =>
    os
      .loadavg()
      .map((n) => n.toFixed(1))
      .join(' ');
  const work = fs.mkdtempSync(path.join(options.workDir, 'fpk-huge-'));
  const exportDir = path.join(work, 'exports');
  const probeDir = path.join(work, 'probes');
  fs.mkdirSync(probeDir);
  const server = await startServer({
    store: 'postgres',
    dir: path.join(work, 'store'),
    exportDir,
    probeDir,
    databaseUrl: options.databaseUrl,
    exportFiles: 'database',
    ...(options.probeGc ? { probeGc: true } : {}),
  });
  const db = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  const schema = server.info.schema!;
  const s = quoteIdentifier(schema);
  const resources = patients * RESOURCES_PER_PATIENT;
  const loads: string[] = [];
  // The load takes over an hour at 10M: a phase after it that fails is logged and recorded, and
  // the phases that do not need its results still run.
  const failures: string[] = [];
  const phase = async (name: string, run: () => Promise<void>): Promise<void> => {
    try {
      await run();
    } catch (error) {
      const message = `${name}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`;
      failures.push(message);
      log(`PHASE FAILED ${message}`);
    }
  };
  try {
    const fhirBase = `${server.info.origin}/fhir/R4`;
    const project = await server.call('newProject', { name: 'huge', strict: false });
    const { projectId, token } = project;

    // ---- Load: a sample by NDJSON upload, the rest by COPY.
    const uploadPatients = Math.min(options.uploadPatients, patients);
    const file = path.join(work, 'upload.ndjson');
    const uploadCount = await writeNdjson(file, uploadPatients, options.seed);
    log(`NDJSON upload of ${uploadCount} resources (${uploadPatients} patients); load ${load()}`);
    const upload = await uploadNdjson(fhirBase, token, file);
    fs.rmSync(file);
    if (upload.failed > 0) throw new Error(`${upload.failed} lines rejected by the upload`);
    const uploadRate = uploadCount / (upload.ms / 1000);
    add({
      key: 'huge.upload.rate',
      label: `HTTP NDJSON upload, ${uploadCount} resources (indexed)`,
      value: uploadRate,
      unit: 'resources/s',
    });
    add({
      key: 'huge.upload.projectedHours',
      label: `NDJSON upload of all ${resources} resources at that rate (projection)`,
      value: resources / uploadRate / 3600,
      unit: 'h',
    });
    loads.push(`upload ${load()}`);
    await server.call('resetPeak', {});
    log(`COPY of the other ${resources - uploadCount} resources; load ${load()}`);
    const copied = await server.call('copyGenerated', {
      projectId,
      patients,
      skip: uploadPatients,
      seed: options.seed,
    });
    const loadMemory = await server.call('memory', {});
    samples.copy = copied;
    add({
      key: 'huge.copy.rate',
      label: `COPY load, ${copied.resources} resources (index rows built by the R4 indexer)`,
      value: copied.resources / (copied.ms / 1000),
      unit: 'resources/s',
    });
    add({
      key: 'huge.copy.ms',
      label: 'COPY load, whole (index rebuild and ANALYZE included)',
      value: copied.ms / 1000,
      unit: 's',
    });
    add({
      key: 'huge.copy.indexMs',
      label: '  of which rebuilding the indexes',
      value: copied.indexMs / 1000,
      unit: 's',
    });
    add({
      key: 'huge.memory.loadRss',
      label: 'Server process peak RSS during the COPY load',
      value: loadMemory.peakRss / MB,
      unit: 'MiB',
    });
    loads.push(`copy ${load()}`);
    const { rows: counted } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.resources WHERE project_id = $1 AND superseded_seq IS NULL AND NOT deleted`,
      [projectId],
    );
    const live = counted[0]!.n;
    add({ key: 'huge.resources', label: 'Live resources in the project', value: live, unit: '' });

    // ---- Database size.
    const { rows: sizes } = await db.query<{ name: string; bytes: string }>(
      `SELECT c.relname AS name, pg_total_relation_size(c.oid)::text AS bytes
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relkind = 'r'`,
      [schema],
    );
    const bytes = (match: (name: string) => boolean): number =>
      sizes.filter((r) => match(r.name)).reduce((sum, r) => sum + Number(r.bytes), 0);
    const total = bytes(() => true);
    samples.tableBytes = Object.fromEntries(sizes.map((r) => [r.name, Number(r.bytes)]));
    add({
      key: 'huge.db.perResource',
      label: 'Database size per resource (every table of the schema, with indexes and TOAST)',
      value: total / live,
      unit: 'bytes',
      target: '≤ 5,000 (the sizing estimate)',
      pass: total / live <= 5000,
    });
    add({
      key: 'huge.db.resourcesTable',
      label: '  resources table',
      value: bytes((n) => n === 'resources') / live,
      unit: 'bytes',
    });
    add({
      key: 'huge.db.indexTables',
      label: '  search index tables',
      value: bytes((n) => n.startsWith('search_')) / live,
      unit: 'bytes',
    });
    add({
      key: 'huge.db.compartments',
      label: '  compartment and identifier tables',
      value: bytes((n) => n === 'resource_compartments' || n === 'resource_identifiers') / live,
      unit: 'bytes',
    });
    add({ key: 'huge.db.total', label: 'Schema size', value: total / 1024 ** 3, unit: 'GiB' });

    // ---- System export, its COPY baseline, downloads.
    const fileSizes = (jobId: string, names: string[]) =>
      server.call('exportFileSizes', { projectId, jobId, names });
    let system: ExportRun | undefined;
    let exportMemory: { peakRss: number } | undefined;
    let systemProbe: WorkerProbe | null = null;
    await phase('system export', async () => {
      await server.call('resetPeak', {});
      log(`system export; load ${load()}`);
      system = await runHttpExport({ fhirBase, token, path: '/$export', exportDir, sizes: fileSizes });
      exportMemory = await server.call('memory', {});
      systemProbe = await server.call('workerProbe', { jobId: system.jobId });
      loads.push(`export ${load()}`);
      add({
        key: 'huge.export.system.ms',
        label: `System export, kick-off to manifest (${system.resources} resources, ${Math.round(system.bytes / MB)} MiB)`,
        value: system.ms / 1000,
        unit: 's',
      });
      add({
        key: 'huge.export.system.rate',
        label: 'System export throughput',
        value: system.resources / (system.ms / 1000),
        unit: 'resources/s',
      });
      log('COPY (SELECT body …) TO STDOUT of the same rows');
      const copyOut = await server.call('pgCopy', {
        projectId,
        types: system.types,
        dir: path.join(work, 'pg-copy'),
      });
      fs.rmSync(path.join(work, 'pg-copy'), { recursive: true, force: true });
      add({
        key: 'huge.export.copy.ms',
        label: 'COPY (SELECT body …) TO STDOUT of the same rows',
        value: copyOut.ms / 1000,
        unit: 's',
      });
      ratio('huge.export.copyRatio', 'System export / COPY TO STDOUT', system.ms, copyOut.ms, 2);
      const downloads = await downloadAll(system, token);
      add({
        key: 'huge.download.rate',
        label: `Downloading every file of the system export (${system.files.length} files, identity)`,
        value: downloads.bytes / MB / (downloads.ms / 1000),
        unit: 'MiB/s',
      });
      add({ key: 'huge.download.s', label: '  time', value: downloads.ms / 1000, unit: 's' });
      add({
        key: 'huge.export.withDownloads.s',
        label: 'System export then downloads, total',
        value: (system.ms + downloads.ms) / 1000,
        unit: 's',
      });
    });

    // ---- Group export of 1%.
    await phase('Group export', async () => {
      const group = await server.call('createGroup', { projectId, percent: options.groupPercent ?? 1 });
      await server.call('resetPeak', {});
      log(`Group export (${group.members} patients); load ${load()}`);
      const groupRun = await runHttpExport({
        fhirBase,
        token,
        path: `/Group/${group.groupId}/$export`,
        exportDir,
        sizes: fileSizes,
      });
      const groupMemory = await server.call('memory', {});
      const groupProbe = await server.call('workerProbe', { jobId: groupRun.jobId });
      add({
        key: 'huge.export.group.ms',
        label: `Group export of ${group.members} patients (${options.groupPercent ?? 1}%), ${groupRun.resources} resources`,
        value: groupRun.ms,
        unit: 'ms',
      });
      if (system)
        ratio('huge.export.group.ratio', 'Group export / system export', groupRun.ms, system.ms, 0.05);

      // ---- Memory.
      if (exportMemory)
        add({
          key: 'huge.memory.exportRss',
          label: 'Server process peak RSS during the system export (worker threads included)',
          value: exportMemory.peakRss / MB,
          unit: 'MiB',
        });
      add({
        key: 'huge.memory.groupRss',
        label: 'Server process peak RSS during the Group export',
        value: groupMemory.peakRss / MB,
        unit: 'MiB',
      });
      if (exportMemory)
        ratio(
          'huge.memory.exportRssRatio',
          'Server peak RSS, system export / 1% Group export (memory flat in the data read)',
          exportMemory.peakRss,
          groupMemory.peakRss,
          1.2,
        );
      if (systemProbe && groupProbe) {
        add({
          key: 'huge.memory.workerIsolate',
          label: 'Export worker isolate peak (heap + external), system export',
          value: systemProbe.peakIsolateBytes / MB,
          unit: 'MiB',
        });
        ratio(
          'huge.memory.workerRatio',
          'Export worker isolate peak, system export / Group export',
          systemProbe.peakIsolateBytes,
          groupProbe.peakIsolateBytes,
          1.2,
        );
        // `--probe-gc`: what stays reachable after forced GCs, garbage left out.
        if (systemProbe.peakLiveBytes > 0 && groupProbe.peakLiveBytes > 0) {
          add({
            key: 'huge.memory.workerLive',
            label: 'Export worker live peak (after forced GCs), system export',
            value: systemProbe.peakLiveBytes / MB,
            unit: 'MiB',
          });
          ratio(
            'huge.memory.workerLiveRatio',
            'Export worker live peak, system export / Group export',
            systemProbe.peakLiveBytes,
            groupProbe.peakLiveBytes,
            1.2,
          );
        }
      }
    });

    // ---- Searches (this process, on the server's schema, as the FHIR router calls the store).
    await phase('searches', async () => {
      const storage = postgresStorage({
        connectionString: options.databaseUrl,
        schema,
        statementTimeoutMs: 0,
      });
      try {
        log(`searches (${options.searchRuns} runs each); load ${load()}`);
        for (const search of await pgSearchQueries(db, s)) {
          const timed = await timePgSearch(storage, projectId, search, options.searchRuns);
          add({
            key: `huge.search.${search.key}`,
            label: `Search ${search.label}: \`${search.type}?${search.query}\` (${timed.total} matches), median`,
            value: timed.medianMs,
            unit: 'ms',
            target: `≤ ${search.targetMs} (at 1M)`,
            pass: timed.medianMs <= search.targetMs,
          });
        }
        loads.push(`search ${load()}`);
      } finally {
        await storage.close();
      }
    });

    // ---- SCIM at scimUsers users.
    if (options.scimUsers > 0)
      await phase('SCIM', async () => {
        const scim = await server.call('newProject', { name: 'scim', strict: false });
        log(`SCIM: COPY of ${options.scimUsers} users; load ${load()}`);
        await server.call('loadUsers', {
          projectId: scim.projectId,
          count: options.scimUsers,
          batchSize: 1000,
          copy: true,
        });
        const pages = await measureScimPages({
          scimBase: `${server.info.origin}/scim/v2`,
          token: scim.token,
          users: options.scimUsers,
        });
        samples.scimPages = pages;
        add({
          key: 'huge.scim.page',
          label: `SCIM page of 100 at ${options.scimUsers} users, walking every page: median (${pages.walk.pages} pages)`,
          value: pages.walk.medianMs,
          unit: 'ms',
          target: '≤ 20',
          pass: pages.walk.medianMs <= 20,
        });
        add({
          key: 'huge.scim.walk',
          label: 'SCIM walk of every page, total',
          value: pages.walk.totalMs / 1000,
          unit: 's',
        });
        ratio(
          'huge.scim.lastOverFirst',
          'SCIM walk: median page of its last tenth / its first tenth (O(n) walk: about 1)',
          pages.lastTenthMedianMs,
          pages.firstTenthMedianMs,
          1.5,
        );
        loads.push(`scim ${load()}`);
      });
    add({
      key: 'huge.memory.benchRss',
      label: 'Benchmark process peak RSS (searches, downloads)',
      value: ownPeakRss() / MB,
      unit: 'MiB',
    });
    const serverPeak = await server.call('memory', {});
    add({
      key: 'huge.memory.serverNow',
      label: 'Server process RSS at the end',
      value: serverPeak.rss / MB,
      unit: 'MiB',
    });
    samples.loadAverages = loads;
    samples.failures = failures;
    if (failures.length > 0)
      log(`${failures.length} phase(s) FAILED, their figures are missing:\n${failures.join('\n')}`);
    log(`load averages (1, 5, 15 min) after each phase: ${loads.join('; ')}`);
  } finally {
    // Closing the server drops its schema.
    await db.end();
    await server.close();
    fs.rmSync(work, { recursive: true, force: true });
  }
  return { meta: runMeta(options, started, 'postgres', server.info.workerExports), figures, samples };
}

/** Every file of `run` downloaded one after the other (no compression asked): bytes and ms. */
async function downloadAll(run: ExportRun, token: string): Promise<{ bytes: number; ms: number }> {
  const manifest = (await (
    await fetch(run.statusUrl, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as {
    output: { url: string }[];
  };
  const start = now();
  let bytes = 0;
  for (const { url } of manifest.output)
    bytes += (await timedDownload(url, { authorization: `Bearer ${token}` })).bytes;
  return { bytes, ms: now() - start };
}
