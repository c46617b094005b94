import http from 'node:http';
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
