import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { now } from './stats.js';

/** Time to copy `files` into `destDir` with `fs.promises.copyFile`, ms. */
export async function copyWithCopyFile(files: readonly string[], destDir: string): Promise<number> {
  fs.mkdirSync(destDir, { recursive: true });
  const start = now();
  for (const file of files) await fs.promises.copyFile(file, path.join(destDir, path.basename(file)));
  const ms = now() - start;
  fs.rmSync(destDir, { recursive: true, force: true });
  return ms;
}

/**
 * Time to copy `files` into `destDir` by streaming (`createReadStream` → `createWriteStream`, the
 * same kind of buffered read/write an export does), ms.
 */
export async function copyWithStreams(files: readonly string[], destDir: string): Promise<number> {
  fs.mkdirSync(destDir, { recursive: true });
  const start = now();
  for (const file of files) {
    await pipeline(fs.createReadStream(file), fs.createWriteStream(path.join(destDir, path.basename(file))));
  }
  const ms = now() - start;
  fs.rmSync(destDir, { recursive: true, force: true });
  return ms;
}
