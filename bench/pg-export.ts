/**
 * Exports on PostgreSQL with their files in the database (the store's default), side by side in
 * one run with the database's own floor, then downloads of the largest file against plain Node:
 *
 *   FPK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
 *     node --import tsx bench/pg-export.ts [--patients 500] [--reps 3] [--downloads 5]
 *
 * Each repetition runs a system export over HTTP (kick-off to complete manifest) and then
 * `COPY (SELECT body …) TO STDOUT` of the same rows into files (`measure-pg-copy.ts`); the WAL
 * written during each export is read from `pg_current_wal_lsn()` (the database is shared: other
 * sessions' WAL counts too). Downloads: the largest file of the first export through the download
 * handler without compression, with `Accept-Encoding: gzip`, and the same bytes from a local file
 * through plain Node `http` + `createReadStream`, in alternating rounds. Medians.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import http from 'node:http';
import pg from 'pg';
import { RESOURCES_PER_PATIENT } from './dataset.js';
import { deleteExport, runHttpExport, type ExportRun } from './measure-export.js';
import { timedDownload } from './measure-download.js';
import { startServer } from './server-process.js';
import { median } from './stats.js';

const { values } = parseArgs({
  options: {
    patients: { type: 'string', default: '500' },
    reps: { type: 'string', default: '3' },
    downloads: { type: 'string', default: '5' },
  },
});
const patients = Number(values.patients);
const reps = Number(values.reps);
const downloads = Number(values.downloads);
const databaseUrl =
  process.env.FPK_BENCH_POSTGRES_URL ??
  process.env.FPK_TEST_POSTGRES_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const MIB = 1024 * 1024;
const log = (line: string): void => console.error(`[pg-export] ${line}`);

/** The whole body of `url` as received (no decoding), with its `Content-Encoding`. */
function fetchRaw(
  url: string,
  headers: Record<string, string>,
): Promise<{ body: Buffer; encoding?: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (chunk: Buffer) => parts.push(chunk));
        res.on('end', () =>
          resolve({
            body: Buffer.concat(parts),
            ...(res.headers['content-encoding'] ? { encoding: res.headers['content-encoding'] } : {}),
          }),
        );
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-pg-export-'));
const exportDir = path.join(work, 'exports');
const probeDir = path.join(work, 'probes');
fs.mkdirSync(probeDir);
const db = new pg.Client({ connectionString: databaseUrl });
await db.connect();
const lsn = async (): Promise<string> =>
  (await db.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
const walBytes = async (from: string): Promise<number> =>
  Number(
    (
      await db.query<{ n: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS n', [
        from,
      ])
    ).rows[0]!.n,
  );

const server = await startServer({
  store: 'postgres',
  dir: path.join(work, 'store'),
  exportDir,
  probeDir,
  databaseUrl,
  exportFiles: 'database',
});
try {
  const schema = server.info.schema!;
  const fhirBase = `${server.info.origin}/fhir/R4`;
  const project = await server.call('newProject', { name: 'pg-export', strict: false });
  const { projectId, token } = project;
  log(`loading ${patients} patients (${patients * RESOURCES_PER_PATIENT} resources)`);
  const load = await server.call('loadGenerated', { projectId, patients, seed: 42, batchSize: 1000 });
  const sizes = (jobId: string, names: string[]) =>
    server.call('exportFileSizes', { projectId, jobId, names });
  const warmUp = await runHttpExport({
    fhirBase,
    token,
    path: '/$export?_type=AllergyIntolerance',
    exportDir,
    sizes,
  });
  await deleteExport(warmUp, token);

  const runs: ExportRun[] = [];
  const wal: number[] = [];
  const copies: number[] = [];
  let chunkTableBytes = 0;
  for (let rep = 0; rep < reps; rep++) {
    log(`system export ${rep + 1}/${reps}`);
    const from = await lsn();
    const run = await runHttpExport({ fhirBase, token, path: '/$export', exportDir, sizes });
    wal.push(await walBytes(from));
    runs.push(run);
    if (rep === 0) {
      const { rows } = await db.query<{ n: string }>(
        `SELECT pg_total_relation_size(format('%I.export_file_chunks', $1::text)::regclass)::text AS n`,
        [schema],
      );
      chunkTableBytes = Number(rows[0]!.n);
    }
    log(`COPY TO STDOUT ${rep + 1}/${reps}`);
    copies.push(
      (await server.call('pgCopy', { projectId, types: run.types, dir: path.join(work, 'pg-copy') })).ms,
    );
  }
  for (const run of runs.slice(1)) await deleteExport(run, token);

  // Downloads: the largest file of the first export.
  const first = runs[0]!;
  const names = first.files.map((file) => path.basename(file));
  const fileSizes = await sizes(first.jobId, names);
  const largest = names[fileSizes.indexOf(Math.max(...fileSizes))]!;
  const handlerUrl = `${fhirBase}/$export-file/${first.jobId}/${largest}`;
  const auth = { authorization: `Bearer ${token}` };
  const identity = await fetchRaw(handlerUrl, { ...auth, 'accept-encoding': 'identity' });
  const gzipped = await fetchRaw(handlerUrl, { ...auth, 'accept-encoding': 'gzip' });
  if (gzipped.encoding !== 'gzip' || !gunzipSync(gzipped.body).equals(identity.body))
    throw new Error('the gzip download is not the identity download compressed');
  const local = path.join(work, largest);
  fs.writeFileSync(local, identity.body);
  const plainUrl = `${server.info.plainOrigin}/?path=${encodeURIComponent(local)}`;
  const byIdentity: number[] = [];
  const byGzip: number[] = [];
  const byPlain: number[] = [];
  let wireGzip = 0;
  for (let rep = 0; rep <= downloads; rep++) {
    const h = await timedDownload(handlerUrl, auth);
    const g = await timedDownload(handlerUrl, { ...auth, 'accept-encoding': 'gzip' });
    const p = await timedDownload(plainUrl);
    // Round 0 warms up.
    if (rep === 0) continue;
    byIdentity.push(h.ms);
    byGzip.push(g.ms);
    byPlain.push(p.ms);
    wireGzip = g.bytes;
  }

  const exportMs = median(runs.map((r) => r.ms));
  const copyMs = median(copies);
  const fileMiB = identity.body.length / MIB;
  const rate = (ms: number): number => fileMiB / (ms / 1000);
  const rows: [string, number, string][] = [
    ['Resources loaded', load.resources, ''],
    ['Resources exported', first.resources, ''],
    ['Exported NDJSON', first.bytes / MIB, 'MiB'],
    ['System export, kick-off to manifest (median)', exportMs, 'ms'],
    ['COPY (SELECT body …) TO STDOUT of the same rows (median)', copyMs, 'ms'],
    ['Export / COPY (target <= 2)', exportMs / copyMs, 'x'],
    ['WAL written during an export (median, whole cluster)', median(wal) / MIB, 'MiB'],
    ['export_file_chunks after one export', chunkTableBytes / MIB, 'MiB'],
    [`Download ${largest}`, fileMiB, 'MiB'],
    ['  gzip on the wire', wireGzip / MIB, 'MiB'],
    ['  handler, identity', rate(median(byIdentity)), 'MiB/s'],
    ['  handler, Accept-Encoding: gzip (NDJSON MiB/s)', rate(median(byGzip)), 'MiB/s'],
    ['  plain Node http + createReadStream', rate(median(byPlain)), 'MiB/s'],
    ['  identity / plain (target >= 0.8)', median(byPlain) / median(byIdentity), 'x'],
    ['  gzip / plain', median(byPlain) / median(byGzip), 'x'],
  ];
  console.log(`pg-export: ${patients} patients, ${reps} export reps, ${downloads} download rounds`);
  for (const [label, value, unit] of rows)
    console.log(`${label.padEnd(58)} ${(Math.round(value * 100) / 100).toString().padStart(10)} ${unit}`);
  console.log(
    JSON.stringify({ exportMs: runs.map((r) => r.ms), copyMs: copies, wal, byIdentity, byGzip, byPlain }),
  );
} finally {
  await server.close();
  await db.end();
  fs.rmSync(work, { recursive: true, force: true });
}
