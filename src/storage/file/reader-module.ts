import { pathToFileURL } from 'node:url';

/**
 * The module a worker imports to reopen a file store (`StorageDescriptor.module`):
 * - running from source (vitest, tsx): `src/storage/file/export-reader.ts`, next to this file;
 * - running from the build: the bundle holding this code, i.e. the package entry
 *   (`dist/index.js` or `dist/index.cjs`), which re-exports `openFileExportReader`.
 */
export function fileExportReaderModule(): string {
  // `__filename` exists in the CommonJS build (and under some test runners); `import.meta.url`
  // in ES modules. Checked with typeof so neither build trips over the other.
  const here = typeof __filename === 'string' ? pathToFileURL(__filename).href : import.meta.url;
  if (/\.[cm]?ts$/.test(here)) return new URL('./export-reader.ts', here).href;
  return here;
}
