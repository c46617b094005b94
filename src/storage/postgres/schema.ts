import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { identifierKeys } from '../identifier-keys.js';
import type { StoredResource, UserRecord } from '../types.js';
import { userEmails } from '../user-list.js';
import { INDEX_TABLES, searchTableStatements } from './search-tables.js';

/** `name` as a quoted SQL identifier. */
export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Unique indexes whose violation is a `ConflictError` on a known attribute. */
export const UNIQUE_ATTRIBUTES: Readonly<Record<string, string>> = {
  projects_pkey: 'id',
  users_pkey: 'id',
  users_user_name: 'userName',
  users_external_id: 'externalId',
  memberships_pkey: 'id',
  clients_pkey: 'id',
  export_jobs_pkey: 'id',
  resources_current: 'id',
};

/**
 * The tables, in schema `s` (quoted). Every statement is idempotent, so opening a store over an
 * existing schema is a no-op. Ids sort with the "C" collation: code-unit order, as in the memory
 * store, whatever the database's locale.
 */
function migrationStatements(s: string, applied: Set<number>): string[] {
  const id = 'text COLLATE "C" NOT NULL';
  return [
    `CREATE SCHEMA IF NOT EXISTS ${s}`,
    // Applied versions, for the ALTERs of later releases.
    `CREATE TABLE IF NOT EXISTS ${s}.schema_migrations (
      version integer PRIMARY KEY,
      applied_at timestamptz NOT NULL DEFAULT now())`,
    `CREATE TABLE IF NOT EXISTS ${s}.projects (
      id ${id} PRIMARY KEY,
      created_at text NOT NULL,
      record json NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS ${s}.users (
      project_id ${id},
      id ${id},
      user_name_key text NOT NULL,
      external_id text,
      profile_id text NOT NULL,
      created_at text NOT NULL,
      version integer NOT NULL,
      record json NOT NULL,
      CONSTRAINT users_pkey PRIMARY KEY (project_id, id))`,
    // userName is unique case-insensitively: the key is lower-cased in JavaScript, like the other
    // stores, so PostgreSQL's locale never changes what counts as the same name.
    `CREATE UNIQUE INDEX IF NOT EXISTS users_user_name ON ${s}.users (project_id, user_name_key)`,
    `CREATE UNIQUE INDEX IF NOT EXISTS users_external_id ON ${s}.users (project_id, external_id)`,
    `CREATE INDEX IF NOT EXISTS users_profile_id ON ${s}.users (project_id, profile_id)`,
    `CREATE TABLE IF NOT EXISTS ${s}.memberships (
      project_id ${id},
      id ${id},
      user_id text,
      client_id text,
      created_at text NOT NULL,
      record json NOT NULL,
      CONSTRAINT memberships_pkey PRIMARY KEY (project_id, id))`,
    `CREATE TABLE IF NOT EXISTS ${s}.clients (
      id ${id},
      project_id text COLLATE "C",
      created_at text NOT NULL,
      record json NOT NULL,
      CONSTRAINT clients_pkey PRIMARY KEY (id))`,
    `CREATE INDEX IF NOT EXISTS clients_project ON ${s}.clients (project_id)`,
    `CREATE TABLE IF NOT EXISTS ${s}.signing_keys (
      kid ${id} PRIMARY KEY,
      created_at text NOT NULL,
      record json NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS ${s}.one_time_values (
      key text PRIMARY KEY,
      expires_at bigint NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS ${s}.export_jobs (
      project_id ${id},
      id ${id},
      status text NOT NULL,
      created_at text NOT NULL,
      version integer NOT NULL,
      record json NOT NULL,
      CONSTRAINT export_jobs_pkey PRIMARY KEY (project_id, id))`,
    // Every version of every resource, tombstones included, in one table: `seq` orders all
    // commits; a version is current while `superseded_seq` is null.
    `CREATE SEQUENCE IF NOT EXISTS ${s}.resource_seq`,
    `CREATE TABLE IF NOT EXISTS ${s}.resources (
      seq bigint PRIMARY KEY,
      project_id ${id},
      resource_type ${id},
      id ${id},
      version_id text NOT NULL,
      lu bigint NOT NULL,
      deleted boolean NOT NULL,
      superseded_seq bigint,
      body text)`,
    `CREATE UNIQUE INDEX IF NOT EXISTS resources_current
      ON ${s}.resources (project_id, resource_type, id) WHERE superseded_seq IS NULL`,
    `CREATE INDEX IF NOT EXISTS resources_live
      ON ${s}.resources (project_id, resource_type, lu, id) WHERE superseded_seq IS NULL AND NOT deleted`,
    `CREATE INDEX IF NOT EXISTS resources_history ON ${s}.resources (project_id, resource_type, seq)`,
    // The patients in whose compartment each version is (one row per version and patient).
    `CREATE TABLE IF NOT EXISTS ${s}.resource_compartments (
      project_id ${id},
      patient_id ${id},
      resource_type ${id},
      seq bigint NOT NULL,
      PRIMARY KEY (project_id, patient_id, resource_type, seq))`,
    // The identifier index keys (`identifierKeys`) of each current, live version: rows are
    // inserted with the version and deleted when it is superseded (migration 2).
    `CREATE TABLE IF NOT EXISTS ${s}.resource_identifiers (
      project_id ${id},
      resource_type ${id},
      key text COLLATE "C" NOT NULL,
      seq bigint NOT NULL,
      PRIMARY KEY (project_id, resource_type, key, seq))`,
    `CREATE INDEX IF NOT EXISTS resource_identifiers_seq ON ${s}.resource_identifiers (seq)`,
    // One row per project: the last `meta.lastUpdated` handed out (microseconds). Resource writers
    // lock it until they commit, so versions of a project commit in `seq` order and an export
    // snapshot (which takes the same lock) never misses a version committed later with a lower seq.
    `CREATE TABLE IF NOT EXISTS ${s}.resource_clocks (
      project_id ${id} PRIMARY KEY,
      lu bigint NOT NULL)`,
    // Migration 3: the export job queue. The run holding a job's lease runs it; a lease not renewed
    // by `lease_until` (database clock) may be claimed by any instance.
    `ALTER TABLE ${s}.export_jobs ADD COLUMN IF NOT EXISTS lease_owner text`,
    `ALTER TABLE ${s}.export_jobs ADD COLUMN IF NOT EXISTS lease_until timestamptz`,
    `CREATE INDEX IF NOT EXISTS export_jobs_runnable
      ON ${s}.export_jobs (created_at, id) WHERE status IN ('accepted', 'in-progress')`,
    // Export files, written in chunks by the workers and deleted with their job. A file is served
    // once `complete`; its chunks hold consecutive byte ranges starting at `off`.
    `CREATE TABLE IF NOT EXISTS ${s}.export_files (
      file_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      project_id ${id},
      job_id ${id},
      name text COLLATE "C" NOT NULL,
      complete boolean NOT NULL DEFAULT false,
      size bigint NOT NULL DEFAULT 0,
      CONSTRAINT export_files_job FOREIGN KEY (project_id, job_id)
        REFERENCES ${s}.export_jobs (project_id, id) ON DELETE CASCADE)`,
    `CREATE INDEX IF NOT EXISTS export_files_by_job ON ${s}.export_files (project_id, job_id, name)`,
    `CREATE TABLE IF NOT EXISTS ${s}.export_file_chunks (
      file_id bigint NOT NULL REFERENCES ${s}.export_files (file_id) ON DELETE CASCADE,
      off bigint NOT NULL,
      len integer NOT NULL,
      data bytea NOT NULL,
      PRIMARY KEY (file_id, off))`,
    // Stored out of line without compression: chunks are written and read whole, fast.
    `ALTER TABLE ${s}.export_file_chunks ALTER COLUMN data SET STORAGE EXTERNAL`,
    // Migration 4: failed-authentication counters shared by every instance (PostgresFailureCounts): the key's
    // SHA-256, the failures in its window and the window's end (epoch ms, database clock).
    `CREATE TABLE IF NOT EXISTS ${s}.auth_failures (
      key text COLLATE "C" PRIMARY KEY,
      failures integer NOT NULL,
      reset_at bigint NOT NULL)`,
    // Migration 5: the history walk of one resource (a type's and the project's use
    // `resources_history`), its previous version, and the sweep's count of newer versions.
    `CREATE INDEX IF NOT EXISTS resources_history_instance
      ON ${s}.resources (project_id, resource_type, id, seq)`,
    // Migration 6: paged user listings (listUsers with options). Each sort key has an index in the
    // order the other stores compare ("C": code units), with the id to break ties, so that a page
    // is a range scan from its cursor; `emails` holds the lower-cased `data.emails[].value`.
    `ALTER TABLE ${s}.users ADD COLUMN IF NOT EXISTS updated_at text`,
    `ALTER TABLE ${s}.users ADD COLUMN IF NOT EXISTS emails text[]`,
    `CREATE INDEX IF NOT EXISTS users_by_created ON ${s}.users (project_id, (created_at COLLATE "C"), id)`,
    `CREATE INDEX IF NOT EXISTS users_by_updated ON ${s}.users (project_id, (updated_at COLLATE "C"), id)`,
    `CREATE INDEX IF NOT EXISTS users_by_user_name ON ${s}.users (project_id, (user_name_key COLLATE "C"), id)`,
    `CREATE INDEX IF NOT EXISTS users_by_external_id ON ${s}.users (project_id, (external_id COLLATE "C"), id)`,
    `CREATE INDEX IF NOT EXISTS users_by_profile_id ON ${s}.users (project_id, (profile_id COLLATE "C"), id)`,
    `CREATE INDEX IF NOT EXISTS users_emails ON ${s}.users USING gin (emails)`,
    // Migration 7: compressed export files. A `deflate` file's chunks hold raw DEFLATE segments
    // (deflate-chunks.ts) of `len` bytes of the file each; `crc32` and `stored_size` complete its
    // gzip form. Files written before stay `identity` (uncompressed chunks), served as they are.
    `ALTER TABLE ${s}.export_files ADD COLUMN IF NOT EXISTS encoding text NOT NULL DEFAULT 'identity'`,
    `ALTER TABLE ${s}.export_files ADD COLUMN IF NOT EXISTS crc32 bigint`,
    `ALTER TABLE ${s}.export_files ADD COLUMN IF NOT EXISTS stored_size bigint`,
    // Migrations 8, 9, 11, 14 and 16: the search index tables (filled by `syncSearchIndex` once the
    // indexer is known; emptied and rebuilt by the migrations of INDEX_REBUILDS).
    ...searchTableStatements(s, applied.has(14)),
    // Migration 10: the SMART App Launch grants (PostgresGrants): tickets, codes, refresh tokens and
    // revoked access token ids, by kind and key (a hash of the secret value), expiring at `expires_at`
    // (epoch ms); revocation finds a user's or a refresh family's grants by the indexes.
    `CREATE TABLE IF NOT EXISTS ${s}.oauth_grants (
      kind text COLLATE "C" NOT NULL,
      key text COLLATE "C" NOT NULL,
      project_id ${id},
      client_id text NOT NULL,
      user_id text,
      family text,
      expires_at bigint NOT NULL,
      used boolean NOT NULL DEFAULT false,
      record json NOT NULL,
      PRIMARY KEY (kind, key))`,
    `CREATE INDEX IF NOT EXISTS oauth_grants_user ON ${s}.oauth_grants (project_id, user_id)`,
    `CREATE INDEX IF NOT EXISTS oauth_grants_family ON ${s}.oauth_grants (family) WHERE family IS NOT NULL`,
    `CREATE INDEX IF NOT EXISTS oauth_grants_expiry ON ${s}.oauth_grants (expires_at)`,
  ];
}

/**
 * Migration 6: fills `updated_at` and `emails` of the users written before they existed, in
 * JavaScript (`userEmails` folds case as the other stores do), in slices by key.
 */
async function backfillUserColumns(client: PoolClient, s: string): Promise<void> {
  for (;;) {
    const { rows } = await client.query<{ project_id: string; id: string; record: UserRecord }>(
      `SELECT project_id, id, record FROM ${s}.users WHERE updated_at IS NULL LIMIT 1000`,
    );
    if (rows.length === 0) return;
    await client.query(
      `UPDATE ${s}.users u SET updated_at = v.updated_at, emails = v.emails::text[]
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS v(project_id, id, updated_at, emails)
        WHERE u.project_id = v.project_id AND u.id = v.id`,
      [
        rows.map((r) => r.project_id),
        rows.map((r) => r.id),
        rows.map((r) => r.record.updatedAt ?? r.record.createdAt),
        rows.map((r) => toPgArray(userEmails(r.record))),
      ],
    );
  }
}

/** A text array literal (`{"a","b"}`), for arrays of arrays passed through `unnest`. */
function toPgArray(values: string[]): string {
  return `{${values.map((v) => `"${v.replace(/["\\]/g, (c) => `\\${c}`)}"`).join(',')}}`;
}

/**
 * An identifier key as stored in `resource_identifiers`: itself, or a digest (prefixed `#`, which
 * no key starts with) when PostgreSQL could not store or index it (a NUL character, or longer
 * than a B-tree entry may be).
 */
export function pgIdentifierKey(key: string): string {
  if (!key.includes('\u0000') && Buffer.byteLength(key) <= 1024) return key;
  return `#${createHash('sha256').update(key).digest('base64')}`;
}

/** Rows of `resource_identifiers` for the versions `[seq, resource type, body]` given. */
export function identifierRows(versions: Iterable<readonly [string, string, StoredResource]>): {
  types: string[];
  keys: string[];
  seqs: string[];
} {
  const rows = { types: [] as string[], keys: [] as string[], seqs: [] as string[] };
  for (const [seq, resourceType, body] of versions) {
    for (const key of new Set(identifierKeys(body).map(pgIdentifierKey))) {
      rows.types.push(resourceType);
      rows.keys.push(key);
      rows.seqs.push(seq);
    }
  }
  return rows;
}

/**
 * Migration 2: fills `resource_identifiers` for the live versions written before it existed, in
 * slices by `seq` (bodies are JSON text as written, so `"identifier"` appears in every body that has
 * one; the test is only a shortcut, `identifierKeys` decides).
 */
async function backfillIdentifiers(client: PoolClient, s: string): Promise<void> {
  await forEachLiveSlice(client, s, `strpos(body, '"identifier"') > 0`, async (rows) => {
    const projects = new Map(rows.map((r) => [r.seq, r.project_id]));
    const found = identifierRows(
      rows.map((r) => [r.seq, r.resource_type, JSON.parse(r.body) as StoredResource] as const),
    );
    await client.query(
      `INSERT INTO ${s}.resource_identifiers (project_id, resource_type, key, seq)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) ON CONFLICT DO NOTHING`,
      [found.seqs.map((seq) => projects.get(seq)!), found.types, found.keys, found.seqs],
    );
  });
}

/** One current, live version as a backfill reads it. */
export interface LiveVersionRow {
  seq: string;
  project_id: string;
  resource_type: string;
  body: string;
}

/**
 * Hands `fn` the current, live versions of the schema `s` (quoted) in slices of 1,000 by `seq`,
 * those matching `condition` (SQL on the `resources` columns) when given: how a migration fills a
 * new index from the bodies written before it.
 */
export async function forEachLiveSlice(
  client: PoolClient,
  s: string,
  condition: string | undefined,
  fn: (rows: LiveVersionRow[]) => Promise<void>,
): Promise<void> {
  let after = '0';
  for (;;) {
    const { rows } = await client.query<LiveVersionRow>(
      `SELECT seq, project_id, resource_type, body FROM ${s}.resources
        WHERE seq > $1 AND superseded_seq IS NULL AND NOT deleted${condition ? ` AND ${condition}` : ''}
        ORDER BY seq LIMIT 1000`,
      [after],
    );
    if (rows.length === 0) return;
    after = rows[rows.length - 1]!.seq;
    await fn(rows);
  }
}

/** The latest migration: every version from 1 up to it is recorded once applied. */
export const SCHEMA_VERSION = 16;

/** The migrations after which the index rows are built again (their shape changed). */
const INDEX_REBUILDS = [9, 11, 12, 13, 14, 15];

/** The versions recorded in `schema_migrations` (none when the table does not exist yet). */
async function appliedVersions(client: PoolClient, schema: string): Promise<Set<number>> {
  const { rows: exists } = await client.query<{ t: string | null }>('SELECT to_regclass($1) AS t', [
    `${quoteIdentifier(schema)}.schema_migrations`,
  ]);
  if (!exists[0]?.t) return new Set();
  const { rows } = await client.query<{ version: number }>(
    `SELECT version FROM ${quoteIdentifier(schema)}.schema_migrations`,
  );
  return new Set(rows.map((r) => r.version));
}

function isCurrent(applied: Set<number>): boolean {
  for (let version = 1; version <= SCHEMA_VERSION; version++) if (!applied.has(version)) return false;
  return true;
}

/**
 * Begins a transaction on `client` that holds the schema's advisory lock until it ends (migrations
 * and index rebuilds run under it, one instance at a time), with no statement or lock timeout: a
 * backfill or rebuild may run long, and another instance may hold the lock meanwhile.
 */
export async function beginSchemaLocked(client: PoolClient, schema: string): Promise<void> {
  await client.query('BEGIN');
  await client.query('SET LOCAL statement_timeout = 0');
  await client.query('SET LOCAL lock_timeout = 0');
  await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`fhir-platform-kit:${schema}`]);
}

/**
 * Creates the schema's tables when missing and applies the migrations not yet recorded in
 * `schema_migrations` (2: fill `resource_identifiers`; 3, the export queue and files, 4, the shared failed-login counters, 5, the history indexes, are DDL only; 6: the users' listing columns and indexes, filled by `backfillUserColumns`; 7, compressed export files, DDL only; 8: the search index tables, filled by `syncSearchIndex`; 9: date hulls and fewer composite rows, the index rebuilt by `syncSearchIndex` once the fingerprint is forgotten; 10, the SMART grants, DDL only; 11: token keys, the index rebuilt as for 9; 12: no composite marker rows, the index rebuilt as for 9, no DDL; 13: no rows for the parameters the indexer derives from others, `ResourceIndexer.derived`, rebuilt likewise; 14: the index tables keyed by `search_keys` numbers, created anew and rebuilt likewise, without rows for the reference parameters restricted to a type nor for `combo-code-value-quantity`; 15: nor for `code-value-quantity`, which is `code` and `value-quantity`, rebuilt likewise, no DDL; 16: each index table's `seq` index keyed by `(seq, key)`, DDL only), in one transaction under an advisory lock
 * so that several instances opening the same database at once do not race on `CREATE … IF NOT
 * EXISTS` nor run a migration twice.
 */
export async function migrate(pool: Pool, schema: string): Promise<void> {
  const client = await pool.connect();
  try {
    await beginSchemaLocked(client, schema);
    const s = quoteIdentifier(schema);
    // Up to date: no DDL at all. `ALTER TABLE … IF NOT EXISTS` still takes an exclusive lock on
    // its table, which deadlocks with the running instances' writes (an export file insert locks
    // export_files, then its job row) when one more instance opens the schema.
    const before = await appliedVersions(client, schema);
    if (isCurrent(before)) {
      await client.query('COMMIT');
      return;
    }
    // These migrations rebuild the index rows (below): emptied first, their new indexes cost nothing.
    const rebuild = INDEX_REBUILDS.some((version) => !before.has(version));
    if (before.has(8) && rebuild) {
      await client.query(`TRUNCATE ${INDEX_TABLES.map((table) => `${s}.${table}`).join(', ')}`);
    }
    for (const statement of migrationStatements(s, before)) await client.query(statement);
    const applied = await appliedVersions(client, schema);
    // A schema created by this version has no resources yet: the backfill finds nothing.
    if (!applied.has(2)) await backfillIdentifiers(client, s);
    if (!applied.has(6)) await backfillUserColumns(client, s);
    // The index rows change shape: the next `syncSearchIndex` (on open) rebuilds them all from
    // the current versions (`forEachLiveSlice`).
    if (rebuild) await client.query(`DELETE FROM ${s}.search_index_state`);
    await client.query(
      `INSERT INTO ${s}.schema_migrations (version) SELECT generate_series(1, $1::int) ON CONFLICT DO NOTHING`,
      [SCHEMA_VERSION],
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}
