import type { CompositeIndexValue, IndexValue, TokenIndexValue } from '../index-values.js';
import type { ResourceIndexEntries } from '../search-index.js';
import type { Query } from './executor.js';
import {
  clampHull,
  HIGHEST,
  INDEX_COLUMNS,
  INDEX_TABLES,
  LOWEST,
  pgText,
  tokenKey,
  type IndexTable,
} from './search-tables.js';

/*
 * The index rows of new versions (search-tables.ts has the tables): built from the indexer's
 * entries, column by column, and inserted in one statement per batch of writes.
 */

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
    INDEX_TABLES.map((t) => [t, Array.from({ length: 5 + INDEX_COLUMNS[t].length }, () => [])]),
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
  return ['seq', 'resource_type', 'param', 'elem', 'comp', ...INDEX_COLUMNS[table].map(([n]) => n)];
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
    const types = ['bigint', 'text', 'text', 'integer', 'integer', ...INDEX_COLUMNS[table].map(([, t]) => t)];
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
