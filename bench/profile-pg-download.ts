/**
 * Where a download of a PostgreSQL export file (stored compressed, the default) spends its time,
 * in process, without HTTP:
 *
 *   FPK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
 *     node --import tsx bench/profile-pg-download.ts [--mib 64] [--reps 9]
 *
 * Writes one file of `--mib` MiB of the bench's generated NDJSON through the store (as an export
 * worker does), then times, in alternating rounds: the chunks fetched with a plain `SELECT` (bytea
 * as hex text) and with `COPY … TO STDOUT (FORMAT binary)`; every chunk inflated one after another
 * with zlib's default 16 KiB output pieces and with one buffer of the chunk's size; the store's
 * whole-file stream (`read`, what an identity download sends); and `fs.createReadStream` of the same
 * bytes from a local file (what plain Node sends). Medians of wall time and of this process's CPU
 * time (all threads; PostgreSQL's own work is not in it).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { constants, inflateRaw } from 'node:zlib';
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { postgresStorage } from '../src/postgres.js';
import { inflateChunk } from '../src/storage/postgres/deflate-chunks.js';
import {
  openPostgresExportFiles,
  type PostgresExportFilesOptions,
} from '../src/storage/postgres/export-files.js';
import { generatePatients } from './dataset.js';
import { median } from './stats.js';

const { values } = parseArgs({
  options: { mib: { type: 'string', default: '64' }, reps: { type: 'string', default: '9' } },
});
const MIB = 1024 * 1024;
const size = Number(values.mib) * MIB;
const reps = Number(values.reps);
const url = process.env.FPK_TEST_POSTGRES_URL;
if (!url) throw new Error('Set FPK_TEST_POSTGRES_URL');

// About 8 MiB of generated resources, one per line; each 1 MiB write starts at another line.
const lines: string[] = [];
let textBytes = 0;
for (const resource of generatePatients(400)) {
  const line = `${JSON.stringify(resource)}\n`;
  lines.push(line);
  textBytes += line.length;
  if (textBytes > 8 * MIB) break;
}
const text = lines.join('');

const inflateDefault = promisify(inflateRaw);
const schema = `fpk_prof_dl_${randomBytes(4).toString('hex')}`;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-prof-dl-'));
const storage = postgresStorage({ connectionString: url, schema });
const client = new pg.Client({ connectionString: url });
try {
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
  const ref = { projectId: 'p', jobId: job.id };
  const name = 'Observation-1.ndjson';
  const files = openPostgresExportFiles(
    storage.exportFiles!.descriptor!.options as unknown as PostgresExportFilesOptions,
  );
  const sink = await files.sink(ref).create(name);
  let written = 0;
  for (let i = 0; written < size; i++) {
    const at = (i * 1_000_003) % text.length;
    const piece = (text.slice(at) + text.slice(0, at)).slice(0, MIB);
    await sink.write(piece);
    written += Buffer.byteLength(piece);
  }
  await sink.commit();
  const local = path.join(work, name);
  await fs.promises.writeFile(local, files.read(ref, name));

  await client.connect();
  const table = `"${schema}".export_file_chunks`;
  const { rows: fileRows } = await client.query<{ file_id: string; stored_size: string }>(
    `SELECT file_id, stored_size FROM "${schema}".export_files`,
  );
  const fileId = fileRows[0]!.file_id;
  const chunks = (
    await client.query<{ len: number; data: Buffer }>(
      `SELECT len, data FROM ${table} WHERE file_id = $1 ORDER BY off`,
      [fileId],
    )
  ).rows;
  console.log(
    `file ${(written / MIB).toFixed(0)} MiB, stored ${(Number(fileRows[0]!.stored_size) / MIB).toFixed(1)} MiB in ${chunks.length} chunks`,
  );

  const steps: Record<string, () => Promise<unknown>> = {
    'SELECT data (hex)': () =>
      client.query(`SELECT data FROM ${table} WHERE file_id = $1 ORDER BY off`, [fileId]),
    'COPY data (binary)': async () => {
      const copy = client.query(
        copyTo(
          `COPY (SELECT data FROM ${table} WHERE file_id = ${fileId} ORDER BY off) TO STDOUT (FORMAT binary)`,
        ),
      );
      for await (const part of copy as AsyncIterable<Buffer>) void part;
    },
    'inflate, 16 KiB pieces': async () => {
      for (const c of chunks) await inflateDefault(c.data, { finishFlush: constants.Z_SYNC_FLUSH });
    },
    'inflate, one buffer a chunk': async () => {
      for (const c of chunks) await inflateChunk(c.data, c.len);
    },
    'store stream (identity download)': async () => {
      for await (const part of files.read(ref, name)) void part;
    },
    'fs.createReadStream (plain Node)': async () => {
      for await (const part of fs.createReadStream(local)) void part;
    },
  };
  const wall: Record<string, number[]> = {};
  const cpu: Record<string, number[]> = {};
  for (let rep = 0; rep < reps; rep++) {
    for (const [label, step] of Object.entries(steps)) {
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      await step();
      (wall[label] ??= []).push(performance.now() - t0);
      const c1 = process.cpuUsage(c0);
      (cpu[label] ??= []).push((c1.user + c1.system) / 1000);
    }
  }
  for (const label of Object.keys(steps))
    console.log(
      `${label.padEnd(34)} wall ${median(wall[label]!).toFixed(0).padStart(6)} ms   CPU ${median(cpu[label]!).toFixed(0).padStart(6)} ms`,
    );
  await files.close();
} finally {
  await client.end().catch(() => undefined);
  await storage.close();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
  fs.rmSync(work, { recursive: true, force: true });
}
