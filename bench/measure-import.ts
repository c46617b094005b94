/**
 * The `$import` section of `npm run bench`: the Synthea sample and generated resources, each written
 * as one NDJSON file per type (as an export writes them) and served with a Bulk Data manifest by a
 * plain Node server in the benchmark process, then imported by `POST [base]/$import` (kick-off to
 * the completed status) and uploaded as NDJSON (the same files, a request per file in turn), in turns,
 * each repetition into a fresh lenient project of one fresh server process. Memory: the server's
 * peak RSS over its RSS before, for an import of N/5 and of N resources.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { FhirResource } from '../src/storage/types.js';
import type { Figure } from './benchmark.js';
import { generatePatients, RESOURCES_PER_PATIENT } from './dataset.js';
import { bearer, expectJson, fetchJson } from './http-json.js';
import { uploadNdjson } from './measure-upload.js';
import type { MemorySample, StoreKind } from './server-protocol.js';
import { startServer, type ServerProcess } from './server-process.js';
import { median, now, ratio, sleep } from './stats.js';
import { readSynthea } from './synthea.js';

/** What the import section runs. */
export interface ImportBenchOptions {
  store: StoreKind;
  databaseUrl?: string;
  durability?: 'fsync' | 'write';
  /** Generated resources imported in each timed repetition (rounded to whole patients). */
  resources: number;
  /** The Synthea bundle directory, or `false` to skip the sample. */
  synthea: string | false;
  /** Timed repetitions of each side (import, upload), in turns. */
  reps: number;
  /** Also import N/5 generated resources once, for the memory ratio. */
  memory: boolean;
  seed: number;
  /** A fresh directory of the caller's, for the NDJSON files and the store. */
  workDir: string;
  profileDir?: string;
  log: (line: string) => void;
}

/** NDJSON files of one dataset, one per resource type. */
interface Dataset {
  name: string;
  label: string;
  files: { type: string; file: string }[];
  resources: number;
}

/** One import or upload: its time and what it did to the server's memory. */
interface SideRun {
  ms: number;
  /** Peak RSS during the run over RSS before it (after a GC), bytes. */
  rssIncrease: number;
  /** Heap used after the run and a GC over heap used before (what the store keeps), bytes. */
  heapRetained: number;
  loaded: number;
  failed: number;
}

const MB = 1024 * 1024;
/** RSS moves by several MiB on its own: increases under this count as this (as the export's). */
const RSS_FLOOR = 16 * MB;
/** Lines buffered per type before a write. */
const FLUSH_CHARS = 1 << 20;

/** Writes `resources` as one NDJSON file per type under `dir`. */
export function writeTypeFiles(
  dir: string,
  resources: Iterable<FhirResource>,
): { files: { type: string; file: string }[]; resources: number } {
  fs.mkdirSync(dir, { recursive: true });
  const open = new Map<string, { fd: number; text: string; file: string }>();
  let count = 0;
  for (const resource of resources) {
    let out = open.get(resource.resourceType);
    if (!out) {
      const file = path.join(dir, `${resource.resourceType}.ndjson`);
      out = { fd: fs.openSync(file, 'w'), text: '', file };
      open.set(resource.resourceType, out);
    }
    out.text += `${JSON.stringify(resource)}\n`;
    if (out.text.length >= FLUSH_CHARS) {
      fs.writeSync(out.fd, out.text);
      out.text = '';
    }
    count++;
  }
  for (const out of open.values()) {
    fs.writeSync(out.fd, out.text);
    fs.closeSync(out.fd);
  }
  const files = [...open.entries()]
    .map(([type, { file }]) => ({ type, file }))
    .sort((a, b) => (a.type < b.type ? -1 : 1));
  return { files, resources: count };
}

/**
 * The source server: `GET /fhir/$export-status/{dataset}` answers a Bulk Data manifest of the
 * dataset's files, `GET /files/{dataset}/{file}` streams one. Plain `http` and `fs`, so that what is
 * timed is the import, not the source.
 */
async function sourceServer(
  datasets: () => Map<string, Dataset>,
): Promise<{ origin: string; close: () => Promise<void> }> {
  let origin = '';
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const manifest = /^\/fhir\/\$export-status\/([^/]+)$/.exec(decodeURIComponent(url.pathname));
    if (manifest) {
      const dataset = datasets().get(manifest[1]!);
      if (!dataset) return void res.writeHead(404).end();
      const body = JSON.stringify({
        transactionTime: new Date().toISOString(),
        request: `${origin}/fhir/$export`,
        requiresAccessToken: false,
        output: dataset.files.map(({ type, file }) => ({
          type,
          url: `${origin}/files/${dataset.name}/${path.basename(file)}`,
        })),
        error: [],
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      return;
    }
    const file = /^\/files\/([^/]+)\/([^/]+)$/.exec(url.pathname);
    const found = file
      ? datasets()
          .get(file[1]!)
          ?.files.find((f) => path.basename(f.file) === file[2])
      : undefined;
    if (!found) return void res.writeHead(404).end();
    res.writeHead(200, {
      'content-type': 'application/fhir+ndjson',
      'content-length': fs.statSync(found.file).size,
    });
    pipeline(fs.createReadStream(found.file, { highWaterMark: 1 << 20 }), res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

interface ImportManifest {
  output: { type: string; count: number }[];
  error: { count: number }[];
}

/**
 * `POST {fhirBase}/$import` of a manifest URL, then the status polled (every tenth of the time
 * elapsed, 1–20 ms, as the exports are) until it answers 200: the time from kick-off to that answer.
 */
export async function runHttpImport(
  fhirBase: string,
  token: string,
  manifestUrl: string,
): Promise<{ ms: number; loaded: number; failed: number }> {
  const headers = bearer(token, {
    accept: 'application/fhir+json',
    prefer: 'respond-async',
    'content-type': 'application/fhir+json',
  });
  const body = JSON.stringify({
    resourceType: 'Parameters',
    parameter: [{ name: 'manifestUrl', valueUri: manifestUrl }],
  });
  const start = now();
  const kickoff = await expectJson(202, `${fhirBase}/$import`, { method: 'POST', headers, body });
  const statusUrl = kickoff.headers.get('content-location');
  if (!statusUrl) throw new Error('$import kick-off answered no Content-Location');
  for (;;) {
    const status = await fetchJson(statusUrl, { headers: bearer(token) });
    if (status.status === 200) {
      const ms = now() - start;
      const manifest = status.body as ImportManifest;
      return {
        ms,
        loaded: manifest.output.reduce((sum, o) => sum + o.count, 0),
        failed: manifest.error.reduce((sum, e) => sum + e.count, 0),
      };
    }
    if (status.status !== 202)
      throw new Error(`$import status ${status.status}: ${JSON.stringify(status.body).slice(0, 500)}`);
    await sleep(Math.min(20, Math.max(1, (now() - start) / 10)));
  }
}

/**
 * Uploads `files` one request each, one after the other, as the import loads them. In one multipart
 * request the upload starts loading a file while the last batch of the one before is still being
 * written: on PostgreSQL those writers wait on the project's clock lock, and on a busy machine some
 * waited past `lock_timeout` and had their batch written again line by line (a 50k upload took 24
 * s to 111 s).
 */
async function uploadInTurn(
  fhirBase: string,
  token: string,
  files: string[],
): Promise<{ ms: number; failed: number }> {
  let ms = 0;
  let failed = 0;
  for (const file of files) {
    const run = await uploadNdjson(fhirBase, token, file);
    ms += run.ms;
    failed += run.failed;
  }
  return { ms, failed };
}

/** One import or upload of `dataset` into a fresh lenient project, with the server's memory around it. */
async function runSide(
  server: ServerProcess,
  source: string,
  dataset: Dataset,
  side: 'import' | 'upload',
  name: string,
): Promise<SideRun> {
  const fhirBase = `${server.info.origin}/fhir/R4`;
  const project = await server.call('newProject', { name, strict: false });
  const before: MemorySample = await server.call('resetPeak', {});
  const run =
    side === 'import'
      ? await runHttpImport(fhirBase, project.token, `${source}/fhir/$export-status/${dataset.name}`)
      : await uploadInTurn(
          fhirBase,
          project.token,
          dataset.files.map((f) => f.file),
        ).then((r) => ({ ...r, loaded: dataset.resources - r.failed }));
  const during = await server.call('memory', {});
  const after = await server.call('resetPeak', {});
  return {
    ms: run.ms,
    rssIncrease: during.peakRss - before.rss,
    heapRetained: after.heapUsed - before.heapUsed,
    loaded: run.loaded,
    failed: run.failed,
  };
}

/** Imports and uploads `dataset` `reps` times each, in turns (the first side alternating). */
async function importAndUpload(
  server: ServerProcess,
  source: string,
  dataset: Dataset,
  reps: number,
  log: (line: string) => void,
): Promise<Record<'import' | 'upload', SideRun[]>> {
  const runs: Record<'import' | 'upload', SideRun[]> = { import: [], upload: [] };
  for (let rep = 0; rep < reps; rep++) {
    for (const side of rep % 2 === 0 ? (['import', 'upload'] as const) : (['upload', 'import'] as const)) {
      log(`${dataset.label}: ${side} ${rep + 1}/${reps} (${dataset.resources} resources)`);
      const run = await runSide(server, source, dataset, side, `${side}-${dataset.name}-${rep}`);
      if (run.failed > 0 || run.loaded !== dataset.resources)
        log(`warning: ${side} loaded ${run.loaded} of ${dataset.resources}, ${run.failed} refused`);
      runs[side].push(run);
    }
  }
  return runs;
}

/** A fresh server process for the section, its store under `workDir/{name}-store`. */
function importServer(options: ImportBenchOptions, name: string, profile: boolean): Promise<ServerProcess> {
  const dir = (what: string) => path.join(options.workDir, `${name}-${what}`);
  fs.mkdirSync(dir('probes'), { recursive: true });
  return startServer({
    store: options.store,
    dir: dir('store'),
    exportDir: dir('exports'),
    probeDir: dir('probes'),
    ...(options.durability ? { durability: options.durability } : {}),
    ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
    ...(profile && options.profileDir ? { profileDir: options.profileDir } : {}),
  });
}

/**
 * Memory at two sizes: each import, and each upload, in a server process of its own after an
 * untimed one of the warm-up data, so that no earlier run's pages count for or against it.
 */
async function memoryFigures(
  options: ImportBenchOptions,
  source: string,
  warmUp: Dataset,
  small: Dataset,
  big: Dataset,
  samples: Record<string, unknown>,
): Promise<Figure[]> {
  const measured: Record<string, SideRun> = {};
  for (const dataset of [small, big]) {
    for (const side of ['import', 'upload'] as const) {
      const name = `${side}-memory-${dataset.resources}`;
      options.log(`${dataset.label}: ${side} in a fresh server process, for memory`);
      const server = await importServer(options, name, false);
      try {
        await runSide(server, source, warmUp, side, `${name}-warm-up`);
        measured[`${side}.${dataset === big ? 'big' : 'small'}`] = await runSide(
          server,
          source,
          dataset,
          side,
          name,
        );
      } finally {
        await server.close();
      }
    }
  }
  samples.memory = { small: small.resources, big: big.resources, runs: measured };
  const figures: Figure[] = [];
  for (const side of ['import', 'upload'] as const) {
    const label = side === 'import' ? '$import' : 'NDJSON upload';
    for (const [size, dataset] of [
      ['small', small],
      ['big', big],
    ] as const) {
      const run = measured[`${side}.${size}`]!;
      figures.push(
        {
          key: `import.memory.${side}.${size}.rss`,
          label: `${label} of ${dataset.resources} resources, fresh server: peak RSS over RSS before`,
          value: run.rssIncrease / MB,
          unit: 'MiB',
        },
        {
          key: `import.memory.${side}.${size}.heapRetained`,
          label: `${label} of ${dataset.resources} resources, fresh server: heap kept after a GC (the store's own)`,
          value: run.heapRetained / MB,
          unit: 'MiB',
        },
      );
    }
    const ratioOf = ratio(
      Math.max(measured[`${side}.big`]!.rssIncrease, RSS_FLOOR),
      Math.max(measured[`${side}.small`]!.rssIncrease, RSS_FLOOR),
    );
    figures.push({
      key: `import.memory.${side}.ratio`,
      label: `${label}: peak RSS over RSS before (16 MiB floor), ${big.resources} / ${small.resources} resources`,
      value: ratioOf,
      unit: 'x',
      ...(side === 'import' ? { target: '<= 1.2', pass: ratioOf <= 1.2 } : {}),
    });
  }
  return figures;
}

/** The timed imports and uploads of each dataset, in turns on one server process. */
async function timedFigures(
  options: ImportBenchOptions,
  source: string,
  datasets: Dataset[],
  warmUp: Dataset,
  samples: Record<string, unknown>,
): Promise<Figure[]> {
  const figures: Figure[] = [];
  const server = await importServer(options, 'import', true);
  try {
    // Untimed: the first import and upload of a process compile their code paths.
    await runSide(server, source, warmUp, 'import', 'import-warm-up');
    await runSide(server, source, warmUp, 'upload', 'upload-warm-up');
    const target = options.store === 'postgres' ? 10_000 : 25_000;
    for (const dataset of datasets) {
      const runs = await importAndUpload(server, source, dataset, options.reps, options.log);
      samples[dataset.name] = { resources: dataset.resources, files: dataset.files.length, ...runs };
      const importMs = median(runs.import.map((r) => r.ms));
      const uploadMs = median(runs.upload.map((r) => r.ms));
      const rate = dataset.resources / (importMs / 1000);
      const key = `import.${dataset.name === 'synthea' ? 'synthea' : 'generated'}`;
      figures.push(
        {
          key: `${key}.resources`,
          label: `${dataset.label}: resources in ${dataset.files.length} NDJSON files (one per type)`,
          value: dataset.resources,
          unit: 'resources',
        },
        {
          key: `${key}.rate`,
          label: `${dataset.label}: $import of a manifest, kick-off to completed status (median of ${options.reps})`,
          value: rate,
          unit: 'resources/s',
          target: `>= ${target.toLocaleString('en-US')}`,
          pass: rate >= target,
        },
        {
          key: `${key}.upload.rate`,
          label: `${dataset.label}: NDJSON upload of the same files, a request per file in turn (median of ${options.reps})`,
          value: dataset.resources / (uploadMs / 1000),
          unit: 'resources/s',
        },
        {
          key: `${key}.ratio`,
          label: `${dataset.label}: $import time / NDJSON upload time (same run, in turns)`,
          value: ratio(importMs, uploadMs),
          unit: 'x',
          target: '<= 1.2',
          pass: importMs / uploadMs <= 1.2,
        },
      );
    }
  } finally {
    await server.close();
  }
  return figures;
}

/** Runs the import section: the timed runs, then memory in fresh server processes. */
export async function measureImport(
  options: ImportBenchOptions,
): Promise<{ figures: Figure[]; samples: Record<string, unknown> }> {
  const { log } = options;
  const figures: Figure[] = [];
  const samples: Record<string, unknown> = {};
  const datasets = new Map<string, Dataset>();
  const add = (dataset: Dataset): Dataset => {
    datasets.set(dataset.name, dataset);
    return dataset;
  };
  const dataDir = path.join(options.workDir, 'import-sources');
  const patients = Math.max(1, Math.round(options.resources / RESOURCES_PER_PATIENT));
  const generated = (name: string, count: number, seed: number): Dataset => {
    log(`writing ${count} generated patients as NDJSON files per type`);
    const written = writeTypeFiles(
      path.join(dataDir, name),
      generatePatients(count, seed) as Iterable<FhirResource>,
    );
    return add({ name, label: `Generated (${written.resources})`, ...written });
  };
  const synthea =
    options.synthea && fs.existsSync(options.synthea)
      ? add({
          name: 'synthea',
          label: 'Synthea',
          ...writeTypeFiles(path.join(dataDir, 'synthea'), readSynthea(options.synthea)),
        })
      : undefined;
  const main = generated('generated', patients, options.seed + 2);
  const warmUp = generated('warm-up', 2, options.seed + 3);
  const small = options.memory
    ? generated('generated-small', Math.max(1, Math.round(patients / 5)), options.seed + 4)
    : undefined;

  const source = await sourceServer(() => datasets);
  try {
    const timed = [synthea, main].filter((d): d is Dataset => d !== undefined);
    figures.push(...(await timedFigures(options, source.origin, timed, warmUp, samples)));
    if (small) figures.push(...(await memoryFigures(options, source.origin, warmUp, small, main, samples)));
  } finally {
    await source.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
  return { figures, samples };
}
