import type { Pool } from 'pg';
import type { IndexerOption } from '../search-index.js';
import type { HistoryRetention, PatientCompartment } from '../types.js';
import type { ReplicaFreshness } from './replicas.js';

/** Options of `postgresStorage`. */
export interface PostgresStorageOptions {
  /**
   * libpq connection string (`postgres://user:password@host:5432/db`). The store creates its own
   * pool from it, ended by `close()`, and export workers reopen the store with it (`descriptor`).
   * With `pool` as well, only workers use it.
   * @default undefined (pg's environment defaults: PGHOST, PGUSER, …)
   */
  connectionString?: string;
  /**
   * A pool owned by the caller: the store uses it and never ends it. Without `connectionString`,
   * the store has no `descriptor` and exports stream from the main thread.
   * @default undefined (a pool created from `connectionString`)
   */
  pool?: Pool;
  /**
   * Schema holding the store's tables, created on open when missing.
   * @default 'public'
   */
  schema?: string;
  /**
   * Connections of the pool the store creates (unused with `pool`).
   * @default 10
   */
  maxConnections?: number;
  /**
   * How many connections searches may hold at once, all projects together: the search lane
   * (`searchResources`, which `_include` and `$everything` use too, and history listings of a type
   * or a project; a search inside a transaction runs on its connection instead). The rest of the
   * pool stays free for everything else: point reads and writes, the token endpoint's records,
   * readiness. A search finding the lane full waits for room (its wait counts against its
   * `deadline`; without one, `acquireTimeoutMs` bounds it). From 1 to the pool's size less one
   * (with `pool`, the size of that pool). See docs/postgres-store.md, "Search lane", and
   * docs/deployment.md, "Database settings and pool sizes".
   * @default the pool's size less 30% of it (at least 2): 7 of 10
   */
  searchConnections?: number;
  /**
   * How many of the `searchConnections` one project's searches may hold at once. Its further
   * searches wait in arrival order; when a search ends, the waiting project running the fewest
   * goes next (projects in turn among equals). From 1 to `searchConnections`.
   * @default half of `searchConnections` (at least 1): 3 of 7
   */
  maxProjectSearchConnections?: number;
  /**
   * Longest wait for a free connection of the store's pool, in milliseconds; a call still waiting
   * then fails with `StorageUnavailableError` (HTTP 503 with `Retry-After`). 0 waits forever.
   * (With `pool`, the caller's `connectionTimeoutMillis` applies instead.) Also the longest wait of
   * a search without a deadline for room in the search lane (`searchConnections`), with `pool` too.
   * @default 10000
   */
  acquireTimeoutMs?: number;
  /**
   * Longest wait for a lock (a project's resource clock, a row, an advisory lock), in
   * milliseconds: PostgreSQL's `lock_timeout` on the store's connections. A statement still
   * waiting is cancelled and the call fails with `StorageUnavailableError`. 0 waits forever.
   * (Not set on a caller's `pool`.)
   * @default 15000
   */
  lockTimeoutMs?: number;
  /**
   * Longest run of one statement, in milliseconds: PostgreSQL's `statement_timeout` on the store's
   * connections (an export's `COPY` and cursors are exempt). 0 is no limit. (Not set on a caller's
   * `pool`.) A search with an earlier `deadline` runs its statements with what is left of that
   * instead, and one cancelled by it fails with `SearchTooCostlyError` rather than
   * `StorageUnavailableError`.
   * @default 60000
   */
  statementTimeoutMs?: number;
  /**
   * Longest pause of an open transaction between two statements, in milliseconds: PostgreSQL's
   * `idle_in_transaction_session_timeout`, which ends the session and frees its locks. 0 is no
   * limit. (Not set on a caller's `pool`.)
   * @default 60000
   */
  idleInTransactionTimeoutMs?: number;
  /**
   * How long `close()` waits for calls in flight, in milliseconds; then the store's connections
   * still checked out are ended (their calls fail) and the pool is closed, so that a shutdown
   * finishes even with work stuck.
   * @default 10000
   */
  closeTimeoutMs?: number;
  /**
   * Largest NDJSON chunk the export reader yields, in bytes (a chunk holds at least one line).
   * @default 1048576
   */
  exportChunkBytes?: number;
  /**
   * Bytes of export file data written per row of `export_file_chunks` (the store's `exportFiles`).
   * @default 1048576
   */
  exportFileChunkBytes?: number;
  /**
   * zlib level (1–9) export file chunks are compressed at, or 0 to store them uncompressed
   * (docs/deployment.md, "Export files in PostgreSQL or on disk").
   * @default 1
   */
  exportFileGzipLevel?: number;
  /**
   * The patient compartment resources are indexed by (on write: export workers read the index).
   * @default R4_PATIENT_COMPARTMENT (FHIR R4 CompartmentDefinition "Patient")
   */
  compartment?: PatientCompartment;
  /**
   * Which superseded versions are kept for `vread` and history (see `HistoryRetention`). Other
   * than `'all'`, a sweep after every 256th resource write of a project deletes up to 1,000 of
   * that project's versions no longer kept (never one a running export job may still read).
   * @default 'all'
   */
  history?: HistoryRetention;
  /**
   * Connection strings of streaming replicas of the database. Reads outside a transaction
   * (resources, searches, users, SCIM listings) run on one of them once it has replayed every
   * commit this store has made, else on the primary; writes, transactions, leases, limits, export
   * jobs, snapshots and files stay on the primary. A replica that cannot be reached or was promoted
   * is skipped for 30 s. See docs/deployment.md, "Read replicas".
   * @default [] (every call on the primary)
   */
  readReplicas?: string[];
  /**
   * Which writes a replica must have replayed before it serves a read:
   * - `'instance'`: every commit this store object made (it reads its own writes; a write made
   *   through another instance shows after the replica's lag);
   * - `'primary'`: every commit the primary had made when the read began, whichever instance made
   *   it (one more statement on the primary per read; under steady writes replicas serve fewer
   *   reads). For clients whose requests a load balancer spreads over several instances.
   * See docs/deployment.md, "Read replicas". @default 'instance'
   */
  replicaFreshness?: ReplicaFreshness;
  /**
   * What the store indexes for search (index tables written with each version; FHIR searches are
   * then answered in SQL). Rebuilt on open when its `fingerprint` changes; every instance sharing
   * a schema needs the same one. @default loadR4Indexer (filled in by `postgresStorage`)
   */
  indexer?: IndexerOption;
}
