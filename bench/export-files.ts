/**
 * Write and read throughput of the two export file stores, side by side in one run: a local
 * directory (`DirectoryExportFiles`) and PostgreSQL (`postgresStorage().exportFiles`).
 *
 *   FPK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
 *     node --import tsx bench/export-files.ts [--mib 64] [--reps 3]
 *
 * Each repetition writes one file of `--mib` MiB of NDJSON in 1 MiB writes (as an export worker
 * does), reads it back whole through the store's stream, then downloads it over HTTP on localhost
 * (the store's stream piped to the response, as `sendExportFile` does without gzip), and with gzip
 * as the store keeps it (`readGzip`, PostgreSQL at level 1). Medians.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream/promises';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { DirectoryExportFiles } from '../src/bulk/directory-export-files.js';
import {
  openPostgresExportFiles,
  type PostgresExportFilesOptions,
} from '../src/storage/postgres/export-files.js';
import { postgresStorage } from '../src/postgres.js';
import type { ExportFileStore, ExportFilesRef, Storage } from '../src/storage/types.js';
import { generatePatients } from './dataset.js';

const { values } = parseArgs({
  options: { mib: { type: 'string', default: '64' }, reps: { type: 'string', default: '3' } },
});
const MIB = 1024 * 1024;
const size = Number(values.mib) * MIB;
const reps = Number(values.reps);
const url = process.env.FPK_TEST_POSTGRES_URL;
if (!url) throw new Error('Set FPK_TEST_POSTGRES_URL');

// About 1 MiB of the bench's generated resources, one per line (compresses as real exports do).
const block = ((): string => {
  const lines: string[] = [];
  let bytes = 0;
  for (const resource of generatePatients(100)) {
    const line = `${JSON.stringify(resource)}\n`;
    if (bytes + line.length > MIB) break;
    lines.push(line);
    bytes += line.length;
  }
  return lines.join('');
})();

function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

interface Figures {
  write: number;
  read: number;
  download: number;
  /** NDJSON MiB/s of a download with `Accept-Encoding: gzip` as the store keeps it (0: none kept). */
  gzip: number;
}

/** MiB/s of an HTTP download of the file (identity, streamed as `sendExportFile` does). */
async function download(
  files: ExportFileStore,
  ref: ExportFilesRef,
  bytes: number,
  gzip = false,
): Promise<number> {
  const server = createServer((_req, res) => {
    const body = gzip
      ? files.readGzip!(ref, 'Observation-1.ndjson')
      : files.read(ref, 'Observation-1.ndjson');
    if (gzip) res.setHeader('content-encoding', 'gzip');
    void pipeline(body, res).catch(() => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const t = performance.now();
    // fetch inflates a gzip answer: the NDJSON bytes are counted either way.
    const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    let received = 0;
    for await (const chunk of res.body!) received += (chunk as Uint8Array).length;
    if (received !== bytes) throw new Error(`downloaded ${received} of ${bytes} bytes`);
    return bytes / MIB / ((performance.now() - t) / 1000);
  } finally {
    server.close();
  }
}

async function run(files: ExportFileStore, ref: ExportFilesRef): Promise<Figures> {
  await files.remove(ref);
  let t = performance.now();
  const file = await files.sink(ref).create('Observation-1.ndjson');
  let written = 0;
  while (written < size) {
    await file.write(block);
    written += Buffer.byteLength(block);
  }
  await file.commit();
  const write = written / MIB / ((performance.now() - t) / 1000);
  t = performance.now();
  let read = 0;
  for await (const chunk of files.read(ref, 'Observation-1.ndjson')) read += (chunk as Buffer).length;
  if (read !== written) throw new Error(`read ${read} of ${written} bytes`);
  const readRate = read / MIB / ((performance.now() - t) / 1000);
  const gzipped = (await files.gzipSize?.(ref, 'Observation-1.ndjson')) !== undefined;
  return {
    write,
    read: readRate,
    download: await download(files, ref, written),
    gzip: gzipped ? await download(files, ref, written, true) : 0,
  };
}

async function measure(name: string, files: ExportFileStore, ref: ExportFilesRef): Promise<void> {
  const runs: Figures[] = [];
  for (let i = 0; i < reps; i++) runs.push(await run(files, ref));
  const figure = (key: keyof Figures): string =>
    `${key} ${median(runs.map((r) => r[key]))
      .toFixed(0)
      .padStart(5)} MiB/s`;
  console.log(
    `${name.padEnd(12)} ${figure('write')}   ${figure('read')}   ${figure('download')}   ${figure('gzip')}   (${values.mib} MiB file, median of ${reps})`,
  );
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-bench-files-'));
const schema = `fpk_bench_files_${randomBytes(4).toString('hex')}`;
let storage: Storage | undefined;
try {
  await measure('directory', new DirectoryExportFiles(dir), { projectId: 'p', jobId: randomUUID() });
  storage = postgresStorage({ connectionString: url, schema });
  const snapshot = await storage.exportSnapshot('p');
  const job = await storage.createExportJob({
    id: randomUUID(),
    projectId: 'p',
    ownerId: 'bench',
    status: 'in-progress',
    request: 'http://bench/$export',
    transactionTime: snapshot.takenAt,
    params: {},
    snapshot,
  });
  // As an export worker opens it (its own pool), from the store's descriptor: uncompressed chunks
  // (as before migration 5) and compressed at level 1 (the default).
  for (const gzipLevel of [0, 1]) {
    const files = openPostgresExportFiles({
      ...(storage.exportFiles!.descriptor!.options as unknown as PostgresExportFilesOptions),
      gzipLevel,
    });
    try {
      await measure(`postgres ${gzipLevel}`, files, { projectId: 'p', jobId: job.id });
    } finally {
      await files.close();
    }
  }
} finally {
  await storage?.close();
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
  fs.rmSync(dir, { recursive: true, force: true });
}
