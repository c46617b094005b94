import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { now } from './stats.js';

/** Downloads `url` with plain `http.get` (no compression asked), discarding the body: bytes and ms. */
export function timedDownload(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ bytes: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const start = now();
    const req = http.get(url, { headers: { 'accept-encoding': 'identity', ...headers } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`GET ${url}: ${res.statusCode}`));
        return;
      }
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
      res.on('end', () => resolve({ bytes, ms: now() - start }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

/**
 * Downloads every file of `run` (without compression) through the download handler to the path
 * `run.files` names: an export whose files the server keeps in the database, on disk for the
 * baselines that read files (the streamed copy, the plain Node download, the large upload).
 */
export async function saveExportFiles(
  fhirBase: string,
  token: string,
  run: { jobId: string; files: string[] },
): Promise<void> {
  for (const file of run.files) {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const url = `${fhirBase}/$export-file/${run.jobId}/${path.basename(file)}`;
    await new Promise<void>((resolve, reject) => {
      const req = http.get(
        url,
        { headers: { authorization: `Bearer ${token}`, 'accept-encoding': 'identity' } },
        (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            reject(new Error(`GET ${url}: ${res.statusCode}`));
            return;
          }
          pipeline(res, fs.createWriteStream(file)).then(resolve, reject);
        },
      );
      req.on('error', reject);
    });
  }
}
