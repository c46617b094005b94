import fs from 'node:fs';
import path from 'node:path';
import { bearer, expectJson, fetchJson } from './http-json.js';
import { now, sleep } from './stats.js';

/** One export through HTTP, from kick-off to the complete manifest. */
export interface ExportRun {
  jobId: string;
  statusUrl: string;
  /** Kick-off to the `200` status answer (every file complete), ms. */
  ms: number;
  /** Kick-off request to its `202` answer, ms. */
  kickoffMs: number;
  resources: number;
  files: string[];
  /** Resource types in the manifest. */
  types: string[];
  bytes: number;
}

interface Manifest {
  output: { type: string; url: string; count: number }[];
}

/**
 * Kicks off `GET {fhirBase}{path}` (`/$export`, `/Group/{id}/$export`), polls the status URL until it
 * answers `200`, and sizes the files the manifest lists (read from `exportDir`). The poll interval
 * is a tenth of the time elapsed so far, between 1 ms and `pollMs` (default 20): a fixed 20 ms
 * interval added up to 20 ms to every job, more than a small export itself takes, so short jobs
 * (the group and empty exports) measured mostly the client's sleep.
 */
export async function runHttpExport(options: {
  fhirBase: string;
  token: string;
  path: string;
  exportDir: string;
  pollMs?: number;
  /** Sizes of the listed files (by name) when they are not under `exportDir` (files in the database). */
  sizes?: (jobId: string, names: string[]) => Promise<number[]>;
}): Promise<ExportRun> {
  const pollMs = options.pollMs ?? 20;
  const headers = bearer(options.token, { accept: 'application/fhir+json', prefer: 'respond-async' });
  const start = now();
  const kickoff = await expectJson(202, `${options.fhirBase}${options.path}`, { headers });
  const kickoffMs = now() - start;
  const statusUrl = kickoff.headers.get('content-location');
  if (!statusUrl) throw new Error('kick-off answered no Content-Location');
  let manifest: Manifest | undefined;
  while (!manifest) {
    const status = await fetchJson(statusUrl, { headers });
    if (status.status === 200) manifest = status.body as Manifest;
    else if (status.status === 202) await sleep(Math.min(pollMs, Math.max(1, (now() - start) / 10)));
    else throw new Error(`export status ${status.status}: ${JSON.stringify(status.body).slice(0, 500)}`);
  }
  const ms = now() - start;
  const jobId = decodeURIComponent(new URL(statusUrl).pathname.split('/').pop() ?? '');
  const files = manifest.output.map((o) =>
    path.join(options.exportDir, jobId, decodeURIComponent(new URL(o.url).pathname.split('/').pop() ?? '')),
  );
  const bytes = options.sizes
    ? (
        await options.sizes(
          jobId,
          files.map((file) => path.basename(file)),
        )
      ).reduce((sum, n) => sum + n, 0)
    : files.reduce((sum, file) => sum + fs.statSync(file).size, 0);
  const resources = manifest.output.reduce((sum, o) => sum + o.count, 0);
  const types = [...new Set(manifest.output.map((o) => o.type))];
  return { jobId, statusUrl, ms, kickoffMs, resources, files, types, bytes };
}

/** Deletes a finished job and its files (`DELETE` on the status URL). */
export async function deleteExport(run: ExportRun, token: string): Promise<void> {
  await expectJson(202, run.statusUrl, { method: 'DELETE', headers: bearer(token) });
}
