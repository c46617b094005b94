import type { ResourcePage, ResourceQuery, SortValue, StoredResource } from '../types.js';
import { compareItems, firstInOrder, PageWindow } from '../result-page.js';
import { countedEnough, extrapolated, resourcePage, totalOf, type TotalRule } from '../total-rule.js';
import type { ResourceEntry } from './mutation.js';
import { pacedSort } from './paced-sort.js';
import type { SearchPace } from './search-pace.js';

/*
 * The page of a search of the embedded stores, once its matches are known (`EngineOperations.
 * searchResources`): ordered from the postings, from the bodies, or in the native order, with
 * `where` deciding on each body read when the postings did not answer exactly, and the total
 * counted as the query's total rule asks.
 */

/** Reads an entry's body (the engine's context). */
export type BodyReader = (entry: ResourceEntry) => Promise<StoredResource>;

/** Bodies are read this many at a time, so that a large type is not held in memory at once. */
const BODY_SLICE = 256;

/** What a page is made of: the query, its matches, what decides on each, how to count and pace. */
export interface PagePlan {
  query: ResourceQuery;
  matches: ResourceEntry[];
  where: ResourceQuery['where'];
  rule: TotalRule;
  pace: SearchPace;
  /** The sort values of an entry from the postings (`postedSortValues`), when they hold them. */
  sortValues: ((entry: ResourceEntry) => SortValue[]) | undefined;
}

/** The page of a search's matches (see {@link PagePlan}). */
export async function answerPage(read: BodyReader, plan: PagePlan): Promise<ResourcePage> {
  const { query, matches, where, rule, pace, sortValues } = plan;
  if (!where && !query.order) return unfilteredPage(read, query, matches, rule, pace);
  if (sortValues) return postedOrderPage(read, query, matches, sortValues, rule, pace);
  // A count alone needs no order.
  const countOnly = query.count !== undefined && query.count <= 0;
  if (query.order && !countOnly) return orderedPage(read, query, matches, where, rule, pace);
  return filteredPage(read, query, matches, where, rule, pace);
}

/** The page of an order the postings hold the values of: sorted without reading a body. */
async function postedOrderPage(
  read: BodyReader,
  query: ResourceQuery,
  matches: ResourceEntry[],
  sortValues: (entry: ResourceEntry) => SortValue[],
  rule: TotalRule,
  pace: SearchPace,
): Promise<ResourcePage> {
  const keyed = matches.map((entry) => ({ entry, id: entry.id, keys: sortValues(entry) }));
  return sortedPage(read, query, keyed, rule, pace);
}

/** An entry with its sort values. */
interface Keyed {
  entry: ResourceEntry;
  id: string;
  keys: SortValue[];
}

/** The page of `keyed` in the query's order (sorted in place), its bodies read. */
async function sortedPage(
  read: BodyReader,
  query: ResourceQuery,
  keyed: Keyed[],
  rule: TotalRule,
  pace: SearchPace,
): Promise<ResourcePage> {
  await pacedSort(keyed, compareItems(query), pace);
  const window = new PageWindow<ResourceEntry>(query);
  for (const item of keyed) window.offer(item, item.entry);
  keyed.length = 0;
  const resources = await readBodies(read, window.page(), pace);
  return resourcePage(resources, totalOf(rule, window.total));
}

/**
 * The page of matches that need no `where` and no `order`: every match is counted as it is
 * (the count costs nothing), only the page's entries are put in order and their bodies read.
 */
async function unfilteredPage(
  read: BodyReader,
  query: ResourceQuery,
  matches: ResourceEntry[],
  rule: TotalRule,
  pace: SearchPace,
): Promise<ResourcePage> {
  if (!query.after && !query.before) {
    const offset = Math.max(0, query.offset ?? 0);
    const count = query.count === undefined ? Infinity : Math.max(0, query.count);
    const page = count === 0 ? [] : firstInOrder(matches, offset + count, compareItems(query)).slice(offset);
    const resources = await readBodies(read, page, pace);
    return resourcePage(resources, totalOf(rule, matches.length));
  }
  const window = new PageWindow<ResourceEntry>(query);
  await pacedSort(matches, compareItems(query), pace);
  for (const e of matches) window.offer(e, e);
  const resources = await readBodies(read, window.page(), pace);
  return resourcePage(resources, totalOf(rule, window.total));
}

/**
 * The bodies of `entries`, in order, read `BODY_SLICE` at a time with `pace` between slices: a
 * page without a count (what a chain or a `_has` reads of the other type) shares the event loop
 * and keeps to the search's deadline as a filtered one does.
 */
export async function readBodies(
  read: BodyReader,
  entries: readonly ResourceEntry[],
  pace: SearchPace,
): Promise<StoredResource[]> {
  const bodies: StoredResource[] = [];
  for (let i = 0; i < entries.length; i += BODY_SLICE) {
    if (i > 0) await pace.breathe();
    const slice = await Promise.all(entries.slice(i, i + BODY_SLICE).map((e) => read(e)));
    for (const body of slice) bodies.push(body);
  }
  return bodies;
}

/**
 * The page of an `order` by values read from the bodies: the sort values of every match (after
 * `where`) first, then the page's bodies read again. Counts every match on the way. Tested a few
 * milliseconds at a time (`pace`), so other requests are served meanwhile.
 */
async function orderedPage(
  read: BodyReader,
  query: ResourceQuery,
  matches: ResourceEntry[],
  where: ResourceQuery['where'],
  rule: TotalRule,
  pace: SearchPace,
): Promise<ResourcePage> {
  const order = query.order!;
  const keyed: Keyed[] = [];
  for (let i = 0; i < matches.length; i += BODY_SLICE) {
    const slice = matches.slice(i, i + BODY_SLICE);
    const bodies = await Promise.all(slice.map((e) => read(e)));
    for (let k = 0; k < bodies.length; k++) {
      if (pace.due) await pace.breathe();
      const body = bodies[k]!;
      if (where && !where(body)) continue;
      const entry = slice[k]!;
      keyed.push({ entry, id: entry.id, keys: order.keys(body) });
    }
  }
  return sortedPage(read, query, keyed, rule, pace);
}

/**
 * The page of matches `where` decides, in the native order: bodies read slice by slice, the
 * page's kept as they pass. Reading stops once the page is complete and the count needs no
 * more (`none`, `estimate`: extrapolated from the candidates read; `accurate`: past its bound).
 * Tested a few milliseconds at a time (`pace`), as `orderedPage` is.
 */
async function filteredPage(
  read: BodyReader,
  query: ResourceQuery,
  matches: ResourceEntry[],
  where: ResourceQuery['where'],
  rule: TotalRule,
  pace: SearchPace,
): Promise<ResourcePage> {
  const window = new PageWindow<StoredResource>(query);
  // Without a page to fill, the order does not matter.
  if (!window.countOnly) await pacedSort(matches, compareItems(query), pace);
  let examined = 0;
  while (examined < matches.length && !(window.full && countedEnough(rule, window.total))) {
    const slice = matches.slice(examined, examined + BODY_SLICE);
    const bodies = await Promise.all(slice.map((e) => read(e)));
    for (let k = 0; k < bodies.length; k++) {
      if (pace.due) await pace.breathe();
      const body = bodies[k]!;
      if (!where || where(body)) window.offer(slice[k]!, body);
    }
    examined += slice.length;
  }
  const total =
    rule.mode === 'estimate'
      ? extrapolated(window.total, examined, matches.length)
      : totalOf(rule, window.total);
  return resourcePage(window.page(), total);
}
