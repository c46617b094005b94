import type { Pool, PoolClient } from 'pg';
import { indexerGetter, type IndexerOption, type ResourceIndexer } from '../search-index.js';
import type { FhirResource } from '../types.js';
import type { Query } from './executor.js';
import { IndexRows, insertIndexRows, keptEntries } from './index-rows.js';
import { beginSchemaLocked, forEachLiveSlice, quoteIdentifier } from './schema.js';
import { INDEX_TABLES } from './search-tables.js';

/*
 * The search index of a PostgreSQL store kept in line with its indexer: rebuilt from the current
 * versions when the indexer's fingerprint changes (or a migration forgot it), emptied of its
 * fingerprint when the store runs without one.
 */

/** The search index of a store: whether it keeps one, and its indexer once the store is open. */
export interface SearchIndex {
  readonly enabled: boolean;
  indexer?: ResourceIndexer;
  /** Loads the indexer and brings the tables in line with it (after the migrations). */
  open(): Promise<void>;
}

/** The search index of a store given `option` (none without one). */
export function searchIndexOf(pool: Pool, schema: string, option: IndexerOption | undefined): SearchIndex {
  const getIndexer = indexerGetter(option);
  const s = quoteIdentifier(schema);
  const index: SearchIndex = {
    enabled: option !== undefined,
    async open() {
      const indexer = await getIndexer();
      if (indexer) await syncSearchIndex(pool, schema, s, indexer);
      else await clearSearchIndex(pool, s);
      index.indexer = indexer;
    },
  };
  return index;
}

/**
 * Brings the index tables in line with `indexer`: when the fingerprint recorded in
 * `search_index_state` differs (or none is, as after migration 8), empties them and indexes every
 * current, live version again, in slices of 1,000 by `seq`, in one transaction under the schema's
 * advisory lock (writers wait for the tables meanwhile).
 */
export async function syncSearchIndex(
  pool: Pool,
  schema: string,
  s: string,
  indexer: ResourceIndexer,
): Promise<void> {
  const client = await pool.connect();
  try {
    await beginSchemaLocked(client, schema);
    const { rows } = await client.query<{ fingerprint: string }>(
      `SELECT fingerprint FROM ${s}.search_index_state`,
    );
    if (rows[0]?.fingerprint === indexer.fingerprint) {
      await client.query('COMMIT');
      return;
    }
    await client.query(`TRUNCATE ${INDEX_TABLES.map((t) => `${s}.${t}`).join(', ')}`);
    await reindexAll(client, s, indexer);
    await client.query(
      `INSERT INTO ${s}.search_index_state (fingerprint) VALUES ($1)
       ON CONFLICT (singleton) DO UPDATE SET fingerprint = excluded.fingerprint`,
      [indexer.fingerprint],
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/**
 * A store without an indexer writes no index rows: it forgets the fingerprint, so that a store
 * opened with an indexer again rebuilds the tables.
 */
export async function clearSearchIndex(pool: Pool, s: string): Promise<void> {
  await pool.query(`DELETE FROM ${s}.search_index_state`);
}

async function reindexAll(client: PoolClient, s: string, indexer: ResourceIndexer): Promise<void> {
  const query: Query = (text, values) => client.query(text, values as unknown[]) as never;
  await forEachLiveSlice(client, s, undefined, async (rows) => {
    const byProject = new Map<string, IndexRows>();
    for (const row of rows) {
      let set = byProject.get(row.project_id);
      if (!set) byProject.set(row.project_id, (set = new IndexRows(indexer)));
      set.add(row.seq, row.resource_type, keptEntries(indexer, JSON.parse(row.body) as FhirResource));
    }
    for (const [projectId, set] of byProject) await insertIndexRows(query, s, projectId, set);
  });
}
