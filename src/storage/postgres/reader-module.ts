import { descriptorModule } from '../../package-entry.js';

/**
 * The module a worker imports to reopen a PostgreSQL store (`StorageDescriptor.module`):
 * - running from source (vitest, tsx): `sourceFile` (`export-reader.ts`, or `export-files.ts` for the
 *   export file store), next to this file;
 * - running from the build: the `fhir-platform-kit/postgres` entry (`dist/postgres.js` or
 *   `dist/postgres.cjs`), which exports `openPostgresExportReader` and `openPostgresExportFiles`.
 */
export function postgresExportReaderModule(sourceFile = './export-reader.ts'): string {
  return descriptorModule(`./storage/postgres/${sourceFile.replace(/^\.\//, '')}`, 'postgres');
}
