/**
 * The PostgreSQL store, its own entry so that hosts on the other stores never load `pg` (an
 * optional peer dependency, with `pg-cursor` and `pg-copy-streams`).
 * @packageDocumentation
 * @module fhir-platform-kit/postgres
 */
import { R4_PATIENT_COMPARTMENT } from './fhir/compartment.js';
import { checkOptionKeys, type OptionKeys } from './common/option-keys.js';
import { createPostgresStorage, type PostgresStorageOptions } from './storage/postgres/postgres-storage.js';
import type { Storage } from './storage/types.js';
import { loadR4Indexer } from './search/index-resource.js';

// `fhir-platform-kit/postgres`: the PostgreSQL adapter, its own entry point so that only hosts
// that import it load `pg`, `pg-cursor` and `pg-copy-streams` (optional peer dependencies of the
// package).

const POSTGRES_STORAGE_KEYS: OptionKeys<PostgresStorageOptions> = {
  connectionString: true,
  pool: true,
  schema: true,
  maxConnections: true,
  searchConnections: true,
  maxProjectSearchConnections: true,
  acquireTimeoutMs: true,
  lockTimeoutMs: true,
  statementTimeoutMs: true,
  idleInTransactionTimeoutMs: true,
  closeTimeoutMs: true,
  exportChunkBytes: true,
  exportFileChunkBytes: true,
  exportFileGzipLevel: true,
  compartment: true,
  indexer: true,
  readReplicas: true,
  replicaFreshness: true,
  history: true,
};

/**
 * A store in PostgreSQL, for hosts that run several instances over one database: every instance
 * sees every write, resource writes of a project are serialized by the database, failed-login
 * counters and client-assertion replay records are shared, and export workers reopen the store
 * from `descriptor` (this module). Tables are created in `schema` on open (the first call waits
 * for that). Every version of every resource is kept unless the `history` retention says
 * otherwise (a sweep then deletes the others), so by default the resources table grows with the
 * number of writes. Needs the `pg`, `pg-cursor` and
 * `pg-copy-streams` packages.
 *
 * Synchronous: the store is returned at once and connects lazily (the first call waits for the
 * pool and the tables), so a database down at start is retried by each call instead of failing
 * the host's start. `await postgresStorage(…)` is harmless, as with every factory.
 */
export function postgresStorage(options: PostgresStorageOptions = {}): Storage {
  checkOptionKeys('postgresStorage', options, POSTGRES_STORAGE_KEYS);
  return createPostgresStorage({
    ...options,
    compartment: options.compartment ?? R4_PATIENT_COMPARTMENT,
    indexer: options.indexer ?? loadR4Indexer,
  });
}

export type { PostgresStorageOptions } from './storage/postgres/postgres-storage.js';
export type { ReplicaFreshness } from './storage/postgres/replicas.js';
export { openPostgresExportReader } from './storage/postgres/export-reader.js';
export type { PostgresExportReaderOptions } from './storage/postgres/export-reader.js';
// Workers reopen a job's export files in the database from this entry (the files' descriptor names it).
export { openPostgresExportFiles } from './storage/postgres/export-files.js';
export type { PostgresExportFilesOptions } from './storage/postgres/export-files.js';
