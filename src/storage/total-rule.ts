import { InvalidRecordError } from './errors.js';
import type { ResourcePage, ResourceQuery } from './query-types.js';
import type { StoredResource } from './types.js';

/*
 * The count a resource search owes (`ResourceQuery.total` and `maxTotal`), shared by the adapters:
 * none, a cheap estimate, or an exact count that may stop past a bound.
 */

/** The count a query asks for, checked. */
export interface TotalRule {
  mode: 'none' | 'estimate' | 'accurate';
  /** `maxTotal`: an accurate count may stop past it (`Infinity`: counts every match). */
  bound: number;
}

const MODES: ReadonlySet<string> = new Set(['none', 'estimate', 'accurate']);

/** The query's `total` and `maxTotal`, defaults filled in; `InvalidRecordError` for bad ones. */
export function totalRule(query: ResourceQuery): TotalRule {
  const mode = query.total ?? 'accurate';
  if (!MODES.has(mode)) throw new InvalidRecordError('total must be none, estimate or accurate');
  const bound = query.maxTotal ?? Infinity;
  if (typeof bound !== 'number' || !(bound === Infinity || (Number.isSafeInteger(bound) && bound >= 0))) {
    throw new InvalidRecordError('maxTotal must be a whole number (0 or more) or Infinity');
  }
  return { mode, bound };
}

/** The most matches an accurate count reads: one past the bound tells that more match. */
export function countLimit(rule: TotalRule): number {
  return rule.bound + 1;
}

/** The `total` to answer when the store counted every match (`counted`) on its way to the page. */
export function totalOf(rule: TotalRule, counted: number): number | undefined {
  if (rule.mode === 'none') return undefined;
  return rule.mode === 'accurate' ? Math.min(counted, countLimit(rule)) : counted;
}

/** Whether a scan whose page is complete may stop, having counted `counted` matches. */
export function countedEnough(rule: TotalRule, counted: number): boolean {
  return rule.mode !== 'accurate' || counted >= countLimit(rule);
}

/**
 * An estimate of the matches among `candidates` when `matched` of the first `examined` matched
 * (exact when every candidate was examined).
 */
export function extrapolated(matched: number, examined: number, candidates: number): number {
  if (examined >= candidates || examined === 0) return matched;
  return Math.max(matched, Math.round((matched * candidates) / examined));
}

/** A page, with `total` when there is one. */
export function resourcePage(resources: StoredResource[], total: number | undefined): ResourcePage {
  return total === undefined ? { resources } : { total, resources };
}
