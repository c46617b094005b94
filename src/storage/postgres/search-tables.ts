/*
 * The search index tables of the PostgreSQL store: one per value kind, a row per value a search
 * parameter sees in a current, live version (`ResourceIndexer` entries), keyed by the version's
 * `seq` and by `key`, a small integer naming its project, type and parameter code (a row of
 * `search_keys`, whose numbers are never reused). Rows are written in the version's transaction
 * and deleted when a newer version or a tombstone supersedes it, so every row is searchable as is
 * (no join on the version's state). A composite's elements are rows of the tables of their
 * components: `elem` numbers the element within the version, `comp` the component; plain values
 * have neither. A composite element with a component that sees no value is no composite value: it
 * has no rows (so `:missing` is the absence of rows, as for the other kinds). Date rows carry the
 * hull of their parameter's values in the version (`hlo`, `hhi`), which a GiST index keys, so that
 * a range (`ge` with `lt`) is one index lookup on both bounds. The rows are built and inserted by
 * index-rows.ts, rebuilt by search-index-sync.ts. See docs/postgres-store.md, "Search in SQL".
 */

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
export const INDEX_COLUMNS: Record<IndexTable, [name: string, type: string][]> = {
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
    ['ident', 'boolean'],
    ['url', 'text'],
    ['version', 'text'],
    ['id_system', 'text'],
    ['id_value', 'text'],
  ],
  search_uris: [['value', 'text']],
};

/**
 * The lookup index of each table after `key` (migration 14): token rows are found by value and
 * system with their `seq`, all plain columns (a `system|code` lookup and its count read the index
 * alone); the string and uri keys end at the value's first {@link KEY_CHARS} characters, without
 * `seq` (an expression key never serves an index-only scan, and without `seq` the rows of one
 * value share one deduplicated entry); dates have the GiST index of {@link dateBoxSql}.
 */
const LOOKUP: Record<Exclude<IndexTable, 'search_dates'>, string> = {
  search_tokens: 'value, system, seq',
  search_strings: `left(norm, ${KEY_CHARS})`,
  search_numbers: 'lo, hi',
  search_references: 'target_id, target_type, seq',
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
 * The GiST key of a date row, or of a query on one (`key` the SQL of its `search_keys` number;
 * `lo`, `hi` SQL numbers): a box one unit wide at x = twice the key, whose y spans the hull, so
 * that the boxes of two keys never touch. The unit width matters: the GiST chooses a page by the
 * growth of its area, and a box of no width has no area whatever its span, so migration 9's
 * degenerate boxes were placed without regard to their dates (a month's lookup read 1,900 index
 * pages at 1M resources; 60 with the width, see docs/performance.md).
 */
export function dateBoxSql(key: string, lo: string, hi: string): string {
  const x = `(${key})::float8 * 2`;
  return `box(point(${x}, ${lo}), point(${x} + 1, ${hi}))`;
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

/**
 * The index tables' DDL. Migration 8 created them keyed by project id, type and parameter code as
 * texts in every row, and migrations 9 and 11 reshaped their indexes; migration 14 drops them (the
 * rows are rebuilt from the versions by `syncSearchIndex`, see schema.ts `migrate`) and creates
 * them keyed by `search_keys` numbers: a lookup index entry shrinks from about 60 bytes of key
 * texts to 4 (docs/performance.md, "Search on PostgreSQL"). `search_index_state` holds the
 * indexer's fingerprint. `current`: migration 14 is applied already, and the statements only
 * create what is missing.
 *
 * Migration 16 keys each table's `seq` index by `(seq, key)`: every test of one version's rows of
 * a parameter (a filter on a candidate, `:missing`, a sort value, a chain's or `_has`'s reference
 * rows) is then one probe on both columns. With only `(seq)`, a planner without statistics of the
 * table (autovacuum off, or not run yet since the load) took the lookup index, whose leading
 * column is `key`, and read every row of the parameter for each candidate: quadratic, a minute at
 * 16,000 Observations (docs/performance.md, "Costly searches on PostgreSQL").
 */
export function searchTableStatements(s: string, current: boolean): string[] {
  const name = 'text COLLATE "C" NOT NULL';
  const out = [
    `CREATE TABLE IF NOT EXISTS ${s}.search_index_state (
      singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      fingerprint text NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS ${s}.search_keys (
      key integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      project_id ${name}, resource_type ${name}, param ${name})`,
    `CREATE UNIQUE INDEX IF NOT EXISTS search_keys_name ON ${s}.search_keys (project_id, resource_type, param)`,
  ];
  for (const table of INDEX_TABLES) {
    const columns = INDEX_COLUMNS[table].map(([name, type]) => `${name} ${sqlType(type)}`).join(', ');
    if (!current) out.push(`DROP TABLE IF EXISTS ${s}.${table}`);
    out.push(
      `CREATE TABLE IF NOT EXISTS ${s}.${table} (
        seq bigint NOT NULL, key integer NOT NULL, elem integer, comp integer, ${columns})`,
      // Migration 16: a version's rows of one parameter, `(seq, key)` in place of `(seq)`.
      `CREATE INDEX IF NOT EXISTS ${table}_seq_key ON ${s}.${table} (seq, key)`,
      `DROP INDEX IF EXISTS ${s}.${table}_seq`,
      table === 'search_dates'
        ? `CREATE INDEX IF NOT EXISTS search_dates_span ON ${s}.search_dates USING gist
            (${dateBoxSql('key', 'hlo', 'hhi')})`
        : `CREATE INDEX IF NOT EXISTS ${table}_key ON ${s}.${table} (key, ${LOOKUP[table]})`,
    );
  }
  return out;
}

/**
 * SQL of the `search_keys` number of a project's type and parameter code (SQL texts), NULL when
 * none was ever written (so that a row test on it matches nothing).
 */
export const keyOfSql = (s: string, project: string, type: string, code: string): string =>
  `(SELECT key FROM ${s}.search_keys WHERE project_id = ${project} AND resource_type = ${type} AND param = ${code})`;

/** SQL of the `search_keys` numbers of a project's type and parameter codes (a SQL text array). */
export const keysOfSql = (s: string, project: string, type: string, codes: string): string =>
  `ARRAY(SELECT key FROM ${s}.search_keys
           WHERE project_id = ${project} AND resource_type = ${type} AND param = ANY(${codes}))`;

/** NUL, which PostgreSQL text cannot hold, as U+FFFD (search values are mapped the same way). */
export function pgText(value: string): string;
export function pgText(value: string | undefined): string | undefined;
export function pgText(value: string | undefined): string | undefined {
  return value?.includes('\u0000') ? value.replaceAll('\u0000', '\uFFFD') : value;
}

/** The statement parts deleting the index rows of the seqs in parameter `param` (CTEs). */
export function deleteIndexRowsCtes(s: string, param: string): string[] {
  return INDEX_TABLES.map((t) => `d_${t} AS (DELETE FROM ${s}.${t} WHERE seq = ANY(${param}::bigint[]))`);
}
