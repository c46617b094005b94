import { pathToFileURL } from 'node:url';

/**
 * The module a worker imports to reopen a store (`StorageDescriptor.module`):
 * - running from source (vitest, tsx): `source`, a TypeScript file relative to `src/`;
 * - running from the build: the package entry `entry` (`dist/<entry>.js` or `.cjs`, the format
 *   running). Code the entries share sits in chunks beside them, so the entry is named rather
 *   than taken to be the file running.
 */
export function descriptorModule(source: string, entry: 'index' | 'postgres'): string {
  // `__filename` exists in the CommonJS build; `import.meta.url` in ES modules. Checked with
  // typeof so neither build trips over the other.
  const here = typeof __filename === 'string' ? pathToFileURL(__filename).href : import.meta.url;
  if (/\.[cm]?ts$/.test(here)) return new URL(source, here).href;
  return new URL(`./${entry}${here.endsWith('.cjs') ? '.cjs' : '.js'}`, here).href;
}
