import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FhirResource } from '../src/storage/types.js';
import { generatePatients, RESOURCES_PER_PATIENT } from './dataset.js';
import { copyWithCopyFile, copyWithStreams } from './measure-copy.js';
import { saveExportFiles, timedDownload } from './measure-download.js';
import { deleteExport, runHttpExport, type ExportRun } from './measure-export.js';
import { measureAuditOverhead, medianRoundRatio } from './measure-audit-overhead.js';
import { measureScim, measureScimPages, type ScimFigures } from './measure-scim.js';
import { measureIngestFloor } from './measure-floor.js';
import { measureImport } from './measure-import.js';
import { measureStoreSearch } from './measure-store-search.js';
import { postBundles } from './measure-transactions.js';
import { uploadNdjson } from './measure-upload.js';
import { measureValidation, rate } from './measure-validation.js';
import type { MemorySample, StoreKind, WorkerProbe } from './server-protocol.js';
import { startServer, type ServerProcess } from './server-process.js';
import { readSynthea } from './synthea.js';
import { median, ratio, sleep } from './stats.js';

/** What to run (see `bench/run.ts` for the command line). */
export interface BenchOptions {
  /** Patients of the main dataset (≈ 398 resources each). */
  patients: number;
  /**
   * The memory comparison's other size, as a multiple of `patients`: 5 (N and 5N) by default, 0.2
   * for `--large` (the main dataset is then the 5x size). 0 skips it.
   */
  memoryFactor: number;
  /** Repetitions of each timing on the main dataset (exports, copies, uploads). */
  reps: number;
  /** Repetitions of the export at the memory comparison's other size. */
  otherReps: number;
  /** Percent of the patients in the exported Group. @default 1 */
  groupPercent?: number;
  /** Repetitions of the small, fast timings (group export, downloads). */
  fastReps: number;
  /** Patients of the NDJSON file uploaded over HTTP (each rep into a fresh project). */
  uploadPatients: number;
  /** SCIM users loaded through the storage API before the latency measurements (0 skips SCIM). */
  scimUsers: number;
  scimRequests: { lookups: number; creates: number; patches: number };
  /**
   * SCIM creates and FHIR reads timed on each of two fresh servers, one auditing (with its journal)
   * and one not, alternately (0 skips the comparison). @default 0
   */
  auditRequests?: number;
  /** `file` (the embedded file store, `fileStorage`), `memory` (`memoryStorage`) or `postgres`. */
  store: StoreKind;
  /** PostgreSQL connection string for store `postgres` (each server uses a fresh schema). */
  databaseUrl?: string;
  /** The file store's durability; `write` (no fsync) is a diagnostic. @default 'fsync' */
  durability?: 'fsync' | 'write';
  /** Diagnostic: also measure the export worker's live memory after forced GCs. @default false */
  probeGc?: boolean;
  /** Diagnostic: `reference` makes strict projects validate with `@medplum/core` alone. @default 'default' */
  validator?: 'default' | 'reference';
  /** Synthea bundle directory to load and export, when it exists; `false` skips it. */
  synthea: string | false;
  /**
   * Patient bundles in flight at once when the Synthea sample is posted as transaction Bundles
   * (timed beside the same load one request at a time). @default 4
   */
  txnConcurrency?: number;
  /**
   * The search section: the main dataset loaded again into an indexed store of the kind under
   * test, in this process, and the searches timed (`measure-store-search.ts`). @default true
   */
  search?: boolean;
  /**
   * The `$import` section (`measure-import.ts`): generated resources imported and uploaded in each
   * repetition, besides the Synthea sample; 0 skips the section. @default 0
   */
  importResources?: number;
  seed: number;
  /** Where the stores, exports and copies go (a fresh sub-directory, removed at the end). */
  workDir: string;
  /** Writes V8 CPU profiles of the server process and its export workers here. */
  profileDir?: string;
  log: (line: string) => void;
}

/** One reported figure. `target` says what the issue asks; `pass` whether this run meets it. */
export interface Figure {
  key: string;
  label: string;
  value: number;
  unit: string;
  target?: string;
  pass?: boolean;
}

export interface BenchResults {
  meta: {
    date: string;
    node: string;
    platform: string;
    cpus: number;
    cpuModel: string;
    totalMemory: number;
    store: StoreKind;
    durability: 'fsync' | 'write';
    workerExports: boolean;
    patients: number;
    resources: number;
    options: Omit<BenchOptions, 'log'>;
    durationMs: number;
  };
  figures: Figure[];
  /** Every sample behind the figures. */
  samples: Record<string, unknown>;
}

interface MemoryFigures {
  patients: number;
  resources: number;
  rssAfterLoad: number;
  heapUsedAfterLoad: number;
  lifetimePeakRss: number;
  exportPeakRss: number;
  exportRssIncrease: number;
  workerIsolatePeak: number;
  workerHeapUsedPeak: number;
  workerLivePeak: number;
  probes: (WorkerProbe | null)[];
  peakSource: MemorySample['peakSource'];
  exportMs: number[];
}

const MB = 1024 * 1024;
const round = (n: number, digits = 1): number => Math.round(n * 10 ** digits) / 10 ** digits;

/**
 * Where `runHttpExport` finds the files of an export of `projectId` on `server`: under `exportDir`,
 * or (PostgreSQL keeps its export files in the database, its default) sized by the server.
 */
function exportFilesOf(
  server: ServerProcess,
  projectId: string,
  exportDir: string,
): { exportDir: string; sizes?: (jobId: string, names: string[]) => Promise<number[]> } {
  if (server.info.store !== 'postgres') return { exportDir };
  return {
    exportDir,
    sizes: (jobId, names) => server.call('exportFileSizes', { projectId, jobId, names }),
  };
}

/**
 * Loads `patients` generated patients into a fresh project of `server`, then runs `reps` system
 * exports, each with the peak RSS of the server process reset before it, and reads the worker probe
 * of each. Keeps the first export's files (for the baseline copy and the downloads); deletes the others.
 */
async function loadAndExport(
  server: ServerProcess,
  options: BenchOptions,
  patients: number,
  reps: number,
  exportDir: string,
): Promise<{ memory: MemoryFigures; runs: ExportRun[]; loadMs: number; projectId: string; token: string }> {
  const project = await server.call('newProject', { name: `bench-${patients}`, strict: false });
  options.log(
    `loading ${patients} patients (${patients * RESOURCES_PER_PATIENT} resources) through the storage API`,
  );
  const load = await server.call('loadGenerated', {
    projectId: project.projectId,
    patients,
    seed: options.seed,
    batchSize: 1000,
  });
  const lifetime = await server.call('memory', {});
  // A small export first starts the worker thread (and compiles its code), so the timed runs and
  // the memory peaks are those of exporting, not of starting a thread.
  const warmUp = await runHttpExport({
    fhirBase: `${server.info.origin}/fhir/R4`,
    token: project.token,
    path: '/$export?_type=AllergyIntolerance',
    ...exportFilesOf(server, project.projectId, exportDir),
  });
  await deleteExport(warmUp, project.token);
  const runs: ExportRun[] = [];
  const peaks: MemorySample[] = [];
  const probes: (WorkerProbe | null)[] = [];
  let rssAfterLoad = 0;
  let heapUsedAfterLoad = 0;
  for (let rep = 0; rep < reps; rep++) {
    const before = await server.call('resetPeak', {});
    if (rep === 0) {
      rssAfterLoad = before.rss;
      heapUsedAfterLoad = before.heapUsed;
    }
    options.log(`system export ${rep + 1}/${reps} (${patients} patients)`);
    const run = await runHttpExport({
      fhirBase: `${server.info.origin}/fhir/R4`,
      token: project.token,
      path: '/$export',
      ...exportFilesOf(server, project.projectId, exportDir),
    });
    peaks.push({ ...(await server.call('memory', {})), rss: before.rss });
    probes.push(await server.call('workerProbe', { jobId: run.jobId }));
    runs.push(run);
    if (rep > 0) await deleteExport(run, project.token);
  }
  const exportPeakRss = Math.max(...peaks.map((p) => p.peakRss));
  return {
    runs,
    loadMs: load.ms,
    projectId: project.projectId,
    token: project.token,
    memory: {
      patients,
      resources: load.resources,
      rssAfterLoad,
      heapUsedAfterLoad,
      lifetimePeakRss: lifetime.peakRss,
      exportPeakRss,
      exportRssIncrease: Math.max(...peaks.map((p) => p.peakRss - p.rss)),
      workerIsolatePeak: Math.max(0, ...probes.map((p) => p?.peakIsolateBytes ?? 0)),
      workerHeapUsedPeak: Math.max(0, ...probes.map((p) => p?.peakHeapUsed ?? 0)),
      workerLivePeak: Math.max(0, ...probes.map((p) => p?.peakLiveBytes ?? 0)),
      probes,
      peakSource: peaks[0]?.peakSource ?? 'sampled',
      exportMs: runs.map((r) => r.ms),
    },
  };
}

/** Writes the NDJSON of `patients` generated patients to `file`; answers its resource count. */
export async function writeNdjson(file: string, patients: number, seed: number): Promise<number> {
  const out = fs.createWriteStream(file);
  let count = 0;
  for (const resource of generatePatients(patients, seed)) {
    if (!out.write(`${JSON.stringify(resource)}\n`))
      await new Promise<void>((resolve) => out.once('drain', () => resolve()));
    count++;
  }
  await new Promise<void>((resolve, reject) =>
    out.end((error?: Error | null) => (error ? reject(error) : resolve())),
  );
  return count;
}

/** Runs every measurement once (each timing `reps` times) and answers the figures. */
export async function runBenchmark(options: BenchOptions): Promise<BenchResults> {
  const started = Date.now();
  const work = fs.mkdtempSync(path.join(options.workDir, 'fpk-bench-'));
  const figures: Figure[] = [];
  const samples: Record<string, unknown> = {};
  const add = (figure: Figure): void => {
    figures.push(roundFigure(figure));
  };
  const log = options.log;
  let store: StoreKind = options.store;
  let workerExports = false;
  try {
    // ---- Main dataset: load, exports, baseline, group export, downloads, uploads, Synthea, SCIM.
    const exportDir = path.join(work, 'main-exports');
    const probeDir = path.join(work, 'probes');
    fs.mkdirSync(probeDir);
    const server = await startServer({
      store: options.store,
      dir: path.join(work, 'main-store'),
      exportDir,
      probeDir,
      ...(options.durability ? { durability: options.durability } : {}),
      ...(options.probeGc ? { probeGc: true } : {}),
      ...(options.validator ? { validator: options.validator } : {}),
      ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
      ...(options.store === 'postgres' ? { exportFiles: 'database' as const } : {}),
      ...(options.profileDir ? { profileDir: options.profileDir } : {}),
    });
    let main: Awaited<ReturnType<typeof loadAndExport>>;
    try {
      store = server.info.store;
      workerExports = server.info.workerExports;
      const fhirBase = `${server.info.origin}/fhir/R4`;
      main = await loadAndExport(server, options, options.patients, options.reps, exportDir);
      const resources = main.memory.resources;
      add({ key: 'dataset.resources', label: 'Dataset: resources (N)', value: resources, unit: 'resources' });
      add({
        key: 'load.storage.rate',
        label: 'Load through storage.writeResources (1000/batch)',
        value: resources / (main.loadMs / 1000),
        unit: 'resources/s',
      });

      // Baseline: copy the first export's own files, side by side with the exports' timings.
      const first = main.runs[0]!;
      // Files in the database: downloaded once to where the baselines read them.
      const filesInDatabase = store === 'postgres';
      if (filesInDatabase) await saveExportFiles(fhirBase, main.token, first);
      const copyFile: number[] = [];
      const streamed: number[] = [];
      for (let rep = 0; rep < options.reps; rep++) {
        copyFile.push(await copyWithCopyFile(first.files, path.join(work, 'copy')));
        streamed.push(await copyWithStreams(first.files, path.join(work, 'copy')));
      }
      const exportMs = median(main.runs.map((r) => r.ms));
      const baselineMs = median(streamed);
      samples.export = {
        resources: first.resources,
        systemMs: main.runs.map((r) => r.ms),
        copyFileMs: copyFile,
        streamCopyMs: streamed,
      };
      add({ key: 'export.bytes', label: 'Exported NDJSON bytes', value: first.bytes / MB, unit: 'MiB' });
      add({
        key: 'baseline.copyFile.ms',
        label: 'Baseline: fs.copyFile of those bytes',
        value: median(copyFile),
        unit: 'ms',
      });
      add({
        key: 'baseline.stream.ms',
        label: 'Baseline: streamed read/write copy (the ratio base)',
        value: baselineMs,
        unit: 'ms',
      });
      add({
        key: 'baseline.stream.throughput',
        label: 'Baseline: streamed copy throughput',
        value: first.bytes / MB / (baselineMs / 1000),
        unit: 'MiB/s',
      });
      add({
        key: 'export.system.ms',
        label: 'System export over HTTP, kick-off to manifest (poll every elapsed/10, 1–20 ms)',
        value: exportMs,
        unit: 'ms',
      });
      add({
        key: 'export.system.rate',
        label: 'System export throughput',
        value: first.resources / (exportMs / 1000),
        unit: 'resources/s',
      });
      add({
        key: 'export.system.ratio',
        label: 'System export / streamed copy',
        value: exportMs / baselineMs,
        unit: 'x',
        target: '<= 3 (at 1,000,000 resources)',
        pass: exportMs / baselineMs <= 3,
      });
      add({
        key: 'export.system.ratioCopyFile',
        label: 'System export / fs.copyFile',
        value: exportMs / median(copyFile),
        unit: 'x',
      });
      if (store === 'postgres') {
        // The database's own floor: COPY of the same rows to files, side by side with the exports.
        const copies: { ms: number; rows: number; bytes: number }[] = [];
        for (let rep = 0; rep < options.reps; rep++) {
          log(`COPY TO STDOUT baseline ${rep + 1}/${options.reps}`);
          copies.push(
            await server.call('pgCopy', {
              projectId: main.projectId,
              types: first.types,
              dir: path.join(work, 'pg-copy'),
            }),
          );
        }
        const copyMs = median(copies.map((c) => c.ms));
        const rows = copies[0]!.rows;
        samples.pgCopy = copies;
        if (rows !== first.resources) log(`warning: COPY wrote ${rows} rows, the export ${first.resources}`);
        add({
          key: 'baseline.pgCopy.ms',
          label: `Baseline: COPY (SELECT body …) TO STDOUT of the same ${rows} rows, to files`,
          value: copyMs,
          unit: 'ms',
        });
        add({
          key: 'baseline.pgCopy.rate',
          label: 'Baseline: COPY TO STDOUT throughput',
          value: rows / (copyMs / 1000),
          unit: 'resources/s',
        });
        add({
          key: 'export.system.overPgCopy',
          label: 'System export (files in the database), kick-off to manifest / COPY TO STDOUT',
          value: exportMs / copyMs,
          unit: 'x',
          target: '<= 2',
          pass: exportMs / copyMs <= 2,
        });
      }

      // Group export of 1% of the patients.
      const group = await server.call('createGroup', {
        projectId: main.projectId,
        percent: options.groupPercent ?? 1,
      });
      const groupRuns: ExportRun[] = [];
      for (let rep = 0; rep < options.fastReps; rep++) {
        log(`group export ${rep + 1}/${options.fastReps} (${group.members} patients)`);
        const run = await runHttpExport({
          fhirBase,
          token: main.token,
          path: `/Group/${group.groupId}/$export`,
          ...exportFilesOf(server, main.projectId, exportDir),
        });
        groupRuns.push(run);
        await deleteExport(run, main.token);
      }
      const groupMs = median(groupRuns.map((r) => r.ms));
      samples.groupExportMs = groupRuns.map((r) => r.ms);
      add({
        key: 'export.group.members',
        label: `Group export: member patients (${options.groupPercent ?? 1}%)`,
        value: group.members,
        unit: 'patients',
      });
      add({ key: 'export.group.ms', label: 'Group export over HTTP', value: groupMs, unit: 'ms' });
      add({
        key: 'export.group.ratio',
        label: 'Group export / system export',
        value: groupMs / exportMs,
        unit: 'x',
        target: '<= 0.05',
        pass: groupMs / exportMs <= 0.05,
      });

      // The fixed cost of any export job: one that selects nothing (no Device in the dataset).
      const floorRuns: ExportRun[] = [];
      for (let rep = 0; rep < options.fastReps; rep++) {
        const run = await runHttpExport({
          fhirBase,
          token: main.token,
          path: '/$export?_type=Device',
          ...exportFilesOf(server, main.projectId, exportDir),
        });
        floorRuns.push(run);
        await deleteExport(run, main.token);
      }
      samples.floorExport = floorRuns.map((r) => ({ ms: r.ms, kickoffMs: r.kickoffMs }));
      samples.groupKickoffMs = groupRuns.map((r) => r.kickoffMs);
      samples.systemKickoffMs = main.runs.map((r) => r.kickoffMs);
      add({
        key: 'export.group.kickoffMs',
        label: 'Group export: kick-off answer time',
        value: median(groupRuns.map((r) => r.kickoffMs)),
        unit: 'ms',
      });
      add({
        key: 'export.floor.ms',
        label: 'Export of nothing (_type=Device): the per-job fixed cost',
        value: median(floorRuns.map((r) => r.ms)),
        unit: 'ms',
      });

      // Downloads: the largest file, through the download handler and through plain Node.
      const largest = [...first.files].sort((a, b) => fs.statSync(b).size - fs.statSync(a).size)[0]!;
      const handlerUrl = `${fhirBase}/$export-file/${first.jobId}/${path.basename(largest)}`;
      const plainUrl = `${server.info.plainOrigin}/?path=${encodeURIComponent(largest)}`;
      const auth = { authorization: `Bearer ${main.token}` };
      const gzipAuth = { ...auth, 'accept-encoding': 'gzip' };
      await timedDownload(handlerUrl, auth);
      await timedDownload(plainUrl);
      if (filesInDatabase) await timedDownload(handlerUrl, gzipAuth);
      const handler: number[] = [];
      const plain: number[] = [];
      // Files in the database are kept gzip-compressed: what a client that accepts gzip waits for.
      const gzipped: number[] = [];
      let bytes = 0;
      let gzipBytes = 0;
      for (let rep = 0; rep < options.fastReps; rep++) {
        const h = await timedDownload(handlerUrl, auth);
        const p = await timedDownload(plainUrl);
        bytes = h.bytes;
        handler.push(h.ms);
        plain.push(p.ms);
        if (filesInDatabase) {
          const g = await timedDownload(handlerUrl, gzipAuth);
          gzipped.push(g.ms);
          gzipBytes = g.bytes;
        }
      }
      samples.download = {
        file: path.basename(largest),
        bytes,
        handlerMs: handler,
        plainMs: plain,
        ...(filesInDatabase ? { gzipMs: gzipped, gzipBytes } : {}),
      };
      const handlerRate = bytes / MB / (median(handler) / 1000);
      const plainRate = bytes / MB / (median(plain) / 1000);
      add({
        key: 'download.bytes',
        label: `Download: ${path.basename(largest)}`,
        value: bytes / MB,
        unit: 'MiB',
      });
      add({
        key: 'download.handler.throughput',
        label: 'Download handler (identity)',
        value: handlerRate,
        unit: 'MiB/s',
      });
      add({
        key: 'download.plain.throughput',
        label: 'Plain Node http + createReadStream',
        value: plainRate,
        unit: 'MiB/s',
      });
      add({
        key: 'download.ratio',
        label: 'Download handler / plain Node',
        value: handlerRate / plainRate,
        unit: 'x',
        target: '>= 0.8',
        pass: handlerRate / plainRate >= 0.8,
      });
      if (filesInDatabase) {
        add({
          key: 'download.gzip.bytes',
          label: 'Download with Accept-Encoding: gzip: bytes on the wire (as stored)',
          value: gzipBytes / MB,
          unit: 'MiB',
        });
        // The NDJSON's size over the gzip download's time, against the plain download of the NDJSON.
        add({
          key: 'download.gzip.ratio',
          label: 'Download handler with gzip (files in the database) / plain Node',
          value: median(plain) / median(gzipped),
          unit: 'x',
          target: '>= 0.8',
          pass: median(plain) / median(gzipped) >= 0.8,
        });
      }

      // HTTP NDJSON upload, each repetition into a fresh project, lenient and strict in turns (so
      // that a full garbage collection of a large server heap falls on either kind alike). One
      // untimed upload of each kind first: the first strict upload of a process loads the R4
      // definitions (about 0.5 s and 70 MB of heap), which no later upload pays.
      const uploadFile = path.join(work, 'upload.ndjson');
      const uploadCount = await writeNdjson(uploadFile, options.uploadPatients, options.seed + 1);
      const uploadRuns: Record<'lenient' | 'strict', number[]> = { lenient: [], strict: [] };
      for (let rep = -1; rep < options.reps; rep++) {
        for (const strict of [false, true]) {
          const kind = strict ? 'strict' : 'lenient';
          const project = await server.call('newProject', { name: `upload-${kind}-${rep}`, strict });
          log(
            rep < 0
              ? `NDJSON upload warm-up (${uploadCount} resources, ${kind})`
              : `NDJSON upload ${rep + 1}/${options.reps} (${uploadCount} resources, ${kind})`,
          );
          const result = await uploadNdjson(fhirBase, project.token, uploadFile);
          if (result.failed > 0) log(`warning: ${result.failed} lines rejected by the ${kind} upload`);
          if (rep >= 0) uploadRuns[kind].push(result.ms);
        }
      }
      for (const strict of [false, true]) {
        const ms = uploadRuns[strict ? 'strict' : 'lenient'];
        samples[strict ? 'uploadStrictMs' : 'uploadMs'] = ms;
        add({
          key: strict ? 'load.uploadStrict.rate' : 'load.upload.rate',
          label: `HTTP NDJSON upload, ${uploadCount} resources${strict ? ', strict project (R4 validation)' : ''}`,
          value: uploadCount / (median(ms) / 1000),
          unit: 'resources/s',
        });
      }
      const uploadMs = samples.uploadMs as number[];
      const uploadStrictMs = samples.uploadStrictMs as number[];
      // The floor: the same file read, each line parsed and serialised, appended with one fsync.
      const floorMs: number[] = [];
      for (let rep = 0; rep < options.reps; rep++) {
        log(`ingest floor ${rep + 1}/${options.reps}`);
        floorMs.push((await measureIngestFloor(uploadFile, path.join(work, 'floor.ndjson'))).ms);
      }
      samples.floorMs = floorMs;
      add({
        key: 'load.floor.rate',
        label: 'Floor: read the file, JSON.parse + JSON.stringify each line, append, one fsync',
        value: uploadCount / (median(floorMs) / 1000),
        unit: 'resources/s',
      });
      add({
        key: 'load.upload.floorRatio',
        label: 'Lenient NDJSON upload / floor',
        value: median(floorMs) / median(uploadMs),
        unit: 'x',
        target: '>= 0.3',
        pass: median(floorMs) / median(uploadMs) >= 0.3,
      });
      // Memory of one large upload: every file of the first export in one NDJSON file, far larger
      // than the loader's batches, into a fresh project; the server's peak RSS over its RSS before.
      const bigFile = path.join(work, 'big-upload.ndjson');
      for (const file of first.files) fs.appendFileSync(bigFile, fs.readFileSync(file));
      const bigProject = await server.call('newProject', { name: 'big-upload', strict: false });
      const beforeBig = await server.call('resetPeak', {});
      log(`large NDJSON upload (${(fs.statSync(bigFile).size / MB).toFixed(0)} MiB)`);
      const big = await uploadNdjson(fhirBase, bigProject.token, bigFile);
      const afterBig = await server.call('memory', {});
      samples.bigUpload = {
        bytes: fs.statSync(bigFile).size,
        ms: big.ms,
        before: beforeBig,
        after: afterBig,
      };
      add({
        key: 'load.bigUpload.bytes',
        label: 'Large NDJSON upload: file size (every file of one export)',
        value: fs.statSync(bigFile).size / MB,
        unit: 'MiB',
      });
      add({
        key: 'load.bigUpload.rate',
        label: 'Large NDJSON upload',
        value: first.resources / (big.ms / 1000),
        unit: 'resources/s',
      });
      add({
        key: 'load.bigUpload.rss',
        label: `Large NDJSON upload: server peak RSS over RSS before (${afterBig.peakSource})`,
        value: (afterBig.peakRss - beforeBig.rss) / MB,
        unit: 'MiB',
      });
      fs.rmSync(bigFile, { force: true });
      add({
        key: 'load.uploadStrict.ratio',
        // Strict: structure and terminology bindings; they must cost at most 30% of the throughput.
        label: 'Strict NDJSON upload (structure and bindings) / lenient upload',
        value: median(uploadMs) / median(uploadStrictMs),
        unit: 'x',
        target: '>= 0.7',
        pass: median(uploadMs) / median(uploadStrictMs) >= 0.7,
      });

      // Strict validation alone, in this process: the default validator against @medplum/core
      // alone (the validator before its fast path), on the Synthea sample when present.
      const synthea = options.synthea && fs.existsSync(options.synthea) ? options.synthea : undefined;
      const toValidate = synthea
        ? readSynthea(synthea)
        : ([...generatePatients(options.uploadPatients, options.seed + 1)] as FhirResource[]);
      log(`strict validation alone (${synthea ? 'Synthea sample' : 'generated data'})`);
      const validation = await measureValidation(toValidate, options.reps);
      if (validation.invalid > 0) log(`warning: ${validation.invalid} resources failed validation`);
      samples.validation = validation;
      const source = `${validation.resources} ${synthea ? 'Synthea' : 'generated'} resources`;
      add({
        key: 'validation.reference.rate',
        label: `Strict validation, @medplum/core alone (${source})`,
        value: rate(validation.resources, validation.referenceMs),
        unit: 'resources/s',
      });
      add({
        key: 'validation.default.rate',
        label: 'Strict validation, default validator (same resources)',
        value: rate(validation.resources, validation.defaultMs),
        unit: 'resources/s',
      });
      add({
        key: 'validation.speedup',
        label: 'Strict validation: default / @medplum/core alone',
        value: median(validation.referenceMs) / median(validation.defaultMs),
        unit: 'x',
      });
      add({
        key: 'validation.parseRatio',
        label: 'Strict validation time / JSON.parse time (same resources)',
        value: median(validation.defaultMs) / median(validation.parseMs),
        unit: 'x',
      });

      // The Synthea sample, when present.
      if (options.synthea && fs.existsSync(options.synthea)) {
        const project = await server.call('newProject', { name: 'synthea', strict: false });
        log('loading the Synthea sample');
        const load = await server.call('loadSynthea', {
          projectId: project.projectId,
          dir: options.synthea,
          batchSize: 1000,
        });
        const ms: number[] = [];
        let exported = 0;
        let exportedBytes = 0;
        for (let rep = 0; rep < options.reps; rep++) {
          log(`Synthea system export ${rep + 1}/${options.reps}`);
          const run = await runHttpExport({
            fhirBase,
            token: project.token,
            path: '/$export',
            ...exportFilesOf(server, project.projectId, exportDir),
          });
          ms.push(run.ms);
          exported = run.resources;
          exportedBytes = run.bytes;
          await deleteExport(run, project.token);
        }
        samples.synthea = { loadMs: load.ms, exportMs: ms };
        add({
          key: 'synthea.resources',
          label: 'Synthea sample: resources',
          value: load.resources,
          unit: 'resources',
        });
        add({
          key: 'synthea.load.rate',
          label: 'Synthea: load through storage API',
          value: load.resources / (load.ms / 1000),
          unit: 'resources/s',
        });
        add({
          key: 'synthea.export.bytes',
          label: 'Synthea: exported NDJSON bytes',
          value: exportedBytes / MB,
          unit: 'MiB',
        });
        add({
          key: 'synthea.export.ms',
          label: 'Synthea: system export over HTTP',
          value: median(ms),
          unit: 'ms',
        });
        add({
          key: 'synthea.export.rate',
          label: 'Synthea: system export throughput',
          value: exported / (median(ms) / 1000),
          unit: 'resources/s',
        });
      }

      // The Synthea bundles as a client loads them: transaction Bundles over HTTP, strict project,
      // one request at a time and with a few in flight, taking turns in each repetition.
      if (options.synthea && fs.existsSync(options.synthea)) {
        const concurrency = options.txnConcurrency ?? 4;
        const ms: number[] = [];
        const concurrentMs: number[] = [];
        let posted = 0;
        for (let rep = 0; rep < options.reps; rep++) {
          const order = rep % 2 === 0 ? [1, concurrency] : [concurrency, 1];
          for (const inFlight of order) {
            const project = await server.call('newProject', {
              name: `synthea-tx-${rep}-${inFlight}`,
              strict: true,
            });
            log(
              `Synthea transaction Bundles over HTTP ${rep + 1}/${options.reps} (strict project, ${inFlight} in flight)`,
            );
            const run = await postBundles(fhirBase, project.token, options.synthea, inFlight);
            (inFlight === 1 ? ms : concurrentMs).push(run.ms);
            posted = run.resources;
          }
        }
        samples.syntheaTransactionMs = ms;
        samples.syntheaConcurrentTransactionMs = concurrentMs;
        add({
          key: 'synthea.transactions.rate',
          label: `Synthea: ${posted} resources as transaction Bundles over HTTP, strict project`,
          value: posted / (median(ms) / 1000),
          unit: 'resources/s',
        });
        add({
          key: 'synthea.transactions.concurrent.rate',
          label: `The same, ${concurrency} patient bundles in flight`,
          value: posted / (median(concurrentMs) / 1000),
          unit: 'resources/s',
        });
      }

      // SCIM at scale.
      if (options.scimUsers > 0) {
        const project = await server.call('newProject', { name: 'scim', strict: false });
        log(`loading ${options.scimUsers} SCIM users through the storage API`);
        const load = await server.call('loadUsers', {
          projectId: project.projectId,
          count: options.scimUsers,
          batchSize: 1000,
        });
        log('SCIM latencies');
        const scim: ScimFigures = await measureScim({
          scimBase: `${server.info.origin}/scim/v2`,
          token: project.token,
          users: options.scimUsers,
          ...options.scimRequests,
        });
        samples.scim = { ...scim, loadMs: load.ms };
        add({ key: 'scim.users', label: 'SCIM: users in the project', value: scim.users, unit: 'users' });
        add({
          key: 'scim.load.rate',
          label: 'SCIM: user load through storage transactions',
          value: load.resources / (load.ms / 1000),
          unit: 'users/s',
        });
        const latency = (kind: 'lookup' | 'create' | 'patch', label: string, target?: number) => {
          const f = scim[kind];
          add({
            key: `scim.${kind}.median`,
            label: `SCIM ${label}: median (${f.count} requests)`,
            value: f.medianMs,
            unit: 'ms',
            ...(target !== undefined ? { target: `< ${target}`, pass: f.medianMs < target } : {}),
          });
          add({ key: `scim.${kind}.p99`, label: `SCIM ${label}: p99`, value: f.p99Ms, unit: 'ms' });
        };
        latency('lookup', 'filter=userName eq', 5);
        latency('create', 'POST /Users', 10);
        latency('patch', 'PATCH /Users/{id}');

        log('SCIM list pages: a walk of every page of 100, then pages at random startIndexes');
        const pages = await measureScimPages({
          scimBase: `${server.info.origin}/scim/v2`,
          token: project.token,
          users: options.scimUsers,
        });
        samples.scimPages = pages;
        add({
          key: 'scim.page.median',
          label: `SCIM GET /Users?startIndex&count=100, walking every page: median (${pages.walk.pages} pages)`,
          value: pages.walk.medianMs,
          unit: 'ms',
          target: '≤ 20',
          pass: pages.walk.medianMs <= 20,
        });
        add({
          key: 'scim.page.p99',
          label: 'SCIM page of 100 in the walk: p99',
          value: pages.walk.p99Ms,
          unit: 'ms',
        });
        add({
          key: 'scim.walk.ms',
          label: `SCIM walk of all ${pages.users} users, pages of 100`,
          value: pages.walk.totalMs,
          unit: 'ms',
        });
        add({
          key: 'scim.walk.lastOverFirst',
          label: 'SCIM walk: median page of its last tenth / of its first tenth (about 1: a walk is O(n))',
          value: pages.lastTenthMedianMs / pages.firstTenthMedianMs,
          unit: 'x',
        });
        add({
          key: 'scim.page.jump.median',
          label: `SCIM page of 100 at a random startIndex no walk led to: median (${pages.jump.count} pages)`,
          value: pages.jump.medianMs,
          unit: 'ms',
        });

        // The same empty export as above, now that the store holds the SCIM users: job records
        // share the store's directory with users' memberships.
        const floorAfter: number[] = [];
        for (let rep = 0; rep < options.fastReps; rep++) {
          const run = await runHttpExport({
            fhirBase,
            token: main.token,
            path: '/$export?_type=Device',
            ...exportFilesOf(server, main.projectId, exportDir),
          });
          floorAfter.push(run.ms);
          await deleteExport(run, main.token);
        }
        samples.floorExportWithUsersMs = floorAfter;
        add({
          key: 'export.floorWithUsers.ms',
          label: `Export of nothing, with the ${options.scimUsers} SCIM users in the store`,
          value: median(floorAfter),
          unit: 'ms',
        });
      }
    } finally {
      await server.close();
    }

    // ---- $import against the NDJSON upload of the same files, on a server process of its own.
    if ((options.importResources ?? 0) > 0) await importSection(options, work, add, samples);

    // ---- System export with auditing on (with its journal) and off, side by side: the main store
    // reopened by a server of each kind in turn (the file store only: a PostgreSQL server process
    // works in a schema of its own, a memory store ends with its process).
    if ((options.auditRequests ?? 0) > 0 && store === 'file') {
      const ms: Record<'on' | 'off', number[]> = { on: [], off: [] };
      for (let rep = 0; rep < options.reps; rep++) {
        for (const side of rep % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
          const sideExports = path.join(work, `audit-export-${side}`);
          const reopened = await startServer({
            store,
            dir: path.join(work, 'main-store'),
            exportDir: sideExports,
            probeDir,
            ...(options.durability ? { durability: options.durability } : {}),
            ...(side === 'on'
              ? { auditJournalDir: path.join(work, 'audit-export-journal') }
              : { audit: false }),
          });
          try {
            const handle = await reopened.call('projectClient', { projectId: main.projectId });
            const fhirBase = `${reopened.info.origin}/fhir/R4`;
            // A small export first starts the worker thread, as in the main runs.
            const warmUp = await runHttpExport({
              fhirBase,
              token: handle.token,
              path: '/$export?_type=AllergyIntolerance',
              exportDir: sideExports,
            });
            await deleteExport(warmUp, handle.token);
            // Both sides wait out the trail's flush interval (1 s with a journal), so that the
            // warm-up's events are not written during the timed export (a few events, but a
            // group commit with its fsync, against an export of 10k resources in ~150 ms).
            await sleep(1100);
            log(`system export with audit ${side} ${rep + 1}/${options.reps}`);
            const run = await runHttpExport({
              fhirBase,
              token: handle.token,
              path: '/$export',
              exportDir: sideExports,
            });
            ms[side].push(run.ms);
            await deleteExport(run, handle.token);
          } finally {
            await reopened.close();
          }
        }
      }
      samples.auditExport = ms;
      add({
        key: 'audit.export.on.ms',
        label: `System export, audit trail on (with its journal): median of ${ms.on.length}`,
        value: median(ms.on),
        unit: 'ms',
      });
      add({
        key: 'audit.export.off.ms',
        label: `System export, audit trail off: median of ${ms.off.length}`,
        value: median(ms.off),
        unit: 'ms',
      });
      add({
        key: 'audit.export.ratio',
        label: 'System export: audit on / off (same store, in turns)',
        value: median(ms.on) / median(ms.off),
        unit: 'x',
        target: '<= 1.10 (unchanged)',
        pass: median(ms.on) / median(ms.off) <= 1.1,
      });
    }

    // ---- Audit trail on vs off: two fresh servers alike but for auditing, timed in turns.
    const auditRequests = options.auditRequests ?? 0;
    if (auditRequests > 0) {
      const serverOptions = (name: string) => ({
        store: options.store,
        dir: path.join(work, `${name}-store`),
        exportDir: path.join(work, `${name}-exports`),
        probeDir,
        ...(options.durability ? { durability: options.durability } : {}),
        ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
      });
      // The audited server runs the durable configuration (`npm start`'s): with the journal.
      const on = await startServer({
        ...serverOptions('audit-on'),
        auditJournalDir: path.join(work, 'audit-on-journal'),
      });
      try {
        const off = await startServer({ ...serverOptions('audit-off'), audit: false });
        try {
          log(`audit on / off: ${auditRequests} SCIM creates and FHIR reads on each server, in turns`);
          // flushIntervalMs: the trail's default with a journal (docs/audit.md).
          const audit = await measureAuditOverhead({
            on,
            off,
            requests: auditRequests,
            flushIntervalMs: 1000,
          });
          samples.audit = audit;
          const pair = (key: 'scimCreate' | 'fhirRead', label: string, on: number[], off: number[]): void => {
            const [p50On, p50Off] = [median(on), median(off)];
            add({
              key: `audit.${key}.on.p50`,
              label: `${label}, audit trail on (with its journal): p50 (${on.length} requests)`,
              value: p50On,
              unit: 'ms',
            });
            add({
              key: `audit.${key}.off.p50`,
              label: `${label}, audit trail off: p50 (${off.length} requests)`,
              value: p50Off,
              unit: 'ms',
            });
            add({
              key: `audit.${key}.ratio`,
              label: `${label}: p50 audit on / off (same run, in turns)`,
              value: p50On / p50Off,
              unit: 'x',
              target: '<= 1.10',
              pass: p50On / p50Off <= 1.1,
            });
            add({
              key: `audit.${key}.roundRatio`,
              label: `${label}: median over the ${audit.rounds} rounds of p50 on / off`,
              value: medianRoundRatio(on, off, audit.rounds),
              unit: 'x',
            });
          };
          pair('scimCreate', 'SCIM POST /Users', audit.on.scimCreateMs, audit.off.scimCreateMs);
          pair('fhirRead', 'FHIR GET Patient/{id}', audit.on.fhirReadMs, audit.off.fhirReadMs);
        } finally {
          await off.close();
        }
      } finally {
        await on.close();
      }
    }

    // ---- Search (issue 30): the searches on an indexed store of this kind, in this process.
    if (options.search !== false) {
      const found = await measureStoreSearch({
        store,
        patients: options.patients,
        seed: options.seed,
        reps: 9,
        ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
        workDir: work,
        log,
      });
      samples.search = found;
      for (const s of found.searches) {
        add({
          key: `search.${s.key}.median`,
          label: `Search ${s.label}, median of 9: ${s.query} (${s.total} matches)`,
          value: s.medianMs,
          unit: 'ms',
          target: `<= ${s.targetMs} (at 1,000,000 resources)`,
          pass: s.medianMs <= s.targetMs,
        });
      }
      add({
        key: 'search.bytesPerResource',
        label:
          found.sizeKind === 'heap'
            ? 'Search: heap per resource of the loaded store with indexer r4SearchIndexer'
            : 'Search: index tables per resource',
        value: found.bytesPerResource,
        unit: 'bytes',
      });
      add({
        key: 'search.load.rate',
        label: 'Search: load of the indexed store through writeResources, a patient a batch',
        value: found.resources / (found.loadMs / 1000),
        unit: 'resources/s',
      });
    }

    // ---- Memory: the same load + export in a fresh server process at the other size.
    const memory = [main.memory];
    if (options.memoryFactor > 0) {
      const otherPatients = Math.max(1, Math.round(options.patients * options.memoryFactor));
      const otherExports = path.join(work, 'other-exports');
      const other = await startServer({
        store: options.store,
        dir: path.join(work, 'other-store'),
        exportDir: otherExports,
        probeDir,
        ...(options.durability ? { durability: options.durability } : {}),
        ...(options.probeGc ? { probeGc: true } : {}),
        ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
        ...(options.store === 'postgres' ? { exportFiles: 'database' as const } : {}),
      });
      try {
        memory.push(
          (await loadAndExport(other, options, otherPatients, options.otherReps, otherExports)).memory,
        );
      } finally {
        await other.close();
      }
      memory.sort((a, b) => a.patients - b.patients);
    }
    samples.memory = memory;
    // Keys name the smaller size N and the 5x larger one 5N; with --large the labels say N/5 and N.
    const names = memory.length === 2 ? ['N', '5N'] : ['N'];
    const shown = options.memoryFactor < 1 ? ['N/5', 'N'] : names;
    const pair = `${shown[1]} / ${shown[0]}`;
    memory.forEach((m, i) => {
      const at = `${shown[i]} = ${m.resources} resources`;
      add({
        key: `memory.${names[i]}.resources`,
        label: `Memory at ${shown[i]}: resources`,
        value: m.resources,
        unit: 'resources',
      });
      add({
        key: `memory.${names[i]}.workerIsolatePeak`,
        label: `Export worker isolate peak (heap + external), ${at}`,
        value: m.workerIsolatePeak / MB,
        unit: 'MiB',
      });
      add({
        key: `memory.${names[i]}.workerHeapUsedPeak`,
        label: `Export worker heap used peak, ${at}`,
        value: m.workerHeapUsedPeak / MB,
        unit: 'MiB',
      });
      if (options.probeGc) {
        add({
          key: `memory.${names[i]}.workerLivePeak`,
          label: `Export worker live memory peak (heap used + external after a forced GC), ${at}`,
          value: m.workerLivePeak / MB,
          unit: 'MiB',
        });
      }
      add({
        key: `memory.${names[i]}.exportRssIncrease`,
        label: `Server process RSS added by the export, ${at}`,
        value: m.exportRssIncrease / MB,
        unit: 'MiB',
      });
      add({
        key: `memory.${names[i]}.exportPeakRss`,
        label: `Server process peak RSS during the export, ${at}`,
        value: m.exportPeakRss / MB,
        unit: 'MiB',
      });
      add({
        key: `memory.${names[i]}.rssAfterLoad`,
        label: `Server process RSS before the export (store loaded, worker started), ${at}`,
        value: m.rssAfterLoad / MB,
        unit: 'MiB',
      });
      add({
        key: `memory.${names[i]}.heapUsedAfterLoad`,
        label: `Server main-thread heap used before the export (after GC), ${at}`,
        value: m.heapUsedAfterLoad / MB,
        unit: 'MiB',
      });
      add({
        key: `memory.${names[i]}.lifetimePeakRss`,
        label: `Server process peak RSS during the load, ${at}`,
        value: m.lifetimePeakRss / MB,
        unit: 'MiB',
      });
      add({
        key: `memory.${names[i]}.exportRate`,
        label: `System export throughput, ${at}`,
        value: m.resources / (median(m.exportMs) / 1000),
        unit: 'resources/s',
      });
    });
    if (memory.length === 2) {
      const [small, big] = memory as [MemoryFigures, MemoryFigures];
      const workerRatio =
        small.workerIsolatePeak > 0 ? big.workerIsolatePeak / small.workerIsolatePeak : Number.NaN;
      add({
        key: 'memory.workerRatio',
        label: `Export worker isolate peak, ${pair}`,
        value: workerRatio,
        unit: 'x',
        target: '<= 1.2',
        pass: workerRatio <= 1.2,
      });
      if (options.probeGc) {
        const liveRatio = ratio(big.workerLivePeak, small.workerLivePeak);
        add({
          key: 'memory.workerLiveRatio',
          label: `Export worker live memory peak, ${pair}`,
          value: liveRatio,
          unit: 'x',
          target: '<= 1.2',
          pass: liveRatio <= 1.2,
        });
      }
      // RSS moves by several MiB on its own (allocator, GC timing): increases under 16 MiB count as
      // 16 MiB, so that a near-zero figure at N does not turn noise into a huge (or NaN) ratio.
      const RSS_FLOOR = 16 * MB;
      const rssRatio = ratio(
        Math.max(big.exportRssIncrease, RSS_FLOOR),
        Math.max(small.exportRssIncrease, RSS_FLOOR),
      );
      add({
        key: 'memory.exportRssRatio',
        label: `Server RSS added by the export (16 MiB floor), ${pair}`,
        value: rssRatio,
        unit: 'x',
        target: '<= 1.2',
        pass: rssRatio <= 1.2,
      });
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return { meta: runMeta(options, started, store, workerExports), figures, samples };
}

/** Runs the `$import` section (`measure-import.ts`) into `work`, adding its figures and samples. */
async function importSection(
  options: BenchOptions,
  work: string,
  add: (figure: Figure) => void,
  samples: Record<string, unknown>,
): Promise<void> {
  const found = await measureImport({
    store: options.store,
    ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
    ...(options.durability ? { durability: options.durability } : {}),
    resources: options.importResources ?? 0,
    synthea: options.synthea,
    reps: options.reps,
    memory: options.memoryFactor > 0,
    seed: options.seed,
    workDir: work,
    ...(options.profileDir ? { profileDir: options.profileDir } : {}),
    log: options.log,
  });
  for (const figure of found.figures) add(figure);
  samples.import = found.samples;
}

/** The `$import` section alone (`npm run bench -- --import-only`). */
export async function runImportBenchmark(options: BenchOptions): Promise<BenchResults> {
  const started = Date.now();
  const work = fs.mkdtempSync(path.join(options.workDir, 'fpk-bench-'));
  const figures: Figure[] = [];
  const samples: Record<string, unknown> = {};
  try {
    await importSection(options, work, (figure) => figures.push(roundFigure(figure)), samples);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return { meta: runMeta(options, started, options.store, false), figures, samples };
}

/** A figure with its value rounded for the tables (3 decimals under 10, else 1). */
function roundFigure(figure: Figure): Figure {
  return { ...figure, value: round(figure.value, figure.value !== 0 && Math.abs(figure.value) < 10 ? 3 : 1) };
}

/** The `meta` of a run of `options` begun at `started` (epoch ms). */
export function runMeta(
  options: BenchOptions,
  started: number,
  store: StoreKind,
  workerExports: boolean,
): BenchResults['meta'] {
  const { log: _log, ...plainOptions } = options;
  return {
    date: new Date(started).toISOString(),
    node: process.version,
    platform: `${os.type()} ${os.release()} ${os.arch()}`,
    cpus: os.availableParallelism(),
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    totalMemory: os.totalmem(),
    store,
    durability: options.durability ?? 'fsync',
    workerExports,
    patients: options.patients,
    resources: options.patients * RESOURCES_PER_PATIENT,
    options: plainOptions,
    durationMs: Date.now() - started,
  };
}
