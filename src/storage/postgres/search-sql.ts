import { assertNever } from '../assert-never.js';
import { UnsupportedSearchError } from '../errors.js';
import {
  reachOf,
  unresolvedTerminology,
  type DateSearchValue,
  type ParameterFilter,
  type SearchFilter,
  type SearchRequest,
} from '../search-request.js';
import { clampHull, dateBoxSql, HULL_LIMIT, keyOfSql, pgText, tokenKey } from './search-tables.js';
import { ParameterSql, tableOf, type DerivedLookup, type Level } from './search-parameter-sql.js';

export type { DerivedLookup, Level } from './search-parameter-sql.js';

/*
 * A `SearchRequest`'s filters and sort keys as SQL over the search index tables (search-tables.ts),
 * with exactly the semantics of `src/search/match.ts` and `sort-values.ts` on the same index values:
 * each parameter filter is a semi-join (`seq IN (SELECT seq FROM <table> WHERE <values, ORed>)`),
 * filters are ANDed, chains join the reference rows to the referenced current versions, `_has` the
 * referencing rows to this version's id, each resource they read within the search's `reach` (its
 * compartment rows). Values travel as bind parameters.
 * @see https://hl7.org/fhir/R4/search.html
 */

/**
 * The points a date row `[lo, hi]` matching `value` must reach (`SearchSql.date`): `eq`, `ap` some
 * point of `[start, end]`; `gt`, `sa` the end or later; `ge` the start or later; `lt`, `eb` the
 * start or earlier; `le` the end or earlier; `ne` anything.
 */
function reach(value: DateSearchValue): [number, number] {
  const [s, e, far] = [value.start, value.end, HULL_LIMIT];
  switch (value.prefix) {
    case 'eq':
    case 'ap':
      return [s, e];
    case 'gt':
    case 'sa':
      return [e, far];
    case 'ge':
      return [s, far];
    case 'lt':
    case 'eb':
      return [-far, s];
    case 'le':
      return [-far, e];
    case 'ne':
      return [-far, far];
  }
}

/** The lowest and highest `lu` (microseconds) a `meta.lastUpdated` reaching `[a, b]` (ms) may have. */
function luBounds(a: number, b: number): [number, number] {
  const limit = 9e18; // within bigint
  const clamp = (x: number): number => Math.max(-limit, Math.min(limit, x));
  // The instant's row is [floor(lu / 1000), that + 1]: it reaches [a, b] when both ends allow.
  return [clamp((Math.ceil(a) - 1) * 1000), clamp((Math.floor(b) + 1) * 1000)];
}

/** A version's `meta.lastUpdated` as a date row's `[lo, hi]` (it is written to the microsecond, from `lu`). */
const luRow = (r: string): [string, string] => [`(${r}.lu / 1000)::float8`, `(${r}.lu / 1000 + 1)::float8`];

/** Whether two filters ask the same (plain data: equal as JSON). */
const sameFilter = (a: SearchFilter, b: SearchFilter): boolean => JSON.stringify(a) === JSON.stringify(b);

/**
 * `filters` without repeats: ANDed, a filter given twice asks nothing more, and each copy would be
 * one more test per candidate (fifty `code:text=x` made fifty).
 */
function distinctFilters(filters: readonly SearchFilter[]): SearchFilter[] {
  const seen = new Set<string>();
  return filters.filter((f) => {
    const key = JSON.stringify(f);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** A token list this long or longer is looked up as pairs (`SearchSql.tokenPairs`), not one test each. */
export const TOKEN_PAIRS_MIN = 8;

/** A token list as `tokenPairs` looks it up: `system|code` pairs, and codes without a system (`|code`). */
interface TokenPairs {
  pairs: [string, string][];
  bare: string[];
}

/** The text of a value as stored (`pgText`) when it is its own index key (`tokenKey`), else undefined. */
function ownKey(text: string): string | undefined {
  const stored = pgText(text);
  return tokenKey(stored)[1] === null ? stored : undefined;
}

/**
 * The plain `system|code` and `|code` token values of `filter` whose texts are their own index keys,
 * as {@link TokenPairs} when there are at least {@link TOKEN_PAIRS_MIN}, and the values left.
 */
function tokenPairsOf(filter: ParameterFilter): { pairs?: TokenPairs; rest: ParameterFilter['values'] } {
  if (filter.type !== 'token' || (filter.modifier !== undefined && filter.modifier !== 'not'))
    return { rest: filter.values };
  const found: TokenPairs = { pairs: [], bare: [] };
  const rest: ParameterFilter['values'] = [];
  for (const v of filter.values) {
    const plain = v.type === 'token' && v.text === undefined && v.typeSystem === undefined;
    const code = plain && v.code !== undefined ? ownKey(v.code) : undefined;
    const system = plain && typeof v.system === 'string' ? ownKey(v.system) : undefined;
    if (code !== undefined && system !== undefined) found.pairs.push([system, code]);
    else if (code !== undefined && plain && v.system === null) found.bare.push(code);
    else rest.push(v);
  }
  return found.pairs.length + found.bare.length >= TOKEN_PAIRS_MIN
    ? { pairs: found, rest }
    : { rest: filter.values };
}

/** Throws `UnsupportedSearchError` for a terminology filter left unresolved (see `narrowQuery`). */
function refuseUnresolved(filter: ParameterFilter): void {
  if (unresolvedTerminology(filter)) {
    throw new UnsupportedSearchError(
      `${filter.code}:${String(filter.modifier)} must be resolved against the terminology first`,
    );
  }
}

/** Builds the SQL of one search, its bind values appended to `values`. */
export class SearchSql extends ParameterSql {
  constructor(
    s: string,
    values: unknown[],
    project: string,
    derived?: DerivedLookup,
    /** The search's `reach`: what its chains and `_has` may read. */
    private readonly reach?: SearchRequest['reach'],
  ) {
    super(s, values, project, derived);
  }

  /**
   * The condition that the `type` version `seq` (one a chain or `_has` reads) lies within the
   * search's reach: in the compartment of one of its patients for the type (`true` when unbounded).
   */
  private within(type: string, seq: string): string {
    const bound = reachOf({ reach: this.reach }, type);
    if (!bound) return 'true';
    const c = this.alias('c');
    return `EXISTS (SELECT 1 FROM ${this.s}.resource_compartments ${c}
       WHERE ${c}.project_id = ${this.project} AND ${c}.resource_type = ${this.text(type)}
         AND ${c}.patient_id = ANY(${this.param([...new Set(bound.ids)])}::text[]) AND ${c}.seq = ${seq}
       OFFSET 0)`;
  }

  /**
   * The filters, ANDed, as conditions on the resource `level`: each a correlated `EXISTS` fenced
   * with `OFFSET 0`, so that it stays a lookup by the version's `seq` (or id) per candidate row
   * whatever the planner's statistics say (a freshly loaded table has none, and a semi-join
   * planned from those can take quadratic time).
   */
  filters(filters: readonly SearchFilter[], level: Level): string {
    const distinct = distinctFilters(filters);
    if (distinct.length === 0) return 'true';
    return distinct.map((f) => `(${this.test(f, level)})`).join(' AND ');
  }

  /**
   * The filter that drives a search of `type`: the index lookup giving the candidates (the
   * `seq`s of the current versions that match it), the others being tested on each candidate.
   * Preferred: equality-like values (token, reference, uri, string), then the other types, then
   * chains and `_has`. Undefined when no filter can drive (only negations and `:missing`).
   * `covers`: the filters its seqs already satisfy (it and, for a date, the other plain filters
   * on the same parameter, tested on the driving row first: a range's other end).
   */
  driver(
    filters: readonly SearchFilter[],
    type: string,
  ): { filter: SearchFilter; seqs: string; covers: SearchFilter[] } | undefined {
    const rank = (f: SearchFilter): number => {
      if (f.kind !== 'parameter') return 3;
      if (f.modifier === 'missing' || f.modifier === 'not' || f.code === '_id') return 9;
      return ['token', 'reference', 'uri', 'string'].includes(f.type) ? 1 : 2;
    };
    const best = [...filters].sort((a, b) => rank(a) - rank(b))[0];
    if (!best || rank(best) === 9) return undefined;
    // Its repeats too (`distinctFilters`).
    const repeats = filters.filter((f) => f !== best && sameFilter(f, best));
    const covers = [best, ...this.sameDates(best, filters), ...repeats];
    return { filter: best, seqs: this.seqs(best, type, filters), covers };
  }

  /** The plain date filters of `all` other than `filter` on its parameter (none unless it is one). */
  private sameDates(filter: SearchFilter, all: readonly SearchFilter[]): ParameterFilter[] {
    if (filter.kind !== 'parameter' || filter.type !== 'date' || filter.code === '_lastUpdated') return [];
    return all.flatMap((f) =>
      f !== filter &&
      f.kind === 'parameter' &&
      f.type === 'date' &&
      f.code === filter.code &&
      f.modifier === undefined &&
      f.values.length > 0
        ? [f]
        : [],
    );
  }

  /**
   * The GiST test on a date row `a` (its parameter's hull, see search-tables.ts) that every version
   * matching all the plain date `filters` on `code` passes: a filter matches only where a value
   * spans some point of its values' interval (below), so the hull reaches each filter's interval,
   * hence holds the points `[A, B]` when `A <= B` (else is held by `[B, A]`), with `A` the
   * highest lower end and `B` the lowest upper end. Both bounds in one index lookup: a month is a
   * month's rows, not every row after its start.
   */
  private dateHull(filters: readonly SearchFilter[], code: string, type: string, a: string): string {
    let [low, high] = [-HULL_LIMIT, HULL_LIMIT];
    for (const f of filters) {
      if (f.kind !== 'parameter' || f.type !== 'date' || f.code !== code || f.modifier !== undefined)
        continue;
      let [fLow, fHigh] = [HULL_LIMIT, -HULL_LIMIT];
      for (const v of f.values) {
        if (v.type !== 'date') continue;
        const [l, h] = reach(v);
        [fLow, fHigh] = [Math.min(fLow, clampHull(l)), Math.max(fHigh, clampHull(h))];
      }
      [low, high] = [Math.max(low, fLow), Math.min(high, fHigh)];
    }
    const row = dateBoxSql(`${a}.key`, `${a}.hlo`, `${a}.hhi`);
    const f = (x: number): string => `${this.param(x)}::float8`;
    const query = keyOfSql(this.s, this.project, type, this.text(code));
    return low <= high
      ? `${row} && ${dateBoxSql(query, f(low), f(high))}`
      : `${row} @> ${dateBoxSql(query, f(high), f(low))}`;
  }

  /**
   * SQL answering the `seq` of every current, live `type` version matching `filter` (duplicates
   * possible); `all`, the filters ANDed with it, narrow a date lookup (`dateHull`).
   */
  private seqs(filter: SearchFilter, type: string, all: readonly SearchFilter[] = [filter]): string {
    if (filter.kind === 'chain') return this.chainSeqs(filter.code, filter.targetTypes, filter.filter, type);
    if (filter.kind === 'has')
      return this.hasSeqs(filter.resourceType, filter.referenceParam, filter.filter, type);
    refuseUnresolved(filter);
    // No value (an `:in` whose value set has no code): nothing matches, no row to look up (the
    // project and type still named: a statement must use each of its bind parameters).
    if (filter.modifier === undefined && filter.values.length === 0 && filter.code !== '_lastUpdated') {
      const r = this.alias('r');
      return `SELECT ${r}.seq FROM ${this.s}.resources ${r}
               WHERE ${r}.project_id = ${this.project} AND ${r}.resource_type = ${type} AND false`;
    }
    const driving =
      filter.modifier !== 'missing' &&
      filter.modifier !== 'not' &&
      filter.code !== '_id' &&
      filter.values.length > 0;
    if (driving && filter.type === 'composite') return this.composite(filter, { type });
    if (driving && filter.code === '_lastUpdated') return this.lastUpdatedSeqs(filter, type);
    if (driving) {
      const a = this.alias('v');
      let hull = '';
      if (filter.type === 'date') {
        hull = ` AND ${this.dateHull(all, filter.code, type, a)}`;
        // The other filters on the parameter: the driving row itself usually matches them (one
        // value per resource), else another row of its version must.
        for (const other of this.sameDates(filter, all)) {
          const x = this.alias('x');
          hull += ` AND ((${this.anyValue(other, a)}) OR EXISTS (SELECT 1 FROM ${this.s}.search_dates ${x}
            WHERE ${x}.seq = ${a}.seq AND ${x}.key = ${a}.key AND (${this.anyValue(other, x)}) OFFSET 0))`;
        }
      }
      return `SELECT ${a}.seq FROM ${this.s}.${tableOf(filter.type)[0]!} ${a}
               WHERE ${this.paramIs(a, type, filter.code)} AND (${this.anyValue(filter, a)})${hull}`;
    }
    // No index lookup answers it: every current version of the type, tested one by one.
    const r = this.alias('r');
    return `SELECT ${r}.seq FROM ${this.s}.resources ${r}
             WHERE ${r}.project_id = ${this.project} AND ${r}.resource_type = ${type}
               AND ${r}.superseded_seq IS NULL AND NOT ${r}.deleted
               AND ${this.test(filter, { seq: `${r}.seq`, id: `${r}.id`, type })}`;
  }

  /**
   * `_lastUpdated` (no index rows: the version's `lu`): the current, live `type` versions in the
   * `lu` range its values can match (the `resources_live` index), each tested.
   */
  private lastUpdatedSeqs(filter: ParameterFilter, type: string): string {
    let [low, high] = [Infinity, -Infinity];
    for (const v of filter.values) {
      if (v.type !== 'date') continue;
      const [a, b] = luBounds(...reach(v));
      [low, high] = [Math.min(low, a), Math.max(high, b)];
    }
    if (low > high) return 'SELECT NULL::bigint AS seq WHERE false';
    const r = this.alias('r');
    return `SELECT ${r}.seq FROM ${this.s}.resources ${r}
             WHERE ${r}.project_id = ${this.project} AND ${r}.resource_type = ${type}
               AND ${r}.superseded_seq IS NULL AND NOT ${r}.deleted
               AND ${r}.lu >= ${this.param(low)}::bigint AND ${r}.lu <= ${this.param(high)}::bigint
               AND (${this.anyDate(filter, ...luRow(r))})`;
  }

  /** The date values of `filter`, ORed, on a row's `[lo, hi]`. */
  private anyDate(filter: ParameterFilter, lo: string, hi: string): string {
    const tests = filter.values.flatMap((v) => (v.type === 'date' ? [this.date(v, lo, hi)] : []));
    return tests.length === 0 ? 'false' : tests.join(' OR ');
  }

  /** `_lastUpdated` on the version `level.seq` (its `lu`: every live version has one). */
  private lastUpdated(filter: ParameterFilter, level: Level): string {
    if (filter.modifier === 'missing') return filter.missing ? 'false' : 'true';
    const u = this.alias('u');
    const any = `EXISTS (SELECT 1 FROM ${this.s}.resources ${u}
       WHERE ${u}.seq = ${level.seq} AND (${this.anyDate(filter, ...luRow(u))}) OFFSET 0)`;
    return filter.modifier === 'not' ? `NOT ${any}` : any;
  }

  /** The current, live `type` version of id `id` (a LATERAL lookup by key). */
  private byId(type: string, id: string, alias: string): string {
    return `CROSS JOIN LATERAL (SELECT ${alias}.seq, ${alias}.id FROM ${this.s}.resources ${alias}
              WHERE ${alias}.project_id = ${this.project} AND ${alias}.resource_type = ${type}
                AND ${alias}.id = ${id} AND ${alias}.superseded_seq IS NULL AND NOT ${alias}.deleted
              OFFSET 0) ${alias}`;
  }

  /** Seqs of `type` versions referencing (`code`) a current resource of one of `types` that matches `inner`. */
  private chainSeqs(code: string, types: readonly string[], inner: SearchFilter, type: string): string {
    if (types.length === 0) return 'SELECT NULL::bigint AS seq WHERE false';
    return types
      .map((target) => {
        const t = this.text(target);
        const [d, r, f] = [this.alias('d'), this.alias('r'), this.alias('f')];
        return `SELECT ${f}.seq FROM (SELECT DISTINCT seq FROM (${this.seqs(inner, t)}) ${d} OFFSET 0) ${d}
          CROSS JOIN LATERAL (SELECT id FROM ${this.s}.resources ${r}
             WHERE ${r}.seq = ${d}.seq AND ${this.within(target, `${d}.seq`)} OFFSET 0) ${r}
          CROSS JOIN LATERAL (SELECT seq FROM ${this.s}.search_references ${f}
             WHERE ${this.paramIs(f, type, code)} AND ${f}.target_id = ${r}.id AND ${f}.target_type = ${t}
             OFFSET 0) ${f}`;
      })
      .join(' UNION ALL ');
  }

  /** Seqs of `type` versions referenced (`param`) by a current `source` resource that matches `inner`. */
  private hasSeqs(source: string, param: string, inner: SearchFilter, type: string): string {
    const s = this.text(source);
    const [d, h, r] = [this.alias('d'), this.alias('h'), this.alias('r')];
    return `SELECT ${r}.seq FROM (SELECT DISTINCT seq FROM (${this.seqs(inner, s)}) ${d} OFFSET 0) ${d}
      CROSS JOIN LATERAL (SELECT DISTINCT target_id FROM ${this.s}.search_references ${h}
         WHERE ${h}.seq = ${d}.seq AND ${this.paramIs(h, s, param)} AND ${h}.target_type = ${type}
           AND ${h}.target_id IS NOT NULL AND ${this.within(source, `${d}.seq`)} OFFSET 0) ${h}
      ${this.byId(type, `${h}.target_id`, r)}`;
  }

  private test(filter: SearchFilter, level: Level): string {
    switch (filter.kind) {
      case 'parameter':
        return this.parameter(filter, level);
      case 'chain':
        return this.chain(filter.code, filter.targetTypes, filter.filter, level);
      case 'has':
        return this.has(filter.resourceType, filter.referenceParam, filter.filter, level);
      default:
        return assertNever(filter);
    }
  }

  /** A reference of `level` to a current resource of one of `types` that matches `inner`. */
  private chain(code: string, types: readonly string[], inner: SearchFilter, level: Level): string {
    if (types.length === 0) return 'false';
    const f = this.alias('f');
    const codeIs = this.paramIs(f, level.type, code);
    return types
      .map((type) => {
        const t = this.text(type);
        const r = this.alias('r');
        const where = this.test(inner, { seq: `${r}.seq`, id: `${r}.id`, type: t });
        return `EXISTS (SELECT 1 FROM ${this.s}.search_references ${f} ${this.byId(t, `${f}.target_id`, r)}
           WHERE ${f}.seq = ${level.seq} AND ${codeIs} AND ${f}.target_type = ${t}
             AND (${where}) AND ${this.within(type, `${r}.seq`)} OFFSET 0)`;
      })
      .join(' OR ');
  }

  /** A current `type` resource whose `param` references `level` and matches `inner` (`_has`). */
  private has(type: string, param: string, inner: SearchFilter, level: Level): string {
    const h = this.alias('h');
    const t = this.text(type);
    // Index rows are those of current, live versions only: the source's id is needed only by a
    // further `_has` or an `_id`.
    const needsId = inner.kind === 'has' || (inner.kind === 'parameter' && inner.code === '_id');
    const r = needsId ? this.alias('r') : undefined;
    const where = this.test(inner, { seq: `${h}.seq`, id: r ? `${r}.id` : 'NULL', type: t });
    return `EXISTS (SELECT 1 FROM ${this.s}.search_references ${h}
        ${r ? `JOIN ${this.s}.resources ${r} ON ${r}.seq = ${h}.seq` : ''}
       WHERE ${this.paramIs(h, t, param)} AND ${h}.target_type = ${level.type}
         AND ${h}.target_id = ${level.id} AND (${where}) AND ${this.within(type, `${h}.seq`)} OFFSET 0)`;
  }

  /**
   * The values of a (non-composite) parameter filter, ORed, on a row `a` of its table; a long list
   * of plain `system|code` tokens (a resolved `:in`) as one lookup of the pairs (`tokenPairs`).
   */
  private anyValue(filter: ParameterFilter, a: string): string {
    const { pairs, rest } = tokenPairsOf(filter);
    const values = rest.flatMap((value) =>
      value.type === 'composite' ? [] : [this.value(value, a, filter)],
    );
    if (pairs) values.unshift(this.tokenPairs(pairs, a));
    return values.length === 0 ? 'false' : values.join(' OR ');
  }

  /**
   * A token row `a` whose `(system, value)` is one of `pairs`: two array parameters, however many
   * pairs, where one equality per pair would take two parameters each (65,535 at most a statement)
   * and plan slowly. The pairs' texts are their own keys (`tokenKey`), so the key columns decide.
   */
  private tokenPairs({ pairs, bare }: TokenPairs, a: string): string {
    const tests: string[] = [];
    if (pairs.length > 0) {
      const systems = this.param(pairs.map(([system]) => system));
      const codes = this.param(pairs.map(([, code]) => code));
      tests.push(
        `(${a}.value, ${a}.system) IN (SELECT w.c, w.s FROM unnest(${systems}::text[], ${codes}::text[]) AS w(s, c))`,
      );
    }
    if (bare.length > 0)
      tests.push(`(${a}.system IS NULL AND ${a}.value = ANY(${this.param(bare)}::text[]))`);
    return tests.join(' OR ');
  }

  private parameter(filter: ParameterFilter, level: Level): string {
    refuseUnresolved(filter);
    if (filter.code === '_id') return this.idFilter(filter, level);
    if (filter.code === '_lastUpdated') return this.lastUpdated(filter, level);
    if (filter.modifier === 'missing') {
      const present = this.present(filter, level);
      return filter.missing ? `NOT (${present})` : `(${present})`;
    }
    if (filter.type === 'composite') {
      const c = this.alias('x');
      return `EXISTS (SELECT 1 FROM (${this.composite(filter, level)}) ${c} OFFSET 0)`;
    }
    const a = this.alias('v');
    const any = `EXISTS (SELECT 1 FROM ${this.s}.${tableOf(filter.type)[0]!} ${a}
       WHERE ${a}.seq = ${level.seq} AND ${this.paramIs(a, level.type, filter.code)}
         AND (${this.anyValue(filter, a)}) OFFSET 0)`;
    return filter.modifier === 'not' ? `NOT ${any}` : any;
  }

  /** `_id`: a token on the version's own id (no system, no text, no identifier type). */
  private idFilter(filter: ParameterFilter, level: Level): string {
    if (filter.modifier === 'missing') return filter.missing ? 'false' : 'true';
    const tests = filter.values.flatMap((v) =>
      v.type === 'token'
        ? [this.token(v, { system: 'NULL', value: level.id, display: 'NULL', types: 'NULL' })]
        : [],
    );
    const any = tests.length === 0 ? 'false' : tests.join(' OR ');
    return filter.modifier === 'not' ? `NOT (${any})` : `(${any})`;
  }
}
