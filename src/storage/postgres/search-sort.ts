import type { SortKey } from '../search-request.js';
import type { IndexTable } from './search-tables.js';
import type { SearchSql } from './search-sql.js';

/*
 * `_sort` by search parameters in SQL: each key's value per match, as `sortValuesOf` computes it
 * (src/search/sort-values.ts), over the index tables of schema `s`.
 */

/**
 * The sort value of `key` for the version `seq` (`sortValuesOf`): the lowest of its values
 * ascending, the highest descending, NULL when it has none. Token and identifier pairs join their
 * parts with U+0001 where `sortValuesOf` uses NUL (which PostgreSQL text cannot hold):
 * {@link sortCursorValue} maps a cursor's values the same way.
 */
export function sortValueSql(
  sql: SearchSql,
  s: string,
  key: SortKey,
  seq: string,
  id: string,
  /** The searched type (a bind parameter). */
  type: string,
): string {
  const agg = key.descending ? 'max' : 'min';
  const t = sql.alias('k');
  const pair = (system: string, code: string): string => `coalesce(${system}, '') || chr(1) || ${code}`;
  let table: IndexTable;
  let expression: string;
  switch (key.type) {
    case 'string':
      [table, expression] = ['search_strings', `${t}.norm`];
      break;
    case 'token':
      if (key.code === '_id') return `(chr(1) || ${id})`;
      [table, expression] = [
        'search_tokens',
        `CASE WHEN ${t}.value IS NOT NULL
           THEN ${pair(`coalesce(${t}.system_full, ${t}.system)`, `coalesce(${t}.value_full, ${t}.value)`)} END`,
      ];
      break;
    case 'date':
      if (key.code === '_lastUpdated') {
        // No index rows: the version's `lu` (microseconds), as the instant's `[lo, hi]` in ms.
        return `(SELECT (${t}.lu / 1000${key.descending ? ' + 1' : ''})::float8 FROM ${s}.resources ${t}
                  WHERE ${t}.seq = ${seq})`;
      }
      [table, expression] = ['search_dates', key.descending ? `${t}.hi` : `${t}.lo`];
      break;
    case 'number':
    case 'quantity':
      [table, expression] = ['search_numbers', key.descending ? `${t}.hi` : `${t}.lo`];
      break;
    case 'reference':
      table = 'search_references';
      expression = `CASE WHEN ${t}.target_type IS NOT NULL AND ${t}.target_id IS NOT NULL
          THEN ${t}.target_type || '/' || ${t}.target_id
        WHEN ${t}.url IS NOT NULL THEN ${t}.url
        WHEN ${t}.id_value IS NOT NULL THEN ${pair(`${t}.id_system`, `${t}.id_value`)} END`;
      break;
    case 'uri':
      [table, expression] = ['search_uris', `${t}.value`];
      break;
    default:
      return 'NULL';
  }
  return `(SELECT ${agg}(${expression}) FROM ${s}.${table} ${t}
            WHERE ${t}.seq = ${seq} AND ${sql.paramIs(t, type, key.code)} AND ${t}.elem IS NULL)`;
}

/** A cursor's sort value as {@link sortValueSql} computes it (NUL as U+0001 in strings). */
export function sortCursorValue(value: string | number | null): string | number | null {
  return typeof value === 'string' ? value.replaceAll('\u0000', '\u0001') : value;
}

/** Whether a sort key's values are numbers (dates, numbers, quantities) rather than text. */
export function numericSortKey(key: SortKey): boolean {
  return key.type === 'date' || key.type === 'number' || key.type === 'quantity';
}
