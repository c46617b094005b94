import type { DerivedParameter } from '../search-index.js';
import type { ComponentSearchValue, ParameterFilter, SearchParamType } from '../search-request.js';
import { type IndexTable, INDEX_TABLES, keyOfSql, keysOfSql } from './search-tables.js';
import { ValueSql } from './search-value-sql.js';

/*
 * The part of search-sql.ts that reads one parameter's rows: which rows hold a parameter (its
 * own, or for a parameter derived from others, `ResourceIndexer.derived`, its parts'), whether a
 * version has any (`:missing`), and composites, stored or derived.
 */

/** A resource a filter is evaluated on: SQL expressions of its `seq` and `id`, and its type (a parameter). */
export interface Level {
  seq: string;
  id: string;
  type: string;
}

/** The table holding the index values of a search value (or parameter) type. */
export function tableOf(type: SearchParamType | ComponentSearchValue['type']): IndexTable[] {
  switch (type) {
    case 'string':
      return ['search_strings'];
    case 'token':
      return ['search_tokens'];
    case 'date':
      return ['search_dates'];
    case 'number':
    case 'quantity':
      return ['search_numbers'];
    case 'reference':
      return ['search_references'];
    case 'uri':
      return ['search_uris'];
    case 'composite':
    case 'special':
      return [...INDEX_TABLES];
  }
}

/** The derived parameters of a type (`ResourceIndexer.derived`), by type name and code. */
export type DerivedLookup = (resourceType: string, code: string) => DerivedParameter | undefined;

/** A search's SQL builder: its bind values, aliases, and the rows of each parameter. */
export abstract class ParameterSql extends ValueSql {
  private aliases = 0;

  constructor(
    protected readonly s: string,
    protected readonly values: unknown[],
    /** The parameter holding the project id. */
    protected readonly project: string,
    /** The parameters with no rows of their own (index-rows.ts), answered from their parts. */
    private readonly derived?: DerivedLookup,
  ) {
    super();
  }

  /** A bind parameter holding `value`. */
  param(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }

  /** A fresh table alias. */
  alias(prefix: string): string {
    return `${prefix}${++this.aliases}`;
  }

  /** How `code` of the type bound at `type` (a bind parameter, as every level's type is) is derived, if it is. */
  private derivedOf(type: string, code: string): DerivedParameter | undefined {
    const bound = this.derived && /^\$(\d+)(?:::text)?$/.exec(type);
    const name = bound ? this.values[Number(bound[1]) - 1] : undefined;
    return typeof name === 'string' ? this.derived!(name, code) : undefined;
  }

  /**
   * The test that a row `a` holds a value of `code` on `type` in the project: its own rows, or its
   * union's parts' (by their `search_keys` numbers), of its target type when it is restricted to
   * one (a reference row).
   */
  paramIs(a: string, type: string, code: string): string {
    const derived = this.derivedOf(type, code);
    if (derived?.kind !== 'union')
      return `${a}.key = ${keyOfSql(this.s, this.project, type, this.text(code))}`;
    const parts = `${a}.key = ANY(${keysOfSql(this.s, this.project, type, `${this.param(derived.parts)}::text[]`)})`;
    return derived.targetType === undefined
      ? parts
      : `${parts} AND ${a}.target_type = ${this.text(derived.targetType)}`;
  }

  /**
   * That the version `level.seq` has a value of `filter`'s parameter (what `:missing` negates): a
   * row of it (or of a part of its union); for a composite derived from others, one alternative's
   * rows (each part's, for the resource itself).
   */
  protected present(filter: ParameterFilter, level: Level): string {
    const rows = (tables: readonly IndexTable[], code: string): string =>
      `(${tables
        .map((table) => {
          const a = this.alias('p');
          return `EXISTS (SELECT 1 FROM ${this.s}.${table} ${a}
                   WHERE ${a}.seq = ${level.seq} AND ${this.paramIs(a, level.type, code)} OFFSET 0)`;
        })
        .join(' OR ')})`;
    const derived = this.derivedOf(level.type, filter.code);
    if (derived?.kind !== 'composite') return rows(tableOf(filter.type), filter.code);
    return derived.alternatives
      .map((source) =>
        'and' in source
          ? `(${source.and.map((part, k) => rows(tableOf(this.partType(filter, k)), part)).join(' AND ')})`
          : rows(INDEX_TABLES, source.composite),
      )
      .join(' OR ');
  }

  /** The value kind of component `k` of a composite filter (from a value that has it), else every kind. */
  private partType(filter: ParameterFilter, k: number): SearchParamType {
    for (const value of filter.values)
      if (value.type === 'composite' && value.components[k]) return value.components[k].type;
    return 'composite';
  }

  /**
   * A composite: the seqs of versions with one element (`elem`) whose every component has a value
   * matching the value's component (rows `comp` = 0, 1, … of the parameter, in their value kind's
   * table); of the version `level.seq` only when given, else of every `level.type` version. A
   * composite derived from others (`DerivedParameter`) reads theirs: another composite's rows, or
   * for the resource itself one row of each part parameter.
   */
  protected composite(filter: ParameterFilter, level: { seq?: string; type: string }): string {
    const derived = this.derivedOf(level.type, filter.code);
    const sources = derived?.kind === 'composite' ? derived.alternatives : [{ composite: filter.code }];
    const alternatives = filter.values.flatMap((value) => {
      if (value.type !== 'composite' || value.components.length === 0) return [];
      return sources.flatMap((source) =>
        'and' in source
          ? this.compositeOfParts(value.components, source.and, level)
          : [this.compositeRows(value.components, source.composite, level)],
      );
    });
    return alternatives.length === 0
      ? 'SELECT NULL::bigint AS seq WHERE false'
      : alternatives.join(' UNION ALL ');
  }

  /** The first component's row condition on `c0`: of `level.seq` (its key says the project and type). */
  private compositeLevel(c0: string, level: { seq?: string; type: string }): string {
    return level.seq === undefined ? 'true' : `${c0}.seq = ${level.seq}`;
  }

  /** A composite value on the rows of composite parameter `code`: one element's components. */
  private compositeRows(
    components: readonly ComponentSearchValue[],
    code: string,
    level: { seq?: string; type: string },
  ): string {
    return this.compositeSql(components, level, (k, c, c0) =>
      k === 0
        ? `${this.paramIs(c, level.type, code)} AND ${c}.comp = 0`
        : `${c}.key = ${c0}.key AND ${c}.elem = ${c0}.elem AND ${c}.comp = ${k}`,
    );
  }

  /** A composite value on the resource itself: component `k` on a row of parameter `parts[k]`. */
  private compositeOfParts(
    components: readonly ComponentSearchValue[],
    parts: readonly string[],
    level: { seq?: string; type: string },
  ): string[] {
    if (components.length > parts.length) return [];
    return [this.compositeSql(components, level, (k, c) => this.paramIs(c, level.type, parts[k]!))];
  }

  /**
   * The seqs whose rows match every component: component 0 on a row `c0` of `level`, each other
   * one on a row of the same version; `row(k, c, c0)` says which rows hold component `k`.
   */
  private compositeSql(
    components: readonly ComponentSearchValue[],
    level: { seq?: string; type: string },
    row: (k: number, c: string, c0: string) => string,
  ): string {
    const aliases = components.map(() => this.alias('c'));
    const c0 = aliases[0]!;
    const nested = components
      .slice(1)
      .map((component, i) => {
        const c = aliases[i + 1]!;
        return ` AND EXISTS (SELECT 1 FROM ${this.s}.${tableOf(component.type)[0]!} ${c}
           WHERE ${c}.seq = ${c0}.seq AND ${row(i + 1, c, c0)}
             AND ${this.value(component, c, {})} OFFSET 0)`;
      })
      .join('');
    const first = components[0]!;
    return `SELECT ${c0}.seq FROM ${this.s}.${tableOf(first.type)[0]!} ${c0}
           WHERE ${this.compositeLevel(c0, level)} AND ${row(0, c0, c0)}
             AND ${this.value(first, c0, {})}${nested}`;
  }
}
