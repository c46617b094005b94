import type { Pool, PoolClient } from 'pg';
import type { CompositeIndexValue, IndexValue, TokenIndexValue } from '../index-values.js';
import {
  indexerGetter,
  type IndexerOption,
  type ResourceIndexEntries,
  type ResourceIndexer,
} from '../search-index.js';
import type { FhirResource } from '../types.js';
import type { Query } from './executor.js';
import { forEachLiveSlice, quoteIdentifier } from './schema.js';

/*
 * The search index tables of the PostgreSQL store: one per value kind, a row per value a search
 * parameter sees in a current, live version (`ResourceIndexer` entries), keyed by the version's
 * `seq`, with its project, type and parameter code. Rows are written in the version's transaction
 * and deleted when a newer version or a tombstone supersedes it, so every row is searchable as is
 * (no join on the version's state). A composite's elements are rows of the tables of their
 * components: `elem` numbers the element within the version, `comp` the component; plain values
 * have neither. A composite element with a component that sees no value is no composite value: it
 * has no rows (so `:missing` is the absence of rows, as for the other kinds). Date rows carry the hull of their
 * parameter's values in the version (`hlo`, `hhi`), which a GiST index keys, so that a range
 * (`ge` with `lt`) is one index lookup on both bounds. See docs/storage.md (PostgreSQL, Search).
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

/** Open ends of ranges, stored as finite numbers: what `sortValuesOf` answers for them. */
export const LOWEST = -Number.MAX_VALUE;
export const HIGHEST = Number.MAX_VALUE;

/** Characters of a value the B-tree indexes hold (a longer value is checked on the row itself). */
export const KEY_CHARS = 100;

/** The index tables, in the order rows are built and inserted. */
export const INDEX_TABLES = [
  'search_tokens',
  'search_strings',
  'search_dates',
  'search_numbers',
  'search_references',
  'search_uris',
] as const;

/** One index table. */
export type IndexTable = (typeof INDEX_TABLES)[number];

/** The table, and the columns after the common ones, of each value kind. */
const COLUMNS: Record<IndexTable, [name: string, type: string][]> = {
  search_tokens: [
    ['system', 'text'],
    ['value', 'text'],
    ['display', 'text'],
    ['types', 'jsonb'],
    ['system_full', 'text'],
    ['value_full', 'text'],
  ],
  search_strings: [
    ['norm', 'text'],
    ['exact', 'text'],
  ],
  search_dates: [
    ['lo', 'float8'],
    ['hi', 'float8'],
    ['hlo', 'float8'],
    ['hhi', 'float8'],
  ],
  search_numbers: [
    ['quantity', 'boolean'],
    ['empty', 'boolean'],
    ['lo', 'float8'],
    ['hi', 'float8'],
    ['system', 'text'],
    ['unit_code', 'text'],
    ['unit', 'text'],
  ],
  search_references: [
    ['target_type', 'text'],
    ['target_id', 'text'],
    ['url', 'text'],
    ['version', 'text'],
    ['ident', 'boolean'],
    ['id_system', 'text'],
    ['id_value', 'text'],
  ],
  search_uris: [['value', 'text']],
};

/** The columns added after migration 8 (by the migration of that number). */
const LATER_COLUMNS: Readonly<Record<string, number>> = { hlo: 9, hhi: 9, system_full: 11, value_full: 11 };

/** Migration 8's B-tree lookup index of each table (after `project_id, resource_type, param`). */
const LOOKUP_8: Partial<Record<IndexTable, string>> = {
  search_numbers: 'lo, hi',
  search_references: 'target_id, target_type, seq',
};

/**
 * Migration 9's lookup indexes, in place of migration 8's on these tables: dates have the GiST
 * index of {@link dateBoxSql}; the text keys end at the value, without `seq` (an expression key
 * never serves an index-only scan, and without `seq` the rows of one value share one
 * deduplicated entry, a smaller index to write).
 */
const LOOKUP_9: Partial<Record<IndexTable, string>> = {
  search_tokens: `left(value, ${KEY_CHARS})`,
  search_strings: `left(norm, ${KEY_CHARS})`,
  search_uris: `left(value, ${KEY_CHARS})`,
};

const sqlType = (type: string): string => (type === 'text' ? 'text COLLATE "C"' : type);

/**
 * Hull bounds are clamped to ±1e16 ms (years ±300,000) before they key the GiST index: a box of
 * ±`Number.MAX_VALUE` sides makes its penalties infinite. Clamping is monotonic, so a hull test on
 * clamped numbers is true whenever the one on the real numbers is.
 */
export const HULL_LIMIT = 1e16;

/** `x` within ±{@link HULL_LIMIT}. */
export const clampHull = (x: number): number => Math.max(-HULL_LIMIT, Math.min(HULL_LIMIT, x));

/**
 * The GiST key of a date row, or of a query on one (`key` the SQL of its project, type and code
 * as text; `lo`, `hi` SQL numbers): a box one unit wide whose x is a hash of the key and whose y
 * spans the hull. A hash collision (or a neighbouring hash) only adds candidates, which the
 * equality on the row's project, type and code then drops. The unit width matters: the GiST
 * chooses a page by the growth of its area, and a box of no width has no area whatever its span,
 * so migration 9's degenerate boxes were placed without regard to their dates (a month's lookup
 * read 1,900 index pages at 1M resources; 60 with the width, see docs/performance.md).
 */
export function dateBoxSql(key: string, lo: string, hi: string): string {
  const x = `hashtext(${key})::float8`;
  return `box(point(${x}, ${lo}), point(${x} + 1, ${hi}))`;
}

/** The key {@link dateBoxSql} hashes, from SQL text expressions. */
export const dateKeySql = (project: string, type: string, param: string): string =>
  `${project} || chr(1) || ${type} || chr(1) || ${param}`;

/**
 * Migration 9: hull columns on `search_dates` and its GiST index in place of the B-tree one, and
 * the text lookup indexes without `seq` (the tables are refilled by `syncSearchIndex`: the
 * migration forgets the indexer's fingerprint).
 */
export function searchTableStatements9(s: string): string[] {
  return [
    `ALTER TABLE ${s}.search_dates ADD COLUMN IF NOT EXISTS hlo float8`,
    `ALTER TABLE ${s}.search_dates ADD COLUMN IF NOT EXISTS hhi float8`,
    `DROP INDEX IF EXISTS ${s}.search_dates_lookup`,
    // (Its GiST index, `search_dates_box`, is migration 11's `search_dates_span` now.)
    ...Object.entries(LOOKUP_9).flatMap(([table, key]) => [
      `DROP INDEX IF EXISTS ${s}.${table}_lookup`,
      // Migration 11 replaces the token one.
      ...(table === 'search_tokens'
        ? []
        : [
            `CREATE INDEX IF NOT EXISTS ${table}_value ON ${s}.${table} (project_id, resource_type, param, ${key})`,
          ]),
    ]),
  ];
}

/**
 * Migration 11: the date GiST index on boxes of unit width ({@link dateBoxSql}); token rows keep `system` and `value` as B-tree keys ({@link tokenKey}, the whole
 * text beside them only when longer), and one lookup index ends at value, system and `seq`, all
 * plain columns: a `system|code` lookup, and its count, is an index-only scan (no heap visit per
 * row to check the system or read the `seq`). The rows are rebuilt (`migrate` forgets the
 * fingerprint), and without `_lastUpdated` date rows (the `resources` row's `lu` answers it).
 */
export function searchTableStatements11(s: string): string[] {
  return [
    `ALTER TABLE ${s}.search_tokens ADD COLUMN IF NOT EXISTS system_full text COLLATE "C"`,
    `ALTER TABLE ${s}.search_tokens ADD COLUMN IF NOT EXISTS value_full text COLLATE "C"`,
    `DROP INDEX IF EXISTS ${s}.search_tokens_value`,
    `CREATE INDEX IF NOT EXISTS search_tokens_key
      ON ${s}.search_tokens (project_id, resource_type, param, value, system, seq)`,
    `DROP INDEX IF EXISTS ${s}.search_dates_box`,
    `CREATE INDEX IF NOT EXISTS search_dates_span ON ${s}.search_dates USING gist
      (${dateBoxSql(dateKeySql('project_id', 'resource_type', 'param'), 'hlo', 'hhi')})`,
  ];
}

/**
 * A token text as its B-tree key and, when the key is not all of it, the whole text: the first
 * {@link KEY_CHARS} characters then U+0001, which no shorter text has at that place. Equal texts
 * have equal keys, and a text of at most `KEY_CHARS` characters is its own key (so that its
 * equality is one index test).
 */
export function tokenKey(text: string): [key: string, full: string | null] {
  if (text.length <= KEY_CHARS) return [text, null];
  const chars = Array.from(text); // PostgreSQL counts code points, not UTF-16 units.
  if (chars.length <= KEY_CHARS) return [text, null];
  return [`${chars.slice(0, KEY_CHARS).join('')}\u0001`, text];
}

/** Migration 8: the index tables and `search_index_state` (the indexer's fingerprint). */
export function searchTableStatements(s: string): string[] {
  const id = 'text COLLATE "C" NOT NULL';
  const out = [
    `CREATE TABLE IF NOT EXISTS ${s}.search_index_state (
      singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      fingerprint text NOT NULL)`,
  ];
  for (const table of INDEX_TABLES) {
    // Migration 8's columns (later ones add the rest).
    const columns = COLUMNS[table]
      .filter(([name]) => LATER_COLUMNS[name] === undefined)
      .map(([name, type]) => `${name} ${sqlType(type)}`)
      .join(', ');
    out.push(
      `CREATE TABLE IF NOT EXISTS ${s}.${table} (
        seq bigint NOT NULL, project_id ${id}, resource_type ${id}, param ${id},
        elem integer, comp integer, ${columns})`,
      `CREATE INDEX IF NOT EXISTS ${table}_seq ON ${s}.${table} (seq)`,
    );
    const lookup = LOOKUP_8[table];
    if (lookup !== undefined) {
      out.push(
        `CREATE INDEX IF NOT EXISTS ${table}_lookup
          ON ${s}.${table} (project_id, resource_type, param, ${lookup})`,
      );
    }
  }
  return out;
}

/** NUL, which PostgreSQL text cannot hold, as U+FFFD (search values are mapped the same way). */
export function pgText(value: string): string;
export function pgText(value: string | undefined): string | undefined;
export function pgText(value: string | undefined): string | undefined {
  return value?.includes('\u0000') ? value.replaceAll('\u0000', '\uFFFD') : value;
}

type Cell = string | number | boolean | null;

/** A `CodeableConcept.text` alone: a token row with no value, which only `:text` can match. */
const textOnly = (v: IndexValue | CompositeIndexValue): v is TokenIndexValue & { text: string } =>
  v.type === 'token' &&
  v.code === undefined &&
  v.system === undefined &&
  v.types === undefined &&
  v.text !== undefined;

/**
 * `values` with their text-only tokens folded into the other rows: a text another token of the
 * list already has as its display needs no row, and one a coded token without a display can carry
 * goes there. Only `:text` reads a display (`starts_with` on any row of the parameter), and it
 * finds the same texts, on as many rows or fewer; value searches never matched a row without value.
 */
function foldTexts<T extends IndexValue | CompositeIndexValue>(values: readonly T[]): T[] {
  if (!values.some(textOnly) || values.every(textOnly)) return values as T[];
  const out = values.filter((v) => !textOnly(v));
  for (const v of values) {
    if (!textOnly(v)) continue;
    if (out.some((o) => o.type === 'token' && o.text === v.text)) continue;
    const at = out.findIndex((o) => o.type === 'token' && o.code !== undefined && o.text === undefined);
    if (at === -1) out.push(v);
    else out[at] = { ...(out[at] as TokenIndexValue), text: v.text } as T;
  }
  return out;
}

/** {@link tokenKey} of a text or NULL. */
const keyCells = (text: string | null): [string | null, string | null] =>
  text === null ? [null, null] : tokenKey(text);

/** The hull `[lo, hi]` widened to hold `[a, b]` (either way round). */
function widen(hull: [number, number] | undefined, a: number, b: number): [number, number] {
  const [lo, hi] = [Math.min(a, b), Math.max(a, b)];
  return hull ? [Math.min(hull[0], lo), Math.max(hull[1], hi)] : [lo, hi];
}

/** The rows of a batch, column by column (what `unnest` takes). */
export class IndexRows {
  readonly columns = new Map<IndexTable, Cell[][]>(
    INDEX_TABLES.map((t) => [t, Array.from({ length: 5 + COLUMNS[t].length }, () => [])]),
  );

  // Each table's columns, by name (pushed to directly: this runs for every value of every write).
  private readonly tokens = this.columns.get('search_tokens')!;
  private readonly strings = this.columns.get('search_strings')!;
  private readonly dates = this.columns.get('search_dates')!;
  private readonly numbers = this.columns.get('search_numbers')!;
  private readonly references = this.columns.get('search_references')!;
  private readonly uris = this.columns.get('search_uris')!;

  /** The rows of one version's entries. */
  add(seq: string, resourceType: string, entries: ResourceIndexEntries): void {
    for (const param in entries) {
      // The version's own `id` and `lu` columns: no rows.
      if (param === '_id' || param === '_lastUpdated') continue;
      const values = entries[param]!;
      let elem = 0;
      let hull: [number, number] | undefined;
      for (const value of values) {
        if (value.type === 'date') hull = widen(hull, value.start ?? LOWEST, value.end ?? HIGHEST);
      }
      for (const value of foldTexts(values)) {
        if (value.type !== 'composite') {
          this.value(seq, resourceType, param, null, null, value, hull);
          continue;
        }
        // An element with a component that sees nothing is no composite value: no rows.
        if (value.components.some((component) => component.length === 0)) continue;
        value.components.forEach((component, comp) => {
          for (const v of foldTexts(component)) this.value(seq, resourceType, param, elem, comp, v);
        });
        elem++;
      }
    }
  }

  /** Starts a row of `columns`: its five common cells. */
  private static head(
    columns: Cell[][],
    seq: string,
    type: string,
    param: string,
    elem: number | null,
    comp: number | null,
  ): void {
    columns[0]!.push(seq);
    columns[1]!.push(type);
    columns[2]!.push(param);
    columns[3]!.push(elem);
    columns[4]!.push(comp);
  }

  private value(
    seq: string,
    type: string,
    param: string,
    elem: number | null,
    comp: number | null,
    v: IndexValue,
    hull?: [number, number],
  ): void {
    const t = (x: string | undefined): string | null => (x === undefined ? null : pgText(x));
    switch (v.type) {
      case 'token': {
        const c = this.tokens;
        IndexRows.head(c, seq, type, param, elem, comp);
        const [system, systemFull] = keyCells(t(v.system));
        const [value, valueFull] = keyCells(t(v.code));
        c[5]!.push(system);
        c[6]!.push(value);
        c[7]!.push(t(v.text));
        c[8]!.push(v.types ? pgText(wellFormedJson(JSON.stringify(v.types))) : null);
        c[9]!.push(systemFull);
        c[10]!.push(valueFull);
        return;
      }
      case 'string': {
        const c = this.strings;
        IndexRows.head(c, seq, type, param, elem, comp);
        c[5]!.push(pgText(v.normalized));
        c[6]!.push(pgText(v.exact));
        return;
      }
      case 'date': {
        const c = this.dates;
        IndexRows.head(c, seq, type, param, elem, comp);
        const lo = v.start ?? LOWEST;
        const hi = v.end ?? HIGHEST;
        // A composite's component: its own span.
        const [hlo, hhi] = hull ?? widen(undefined, lo, hi);
        c[5]!.push(lo);
        c[6]!.push(hi);
        c[7]!.push(clampHull(hlo));
        c[8]!.push(clampHull(hhi));
        return;
      }
      case 'number':
      case 'quantity': {
        const c = this.numbers;
        IndexRows.head(c, seq, type, param, elem, comp);
        const q = v.type === 'quantity' ? v : undefined;
        c[5]!.push(v.type === 'quantity');
        c[6]!.push(v.value === undefined && v.low === undefined && v.high === undefined);
        c[7]!.push(v.value ?? v.low ?? LOWEST);
        c[8]!.push(v.value ?? v.high ?? HIGHEST);
        c[9]!.push(t(q?.system));
        c[10]!.push(t(q?.code));
        c[11]!.push(t(q?.unit));
        return;
      }
      case 'reference': {
        const c = this.references;
        IndexRows.head(c, seq, type, param, elem, comp);
        c[5]!.push(t(v.resourceType));
        c[6]!.push(t(v.id));
        c[7]!.push(t(v.url));
        c[8]!.push(t(v.version));
        c[9]!.push(v.identifier !== undefined);
        c[10]!.push(t(v.identifier?.system));
        c[11]!.push(t(v.identifier?.value));
        return;
      }
      case 'uri': {
        const c = this.uris;
        IndexRows.head(c, seq, type, param, elem, comp);
        c[5]!.push(pgText(v.value));
        return;
      }
    }
  }

  get empty(): boolean {
    return [...this.columns.values()].every((c) => c[0]!.length === 0);
  }
}

/** The columns of `table` that {@link IndexRows} fills, in its order (every column but `project_id`). */
export function indexColumnNames(table: IndexTable): string[] {
  return ['seq', 'resource_type', 'param', 'elem', 'comp', ...COLUMNS[table].map(([n]) => n)];
}

/** A `\uXXXX` escape of a lone surrogate in JSON text, after an even run of backslashes. */
const LONE_SURROGATE = /((?:^|[^\\])(?:\\\\)*)\\u[dD][89a-fA-F][0-9a-fA-F]{2}/g;

/**
 * JSON text with its lone surrogates as U+FFFD. `JSON.stringify` escapes a lone surrogate
 * (`\ud800`), which `jsonb` refuses; a text parameter is sent as UTF-8, which writes U+FFFD for it
 * (the `body` column's text, and a search value's), so the index rows are made to say the same.
 */
export function wellFormedJson(json: string): string {
  if (!/\\u[dD][89a-fA-F]/.test(json)) return json;
  // Twice: a match consumes the character before the escape, so adjacent escapes need a second pass.
  const once = json.replace(LONE_SURROGATE, '$1\\ufffd');
  return once.replace(LONE_SURROGATE, '$1\\ufffd');
}

/**
 * Inserts `rows` (of project `projectId`) in one statement: an `INSERT … SELECT` per table that has
 * rows, each table's rows one JSON parameter (an array of row arrays) that PostgreSQL reads with
 * `jsonb_array_elements`. V8's native `JSON.stringify` makes it; array parameters (`unnest`) are
 * serialized cell by cell in JavaScript by the driver, which cost about 40 µs per Synthea resource
 * (a store-level write of Synthea resources took 8% longer).
 */
export async function insertIndexRows(
  query: Query,
  s: string,
  projectId: string,
  rows: IndexRows,
): Promise<void> {
  const values: unknown[] = [projectId];
  const inserts: string[] = [];
  for (const table of INDEX_TABLES) {
    const columns = rows.columns.get(table)!;
    const count = columns[0]!.length;
    if (count === 0) continue;
    const names = indexColumnNames(table);
    const types = ['bigint', 'text', 'text', 'integer', 'integer', ...COLUMNS[table].map(([, t]) => t)];
    const tuples = new Array<Cell[]>(count);
    for (let r = 0; r < count; r++) {
      const tuple = new Array<Cell>(columns.length);
      for (let c = 0; c < columns.length; c++) tuple[c] = columns[c]![r]!;
      tuples[r] = tuple;
    }
    values.push(wellFormedJson(JSON.stringify(tuples)));
    const cells = types.map((type, i) => `(e->>${i})::${type}`);
    inserts.push(
      `INSERT INTO ${s}.${table} (project_id, ${names.join(', ')})
       SELECT $1, ${cells.join(', ')} FROM jsonb_array_elements($${values.length}::jsonb) e`,
    );
  }
  if (inserts.length === 0) return;
  const [last, ...first] = inserts.reverse();
  const ctes = first.map((sql, i) => `i${i} AS (${sql})`);
  await query(`${ctes.length > 0 ? `WITH ${ctes.join(', ')} ` : ''}${last!}`, values, true);
}

/** The statement parts deleting the index rows of the seqs in parameter `param` (CTEs). */
export function deleteIndexRowsCtes(s: string, param: string): string[] {
  return INDEX_TABLES.map((t) => `d_${t} AS (DELETE FROM ${s}.${t} WHERE seq = ANY(${param}::bigint[]))`);
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
    await client.query('BEGIN');
    await client.query('SET LOCAL statement_timeout = 0');
    await client.query('SET LOCAL lock_timeout = 0');
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`fhir-platform-kit:${schema}`]);
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
      if (!set) byProject.set(row.project_id, (set = new IndexRows()));
      set.add(row.seq, row.resource_type, indexer.index(JSON.parse(row.body) as FhirResource));
    }
    for (const [projectId, set] of byProject) await insertIndexRows(query, s, projectId, set);
  });
}
