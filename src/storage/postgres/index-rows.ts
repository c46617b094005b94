import type { CompositeIndexValue, IndexValue, TokenIndexValue } from '../index-values.js';
import type { ResourceIndexEntries, ResourceIndexer } from '../search-index.js';
import type { FhirResource } from '../types.js';
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
 * entries, row by row, and inserted in one statement per batch of writes, which also numbers the
 * (type, parameter) pairs the project had no `search_keys` number for yet.
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

/** A text cell: NULL, or the text as PostgreSQL can hold it ({@link pgText}). */
const textCell = (x: string | undefined): string | null => (x === undefined ? null : pgText(x));

/** Per indexer and type: the codes whose rows are kept (not derived), when the indexer lists its codes. */
const KEPT_CODES = new WeakMap<ResourceIndexer, Map<string, ReadonlySet<string> | undefined>>();

/**
 * The index entries of `resource` whose rows are kept: the indexer computes none of the derived
 * parameters (`ResourceIndexer.derived`) when it can list its codes (`codes`); else all, and
 * {@link IndexRows} drops the derived ones.
 */
export function keptEntries(indexer: ResourceIndexer, resource: FhirResource): ResourceIndexEntries {
  let byType = KEPT_CODES.get(indexer);
  if (!byType) KEPT_CODES.set(indexer, (byType = new Map<string, ReadonlySet<string> | undefined>()));
  const type = resource.resourceType;
  let kept = byType.get(type);
  if (!byType.has(type)) {
    const all = indexer.codes?.(type);
    const derived = indexer.derived?.(type);
    kept = all && derived && derived.size > 0 ? new Set([...all].filter((c) => !derived.has(c))) : undefined;
    if (all && all.size > 0) byType.set(type, kept); // Known types only: a bounded cache.
  }
  return indexer.index(resource, kept);
}

/**
 * The rows of a batch, per table, each row its cells in {@link indexColumnNames} order, with the
 * position (from 1) of its type and parameter code in `pairs` in place of its `key`. The
 * parameters the indexer names derived (`ResourceIndexer.derived`: their values are other
 * parameters' values) get no rows: search-sql.ts answers them from their parts.
 */
export class IndexRows {
  readonly rows = new Map<IndexTable, Cell[][]>(INDEX_TABLES.map((t) => [t, []]));
  /** The (type, code) pairs of the rows, in the order of their positions. */
  readonly pairs: { types: string[]; codes: string[] } = { types: [], codes: [] };
  private readonly positions = new Map<string, Map<string, number>>();

  constructor(private readonly indexer?: Pick<ResourceIndexer, 'derived'>) {}

  // Each table's rows, by name (pushed to directly: this runs for every value of every write).
  private readonly tokens = this.rows.get('search_tokens')!;
  private readonly strings = this.rows.get('search_strings')!;
  private readonly dates = this.rows.get('search_dates')!;
  private readonly numbers = this.rows.get('search_numbers')!;
  private readonly references = this.rows.get('search_references')!;
  private readonly uris = this.rows.get('search_uris')!;

  /** The rows of one version's entries. */
  add(seq: string, resourceType: string, entries: ResourceIndexEntries): void {
    const derived = this.indexer?.derived?.(resourceType);
    for (const param in entries) {
      // The version's own `id` and `lu` columns: no rows.
      if (param === '_id' || param === '_lastUpdated' || derived?.has(param)) continue;
      const values = entries[param]!;
      if (values.length === 0) continue;
      const pair = this.position(resourceType, param);
      let elem = 0;
      let hull: [number, number] | undefined;
      for (const value of values) {
        if (value.type === 'date') hull = widen(hull, value.start ?? LOWEST, value.end ?? HIGHEST);
      }
      for (const value of foldTexts(values)) {
        if (value.type !== 'composite') {
          this.value(seq, pair, null, null, value, hull);
          continue;
        }
        // An element with a component that sees nothing is no composite value: no rows.
        if (value.components.some((component) => component.length === 0)) continue;
        value.components.forEach((component, comp) => {
          for (const v of foldTexts(component)) this.value(seq, pair, elem, comp, v);
        });
        elem++;
      }
    }
  }

  /** The position (from 1) of `type` and `code` in {@link pairs}, added when new. */
  private position(type: string, code: string): number {
    let byCode = this.positions.get(type);
    if (!byCode) this.positions.set(type, (byCode = new Map<string, number>()));
    let at = byCode.get(code);
    if (at === undefined) {
      at = this.pairs.types.push(type);
      this.pairs.codes.push(code);
      byCode.set(code, at);
    }
    return at;
  }

  private value(
    seq: string,
    pair: number,
    elem: number | null,
    comp: number | null,
    v: IndexValue,
    hull?: [number, number],
  ): void {
    switch (v.type) {
      case 'token': {
        const [system, systemFull] = keyCells(textCell(v.system));
        const [value, valueFull] = keyCells(textCell(v.code));
        const types = v.types ? pgText(wellFormedJson(JSON.stringify(v.types))) : null;
        this.tokens.push(
          trimmed([seq, pair, system, value, textCell(v.text), types, systemFull, valueFull, elem, comp]),
        );
        return;
      }
      case 'string':
        this.strings.push(trimmed([seq, pair, pgText(v.normalized), pgText(v.exact), elem, comp]));
        return;
      case 'date': {
        const lo = v.start ?? LOWEST;
        const hi = v.end ?? HIGHEST;
        // A composite's component: its own span.
        const [hlo, hhi] = hull ?? widen(undefined, lo, hi);
        this.dates.push(trimmed([seq, pair, lo, hi, clampHull(hlo), clampHull(hhi), elem, comp]));
        return;
      }
      case 'number':
      case 'quantity': {
        const q = v.type === 'quantity' ? v : undefined;
        this.numbers.push(
          trimmed([
            seq,
            pair,
            v.type === 'quantity',
            v.value === undefined && v.low === undefined && v.high === undefined,
            v.value ?? v.low ?? LOWEST,
            v.value ?? v.high ?? HIGHEST,
            textCell(q?.system),
            textCell(q?.code),
            textCell(q?.unit),
            elem,
            comp,
          ]),
        );
        return;
      }
      case 'reference':
        this.references.push(
          trimmed([
            seq,
            pair,
            textCell(v.resourceType),
            textCell(v.id),
            v.identifier !== undefined,
            textCell(v.url),
            textCell(v.version),
            textCell(v.identifier?.system),
            textCell(v.identifier?.value),
            elem,
            comp,
          ]),
        );
        return;
      case 'uri':
        this.uris.push(trimmed([seq, pair, pgText(v.value), elem, comp]));
        return;
    }
  }
}

/**
 * The columns of `table`, in the order of {@link IndexRows}' cells (`key` given as a pair's
 * position); a row's trailing NULL cells are left out ({@link trimmed}).
 */
export function indexColumnNames(table: IndexTable): string[] {
  return ['seq', 'key', ...INDEX_COLUMNS[table].map(([n]) => n), 'elem', 'comp'];
}

/**
 * `row` without its trailing NULL cells, which the insert reads as NULL all the same (`e->>i` of
 * a missing element): the columns that are usually NULL come last (a plain value's `elem` and
 * `comp`, a token's whole texts, a reference's url and identifier), so the JSON text, its
 * serialization and its parsing in the database shrink (by about a quarter on Synthea resources).
 */
function trimmed(row: Cell[]): Cell[] {
  let end = row.length;
  while (end > 2 && row[end - 1] === null) end--;
  if (end < row.length) row.length = end;
  return row;
}

/** A `\uXXXX` escape of a lone surrogate in JSON text, after an even run of backslashes. */
const LONE_SURROGATE = /((?:^|[^\\])(?:\\\\)*)\\u[dD][89a-fA-F][0-9a-fA-F]{2}/g;

/**
 * JSON text with its lone surrogates as U+FFFD. `JSON.stringify` escapes a lone surrogate
 * (`\ud800`), which `jsonb` refuses; a text parameter is sent as UTF-8, which writes U+FFFD for it
 * (the `body` column's text, and a search value's), so the index rows are made to say the same.
 */
export function wellFormedJson(json: string): string {
  // `JSON.stringify` writes its escapes in lower case: a plain text search first (cheaper).
  if (!json.includes('\\ud') || !/\\u[dD][89a-fA-F]/.test(json)) return json;
  // Twice: a match consumes the character before the escape, so adjacent escapes need a second pass.
  const once = json.replace(LONE_SURROGATE, '$1\\ufffd');
  return once.replace(LONE_SURROGATE, '$1\\ufffd');
}

/**
 * The column list and the cells read from a JSON row `e` of each table's insert (its key the
 * number at its pair's position in the array `k.keys`).
 */
const INSERT_COLUMNS = Object.fromEntries(
  INDEX_TABLES.map((t) => [t, indexColumnNames(t).join(', ')]),
) as Record<IndexTable, string>;
const INSERT_CELLS = Object.fromEntries(
  INDEX_TABLES.map((t) => [
    t,
    ['bigint', 'key', ...INDEX_COLUMNS[t].map(([, type]) => type), 'integer', 'integer']
      .map((type, i) => (type === 'key' ? `k.keys[(e->>${i})::int]` : `(e->>${i})::${type}`))
      .join(', '),
  ]),
) as Record<IndexTable, string>;

/**
 * The CTEs giving `k.keys`, the `search_keys` numbers of project `$1`'s pairs `$2` (types) and `$3`
 * (codes) in their order, numbering the pairs it has none for yet. No other transaction numbers
 * the same pairs meanwhile: a project's resource writes are serialized (resource-writes.ts
 * `allocate` holds its clock row), and a rebuild (search-index-sync.ts) empties the index tables
 * first, which waits for every transaction that wrote rows (and so numbers) and holds back the
 * others. Were one to, its number would be outside this statement's snapshot, and the row's NULL
 * key would fail the statement rather than lose the row.
 */
function keyCtes(s: string): string[] {
  return [
    `need AS (SELECT n.t, n.c, n.i FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS n(t, c, i))`,
    `fresh AS (INSERT INTO ${s}.search_keys (project_id, resource_type, param)
       SELECT $1, n.t, n.c FROM need n
        WHERE NOT EXISTS (SELECT 1 FROM ${s}.search_keys o
                           WHERE o.project_id = $1 AND o.resource_type = n.t AND o.param = n.c)
        ORDER BY n.t, n.c
       ON CONFLICT DO NOTHING RETURNING key, resource_type, param)`,
    `k AS (SELECT array_agg(coalesce(o.key, f.key) ORDER BY n.i) AS keys FROM need n
       LEFT JOIN ${s}.search_keys o ON o.project_id = $1 AND o.resource_type = n.t AND o.param = n.c
       LEFT JOIN fresh f ON f.resource_type = n.t AND f.param = n.c)`,
  ];
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
  const values: unknown[] = [projectId, rows.pairs.types, rows.pairs.codes];
  const inserts: string[] = [];
  for (const table of INDEX_TABLES) {
    const tableRows = rows.rows.get(table)!;
    if (tableRows.length === 0) continue;
    values.push(wellFormedJson(JSON.stringify(tableRows)));
    inserts.push(
      `INSERT INTO ${s}.${table} (${INSERT_COLUMNS[table]})
       SELECT ${INSERT_CELLS[table]} FROM k, jsonb_array_elements($${values.length}::jsonb) e`,
    );
  }
  if (inserts.length === 0) return;
  const [last, ...first] = inserts.reverse();
  const ctes = [...keyCtes(s), ...first.map((sql, i) => `i${i} AS (${sql})`)];
  await query(`WITH ${ctes.join(', ')} ${last!}`, values, true);
}

/**
 * The `search_keys` numbers of project `projectId`'s `pairs` (types and codes), in their order,
 * numbering those it has none for yet (as {@link insertIndexRows} does; for a loader that writes
 * the rows itself, bench/pg-resource-load.ts).
 */
export async function searchKeyNumbers(
  query: Query,
  s: string,
  projectId: string,
  pairs: IndexRows['pairs'],
): Promise<number[]> {
  if (pairs.types.length === 0) return [];
  const { rows } = await query<{ keys: number[] }>(
    `WITH ${keyCtes(s).join(', ')} SELECT keys FROM k`,
    [projectId, pairs.types, pairs.codes],
    true,
  );
  return rows[0]!.keys;
}
