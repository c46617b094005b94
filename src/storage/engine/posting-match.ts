import type { ParameterFilter, SearchValue } from '../search-request.js';
import { KEY_SEPARATOR, posted, UNPOSTED } from './posting-keys.js';
import type { Box } from './sorted-keys.js';

/*
 * What the search postings (`postings.ts`) can tell of a search value: the box of ordered ranges
 * that may match it (a superset), the exact test of a range, and whether the keys a filter
 * selects are exactly its matches (`exactFilter`), so that `where` need not decide. Each mirrors
 * src/search/match.ts on the values the keys hold; the differential tests hold them together.
 */

const ALL: Box = { loMin: -Infinity, loMax: Infinity, hiMin: -Infinity, hiMax: Infinity };

/**
 * The values whose range may match an ordered search value (see `matchDate` and `matchNumber` in
 * src/search/match.ts): a superset, as bounds on each end of the range, for values whose range is
 * well formed (low <= high; see `ParamIndex.odd`). Undefined for `ne`.
 */
export function boxOf(value: SearchValue): Box | undefined {
  if (value.type === 'date') {
    const { start: ps, end: pe } = value;
    switch (value.prefix) {
      case 'eq':
        return { loMin: ps, loMax: pe, hiMin: ps, hiMax: pe };
      case 'gt':
        return { ...ALL, hiMin: pe };
      case 'ge':
        return { ...ALL, hiMin: ps };
      case 'lt':
        return { ...ALL, loMax: ps };
      case 'le':
        return { ...ALL, loMax: pe };
      case 'sa':
        return { ...ALL, loMin: pe };
      case 'eb':
        return { ...ALL, hiMax: ps };
      case 'ap':
        return { ...ALL, loMax: pe, hiMin: ps };
      default:
        return undefined;
    }
  }
  if (value.type !== 'number' && value.type !== 'quantity') return undefined;
  const { value: v, low, high } = value;
  const margin = Math.abs(v) * 0.1;
  switch (value.prefix) {
    case 'eq':
      return { loMin: low, loMax: high, hiMin: low, hiMax: high };
    case 'gt':
    case 'ge':
      return { ...ALL, hiMin: v };
    case 'lt':
    case 'le':
      return { ...ALL, loMax: v };
    case 'sa':
      return { ...ALL, loMin: v };
    case 'eb':
      return { ...ALL, hiMax: v };
    case 'ap':
      return { ...ALL, loMax: v + margin, hiMin: v - margin };
    default:
      return undefined;
  }
}

/**
 * True when the keys of a value hold exactly the elements `match.ts` matches (not only a superset):
 * tokens by code and/or system (not `|code`, whose empty system the keys share with none), strings
 * by prefix or `:contains` (normalized both sides), uris, references by id (and type).
 */
function exactValue(filter: ParameterFilter, value: SearchValue): boolean {
  switch (value.type) {
    case 'token':
      return (
        value.text === undefined &&
        value.typeSystem === undefined &&
        value.system !== null &&
        (value.code !== undefined || typeof value.system === 'string')
      );
    case 'string':
      return filter.modifier === undefined || filter.modifier === 'contains';
    case 'uri':
      return true;
    case 'date':
    case 'number':
    case 'quantity':
      return filter.modifier === undefined && rangeTest(value) !== undefined;
    case 'reference':
      return (
        value.url === undefined &&
        value.identifier === undefined &&
        value.id !== undefined &&
        (filter.targetType === undefined ||
          value.resourceType === undefined ||
          value.resourceType === filter.targetType)
      );
    default:
      return false;
  }
}

/** True when the postings answer `filter` exactly (see `exactValue`; `:missing` by presence). */
export function exactFilter(filter: ParameterFilter): boolean {
  if (filter.modifier === 'missing') return posted(filter);
  if (filter.modifier !== undefined && filter.modifier !== 'contains') return false;
  if (UNPOSTED.has(filter.code) || filter.values.length === 0) return false;
  return filter.values.every((value) => exactValue(filter, value));
}

/** An exact test of an ordered value's range `[lo, hi]` (open ends infinite). */
export type RangeTest = (lo: number, hi: number) => boolean;

/**
 * The exact test of an ordered search value on an element's range: `matchDate` and `matchNumber`
 * of src/search/match.ts on the same numbers (a key holds the range those compare, see
 * `orderedRange`). Undefined for `ne` (a key cannot tell) and a quantity with a unit (the key has
 * none).
 */
export function rangeTest(value: SearchValue): RangeTest | undefined {
  if (value.type === 'date') {
    const { start: ps, end: pe } = value;
    switch (value.prefix) {
      case 'eq':
        return (lo, hi) => lo >= ps && hi <= pe;
      case 'gt':
        return (_lo, hi) => hi > pe;
      case 'lt':
        return (lo) => lo < ps;
      case 'ge':
        return (lo, hi) => hi > pe || (lo >= ps && hi <= pe);
      case 'le':
        return (lo, hi) => lo < ps || (lo >= ps && hi <= pe);
      case 'sa':
        return (lo) => lo >= pe;
      case 'eb':
        return (_lo, hi) => hi <= ps;
      case 'ap':
        return (lo, hi) => lo < pe && hi > ps;
      default:
        return undefined;
    }
  }
  if (value.type !== 'number' && value.type !== 'quantity') return undefined;
  if (value.type === 'quantity' && (value.system !== undefined || value.code !== undefined)) return undefined;
  const { value: v, low, high } = value;
  const margin = Math.abs(v) * 0.1;
  switch (value.prefix) {
    case 'eq':
      return (lo, hi) => lo >= low && hi < high;
    case 'gt':
      return (_lo, hi) => hi > v;
    case 'lt':
      return (lo) => lo < v;
    case 'sa':
      return (lo) => lo > v;
    case 'eb':
      return (_lo, hi) => hi < v;
    case 'ge':
      return (_lo, hi) => hi >= v;
    case 'le':
      return (lo) => lo <= v;
    case 'ap':
      return (lo, hi) => lo <= v + margin && hi >= v - margin;
    default:
      return undefined;
  }
}

/** The `[low, high]` an ordered value's key holds (`posting-keys.ts`). */
function keyRange(key: string): [number, number] {
  const value = key.slice(key.indexOf(KEY_SEPARATOR) + 2);
  const colon = value.indexOf(':');
  return [Number(value.slice(0, colon)), Number(value.slice(colon + 1))];
}

/** The keys whose range passes every test. */
export function* passing(keys: Iterable<string>, tests: readonly RangeTest[]): Iterable<string> {
  for (const key of keys) {
    const [lo, hi] = keyRange(key);
    if (tests.every((test) => test(lo, hi))) yield key;
  }
}

export const intersectBoxes = (a: Box, b: Box): Box => ({
  loMin: Math.max(a.loMin, b.loMin),
  loMax: Math.min(a.loMax, b.loMax),
  hiMin: Math.max(a.hiMin, b.hiMin),
  hiMax: Math.min(a.hiMax, b.hiMax),
});
