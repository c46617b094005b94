import { assertNever } from '../assert-never.js';
import type {
  ComponentSearchValue,
  DateSearchValue,
  ParameterFilter,
  QuantitySearchValue,
  ReferenceSearchValue,
  SearchModifier,
  StringSearchValue,
  TokenSearchValue,
} from '../search-request.js';
import { KEY_CHARS, pgText, tokenKey } from './search-tables.js';

/*
 * The SQL test of one search value against one index row (or, for tokens, against any columns
 * holding a token's texts): the part of search-sql.ts with the semantics of `matchValue` in
 * `src/search/match.ts`, one method per value kind. Values travel as bind parameters.
 */

const likeEscape = (text: string): string => text.replace(/[\\%_]/g, (c) => `\\${c}`);

/**
 * The columns a token test reads: whole texts (SQL expressions), and the token row whose key
 * columns (`tokenKey`) an equality tests instead, when the token is a row of `search_tokens`.
 */
export interface TokenColumns {
  system: string;
  value: string;
  display: string;
  types: string;
  row?: string;
}

/** The value tests of a search's SQL; `param` binds a value (search-sql.ts `SearchSql`). */
export abstract class ValueSql {
  /** A bind parameter holding `value`. */
  abstract param(value: unknown): string;

  /** A text bind parameter holding `value` (NUL mapped as stored). */
  text(value: string): string {
    return `${this.param(pgText(value))}::text`;
  }

  /** One search value against a row `a` of its value kind's table (`matchValue`). */
  protected value(
    value: ComponentSearchValue,
    a: string,
    filter: Pick<ParameterFilter, 'modifier' | 'targetType'>,
  ): string {
    switch (value.type) {
      case 'string':
        return this.string(value, a, filter.modifier);
      case 'token':
        return this.token(value, {
          system: `coalesce(${a}.system_full, ${a}.system)`,
          value: `coalesce(${a}.value_full, ${a}.value)`,
          display: `${a}.display`,
          types: `${a}.types`,
          row: a,
        });
      case 'date':
        return this.date(value, `${a}.lo`, `${a}.hi`);
      case 'number':
        return `NOT ${a}.empty AND ${this.number(value, a)}`;
      case 'quantity':
        return `${a}.quantity AND NOT ${a}.empty AND ${this.quantity(value, a)}`;
      case 'reference':
        return this.reference(value, a, filter.targetType);
      case 'uri':
        return this.uri(value.value, `${a}.value`, filter.modifier);
      default:
        return assertNever(value);
    }
  }

  /** `column` equal to `value`, through the column's indexed prefix. */
  protected equal(column: string, value: string): string {
    const p = this.text(value);
    // A value shorter than the indexed prefix equals the column only where the prefix is all of it.
    if (value.length < KEY_CHARS) return `left(${column}, ${KEY_CHARS}) = ${p}`;
    return `left(${column}, ${KEY_CHARS}) = left(${p}, ${KEY_CHARS}) AND ${column} = ${p}`;
  }

  /** `column` starting with `prefix`, through the column's indexed prefix. */
  protected startsWith(column: string, prefix: string): string {
    if (prefix.length <= KEY_CHARS) {
      return `left(${column}, ${KEY_CHARS}) LIKE ${this.text(`${likeEscape(pgText(prefix))}%`)}`;
    }
    const p = this.text(prefix);
    return `left(${column}, ${KEY_CHARS}) = left(${p}, ${KEY_CHARS}) AND starts_with(${column}, ${p})`;
  }

  protected string(value: StringSearchValue, a: string, modifier?: SearchModifier): string {
    if (modifier === 'exact') return `${a}.exact = ${this.text(value.value)}`;
    if (modifier === 'contains') return `strpos(${a}.norm, ${this.text(value.normalized)}) > 0`;
    return this.startsWith(`${a}.norm`, value.normalized);
  }

  /** The key columns `key`, `full` of a token row (`tokenKey`) equal to `text`. */
  protected keyEqual(key: string, full: string, text: string): string {
    const [k, whole] = tokenKey(pgText(text));
    return whole === null
      ? `${key} = ${this.text(k)}`
      : `${key} = ${this.text(k)} AND ${full} = ${this.text(whole)}`;
  }

  protected token(value: TokenSearchValue, c: TokenColumns): string {
    if (value.text !== undefined) {
      return `${c.display} IS NOT NULL AND starts_with(${c.display}, ${this.text(value.text)})`;
    }
    const opt = (x: string | undefined): string => (x === undefined ? 'NULL::text' : this.text(x));
    if (value.typeSystem !== undefined) {
      return `${c.value} IS NOT DISTINCT FROM ${opt(value.code)} AND EXISTS (
        SELECT 1 FROM jsonb_array_elements(${c.types}) e
         WHERE (e->>'system') IS NOT DISTINCT FROM ${opt(value.typeSystem)}
           AND (e->>'code') IS NOT DISTINCT FROM ${opt(value.typeCode)})`;
    }
    const tests: string[] = [];
    const row = c.row;
    // A key column is NULL exactly when its text is.
    const [system, code] = row ? [`${row}.system`, `${row}.value`] : [c.system, c.value];
    if (value.code !== undefined) {
      tests.push(
        row ? this.keyEqual(code, `${row}.value_full`, value.code) : `${code} = ${this.text(value.code)}`,
      );
    }
    if (value.system === null) tests.push(`${system} IS NULL AND ${code} IS NOT NULL`);
    else if (value.system !== undefined) {
      tests.push(
        row
          ? this.keyEqual(system, `${row}.system_full`, value.system)
          : `${system} = ${this.text(value.system)}`,
      );
    }
    return tests.length === 0 ? 'true' : tests.join(' AND ');
  }

  /** `matchDate` on a row's `[lo, hi)` (SQL; open ends stored as the largest finite numbers). */
  protected date(value: DateSearchValue, lo: string, hi: string): string {
    // Bind parameters only for the bounds used (an unused one has no type PostgreSQL can infer).
    let start: string | undefined;
    let end: string | undefined;
    const ps = (): string => (start ??= `${this.param(value.start)}::float8`);
    const pe = (): string => (end ??= `${this.param(value.end)}::float8`);
    const contained = (): string => `(${lo} >= ${ps()} AND ${hi} <= ${pe()})`;
    switch (value.prefix) {
      case 'eq':
        return contained();
      case 'ne':
        return `NOT ${contained()}`;
      case 'gt':
        return `${hi} > ${pe()}`;
      case 'lt':
        return `${lo} < ${ps()}`;
      case 'ge':
        return `(${hi} > ${pe()} OR ${contained()})`;
      case 'le':
        return `(${lo} < ${ps()} OR ${contained()})`;
      case 'sa':
        return `${lo} >= ${pe()}`;
      case 'eb':
        return `${hi} <= ${ps()}`;
      case 'ap':
        return `(${lo} < ${pe()} AND ${hi} > ${ps()})`;
    }
  }

  /** `matchNumber` on the row's `lo` (value, else low) and `hi` (value, else high). */
  protected number(value: { prefix: string; value: number; low: number; high: number }, a: string): string {
    const f = (x: number): string => `${this.param(x)}::float8`;
    const [lo, hi] = [`${a}.lo`, `${a}.hi`];
    const v = value.value;
    const margin = Math.abs(v) * 0.1;
    switch (value.prefix) {
      case 'eq':
        return `(${lo} >= ${f(value.low)} AND ${hi} < ${f(value.high)})`;
      case 'ne':
        return `NOT (${lo} >= ${f(value.low)} AND ${hi} < ${f(value.high)})`;
      case 'gt':
        return `${hi} > ${f(v)}`;
      case 'lt':
        return `${lo} < ${f(v)}`;
      case 'sa':
        return `${lo} > ${f(v)}`;
      case 'eb':
        return `${hi} < ${f(v)}`;
      case 'ge':
        return `${hi} >= ${f(v)}`;
      case 'le':
        return `${lo} <= ${f(v)}`;
      default:
        return `(${lo} <= ${f(v + margin)} AND ${hi} >= ${f(v - margin)})`;
    }
  }

  protected quantity(value: QuantitySearchValue, a: string): string {
    const tests: string[] = [];
    if (value.system !== undefined) {
      tests.push(`${a}.system = ${this.text(value.system)}`);
      if (value.code !== undefined) tests.push(`${a}.unit_code = ${this.text(value.code)}`);
    } else if (value.code !== undefined) {
      const code = this.text(value.code);
      tests.push(`(${a}.unit_code = ${code} OR ${a}.unit = ${code})`);
    }
    tests.push(this.number(value, a));
    return tests.join(' AND ');
  }

  protected reference(value: ReferenceSearchValue, a: string, targetType?: string): string {
    if (value.identifier !== undefined) {
      const { system, value: v } = value.identifier;
      const tests = [`${a}.ident`];
      if (v !== undefined) tests.push(`${a}.id_value = ${this.text(v)}`);
      if (system === null) tests.push(`${a}.id_system IS NULL`);
      else if (system !== undefined) tests.push(`${a}.id_system = ${this.text(system)}`);
      return tests.join(' AND ');
    }
    const type = targetType === undefined ? '' : `${a}.target_type = ${this.text(targetType)} AND `;
    let byId = 'false';
    if (value.id !== undefined) {
      byId = this.equal(`${a}.target_id`, value.id);
      if (value.resourceType !== undefined)
        byId += ` AND ${a}.target_type = ${this.text(value.resourceType)}`;
    }
    if (value.url === undefined) return `${type}(${byId})`;
    // `matchReference`: an equal url decides (by the version); else the id.
    const url = this.text(value.url);
    const version = value.version === undefined ? 'true' : `${a}.version = ${this.text(value.version)}`;
    return `${type}((${a}.url = ${url} AND ${version}) OR (${a}.url IS DISTINCT FROM ${url} AND ${byId}))`;
  }

  protected uri(value: string, column: string, modifier?: SearchModifier): string {
    if (modifier === 'below') return this.startsWith(column, value);
    if (modifier === 'above') return `starts_with(${this.text(value)}, ${column})`;
    return this.equal(column, value);
  }
}
