/**
 * Loads resources into a PostgreSQL store's tables with `COPY … FROM STDIN`, for the `--huge`
 * benchmark (10M resources): the storage API (and NDJSON upload over HTTP) writes about 800
 * resources/s with the search index on this machine, hours for 10M. The rows are those
 * `applyResourceWrites` writes for a first version of each resource (`storedVersion`, the
 * patient compartment, `identifierRows`, the indexer's `IndexRows`), with seqs and instants
 * handed out by the store's own `allocate`; only the transport differs: one COPY per table,
 * each on its own connection, all fed from one pass over the resources. test/bench/pg-resource-load
 * checks the tables against the same resources written through the store.
 *
 * For a fresh project with no other writer meanwhile: resources are written as new (version 1),
 * so an id already stored would break the unique index.
 */
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { allocate, storedVersion } from '../src/storage/postgres/resource-writes.js';
import { identifierRows, quoteIdentifier } from '../src/storage/postgres/schema.js';
import {
  IndexRows,
  indexColumnNames,
  keptEntries,
  searchKeyNumbers,
} from '../src/storage/postgres/index-rows.js';
import { INDEX_TABLES } from '../src/storage/postgres/search-tables.js';
import type { Query } from '../src/storage/postgres/executor.js';
import type { ResourceIndexer } from '../src/storage/search-index.js';
import type { FhirResource, PatientCompartment, StoredResource } from '../src/storage/types.js';
import { now } from './stats.js';

/** The tables the loader fills, with their columns in COPY order. */
const TABLES: Record<string, string[]> = {
  resources: [
    'seq',
    'project_id',
    'resource_type',
    'id',
    'version_id',
    'lu',
    'deleted',
    'superseded_seq',
    'body',
  ],
  resource_compartments: ['project_id', 'patient_id', 'resource_type', 'seq'],
  resource_identifiers: ['project_id', 'resource_type', 'key', 'seq'],
  ...Object.fromEntries(INDEX_TABLES.map((t) => [t, indexColumnNames(t)])),
};

type Cell = string | number | boolean | null | undefined;

/** A value in COPY's text format (backslash, tab, newline and carriage return escaped). */
function copyCell(value: Cell): string {
  if (value === null || value === undefined) return '\\N';
  if (typeof value === 'boolean') return value ? 't' : 'f';
  if (typeof value === 'number') return String(value);
  return value.replace(/[\\\t\n\r]/g, (c) => ({ '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' })[c]!);
}

const line = (cells: readonly Cell[]): string => `${cells.map(copyCell).join('\t')}\n`;

/** The non-constraint indexes of `tables` in `schema`, with their definitions. */
async function secondaryIndexes(
  client: pg.Client,
  schema: string,
  tables: string[],
): Promise<{ name: string; def: string }[]> {
  const { rows } = await client.query<{ name: string; def: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name, pg_get_indexdef(i.indexrelid) AS def
       FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid
       JOIN pg_class t ON t.oid = i.indrelid
       JOIN pg_namespace n ON n.oid = t.relnamespace
      WHERE n.nspname = $1 AND t.relname = ANY($2::text[])
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
      ORDER BY c.relname`,
    [schema, tables],
  );
  return rows;
}

export interface CopyLoadResult {
  resources: number;
  /** Rows written per table. */
  rows: Record<string, number>;
  /** The whole load, index rebuild and `ANALYZE` included, ms. */
  ms: number;
  /** Rebuilding the dropped indexes, ms (0 when none were dropped). */
  indexMs: number;
}

/**
 * Writes `resources` (each with an `id`, none stored yet) as first versions into project
 * `projectId` of the store in `schema`, with the rows the store writes, by `COPY`.
 * `dropIndexes` (default true) drops the tables' secondary indexes first and rebuilds them after
 * (two at a time): a B-tree built once is several times cheaper than one kept up to date row by row.
 */
export async function copyResourcesIn(options: {
  connectionString: string;
  schema: string;
  projectId: string;
  resources: Iterable<FhirResource>;
  indexer: ResourceIndexer;
  compartment: PatientCompartment;
  /** Resources per allocation of seqs and instants (default 1,000: the rows of a batch are built in one synchronous stretch, which holds up the event loop of the process it runs in). */
  batchSize?: number;
  dropIndexes?: boolean;
  log?: (line: string) => void;
}): Promise<CopyLoadResult> {
  const { schema, projectId, indexer, compartment } = options;
  const s = quoteIdentifier(schema);
  const batchSize = options.batchSize ?? 1000;
  const log = options.log ?? (() => undefined);
  const start = now();
  const connect = async (): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString: options.connectionString });
    await client.connect();
    return client;
  };
  const admin = await connect();
  const copiers: pg.Client[] = [];
  const rows: Record<string, number> = Object.fromEntries(Object.keys(TABLES).map((t) => [t, 0]));
  let dropped: { name: string; def: string }[] = [];
  let indexMs = 0;
  let count = 0;
  const streams = new Map<string, Writable>();
  const done: Promise<void>[] = [];
  try {
    if (options.dropIndexes ?? true) {
      dropped = await secondaryIndexes(admin, schema, Object.keys(TABLES));
      for (const index of dropped) await admin.query(`DROP INDEX ${index.name}`);
    }
    const query: Query = (text, values) => admin.query(text, values) as never;
    for (const [table, columns] of Object.entries(TABLES)) {
      const client = await connect();
      copiers.push(client);
      const stream = client.query(copyFrom(`COPY ${s}.${table} (${columns.join(', ')}) FROM STDIN`));
      streams.set(table, stream);
      const finished = new Promise<void>((resolve, reject) => {
        stream.on('finish', resolve);
        stream.on('error', reject);
      });
      finished.catch(() => undefined); // Awaited below; a failure meanwhile is not unhandled.
      done.push(finished);
    }
    // Each table's text of one batch, written at once; waits while any stream is full.
    const flush = async (text: Map<string, string[]>): Promise<void> => {
      const waits: Promise<unknown>[] = [];
      for (const [table, lines] of text) {
        if (lines.length === 0) continue;
        rows[table] = rows[table]! + lines.length;
        const stream = streams.get(table)!;
        // `once` rejects when the stream fails instead (the COPY's error).
        if (!stream.write(lines.join(''))) waits.push(once(stream, 'drain'));
      }
      await Promise.all(waits);
    };
    const write = async (batch: FhirResource[]): Promise<void> => {
      const { lu: firstLu, seqs } = await allocate(query, s, projectId, batch.length);
      const text = new Map<string, string[]>(Object.keys(TABLES).map((t) => [t, []]));
      const index = new IndexRows(indexer);
      const versions: [string, string, StoredResource][] = [];
      batch.forEach((resource, i) => {
        const seq = seqs[i]!;
        const lu = firstLu + i;
        const id = resource.id!;
        const { stored, body, parsed } = storedVersion(resource, id, '1', lu);
        text
          .get('resources')!
          .push(line([seq, projectId, stored.resourceType, id, '1', lu, false, null, body]));
        for (const patient of new Set(compartment.patientIds(stored)))
          text.get('resource_compartments')!.push(line([projectId, patient, stored.resourceType, seq]));
        if (parsed) versions.push([seq, stored.resourceType, parsed]);
        index.add(seq, stored.resourceType, keptEntries(indexer, stored));
      });
      const ids = identifierRows(versions);
      ids.keys.forEach((key, i) =>
        text.get('resource_identifiers')!.push(line([projectId, ids.types[i]!, key, ids.seqs[i]!])),
      );
      // Each row's pair position as its `search_keys` number (the store numbers them in its insert).
      const keys = await searchKeyNumbers(query, s, projectId, index.pairs);
      for (const [table, rows] of index.rows) {
        const lines = text.get(table)!;
        const width = TABLES[table]!.length; // (a row leaves out its trailing NULLs; COPY needs every cell)
        for (const [seq, pair, ...rest] of rows) {
          const cells = [seq, keys[(pair as number) - 1], ...rest];
          while (cells.length < width) cells.push(null);
          lines.push(line(cells));
        }
      }
      await flush(text);
    };
    let batch: FhirResource[] = [];
    let reported = 0;
    for (const resource of options.resources) {
      batch.push(resource);
      if (batch.length < batchSize) continue;
      await write(batch);
      count += batch.length;
      batch = [];
      if (count - reported >= 200_000) {
        reported = count;
        log(`COPY: ${count} resources in ${Math.round((now() - start) / 1000)} s`);
      }
    }
    if (batch.length > 0) await write(batch);
    count += batch.length;
    for (const stream of streams.values()) stream.end();
    await Promise.all(done);
    log(
      `COPY: ${count} resources in ${Math.round((now() - start) / 1000)} s; rebuilding ${dropped.length} indexes`,
    );
    const indexStart = now();
    const queue = [...dropped];
    await Promise.all(
      copiers.slice(0, 2).map(async (client) => {
        await client.query(`SET maintenance_work_mem = '256MB'`);
        for (let next = queue.shift(); next; next = queue.shift()) await client.query(next.def);
      }),
    );
    indexMs = dropped.length > 0 ? now() - indexStart : 0;
    await admin.query(
      `ANALYZE ${Object.keys(TABLES)
        .map((t) => `${s}.${t}`)
        .join(', ')}`,
    );
    dropped = [];
    return { resources: count, rows, ms: now() - start, indexMs };
  } catch (error) {
    // Every COPY still open fails too (rolled back), so that its connection can end.
    for (const stream of streams.values()) stream.destroy(error as Error);
    await Promise.allSettled(done);
    throw error;
  } finally {
    // A failed load leaves the schema with its indexes (what it committed, if anything, stays).
    for (const index of dropped) {
      await admin
        .query(index.def.replace(/^CREATE (UNIQUE )?INDEX /, 'CREATE $1INDEX IF NOT EXISTS '))
        .catch(() => undefined);
    }
    await Promise.all([admin, ...copiers].map((client) => client.end().catch(() => undefined)));
  }
}
