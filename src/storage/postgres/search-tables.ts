/*
 * The search index tables of the PostgreSQL store: one per value kind, a row per value a search
 * parameter sees in a current, live version (`ResourceIndexer` entries), keyed by the version's
 * `seq`, with its project, type and parameter code. Rows are written in the version's transaction
 * and deleted when a newer version or a tombstone supersedes it, so every row is searchable as is
 * (no join on the version's state). A composite's elements are rows of the tables of their
 * components: `elem` numbers the element within the version, `comp` the component; plain values
 * have neither. A composite element with a component that sees no value is no composite value: it
 * has no rows (so `:missing` is the absence of rows, as for the other kinds). Date rows carry the
 * hull of their parameter's values in the version (`hlo`, `hhi`), which a GiST index keys, so that
 * a range (`ge` with `lt`) is one index lookup on both bounds. The rows are built and inserted by
 * index-rows.ts, rebuilt by search-index-sync.ts. See docs/storage.md (PostgreSQL, Search).
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
    const columns = INDEX_COLUMNS[table]
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

/** The statement parts deleting the index rows of the seqs in parameter `param` (CTEs). */
export function deleteIndexRowsCtes(s: string, param: string): string[] {
  return INDEX_TABLES.map((t) => `d_${t} AS (DELETE FROM ${s}.${t} WHERE seq = ANY(${param}::bigint[]))`);
}
