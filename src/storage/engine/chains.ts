import {
  filterSearch,
  reachOf,
  type ParameterFilter,
  type ReferenceSearchValue,
  type SearchFilter,
  type SearchRequest,
} from '../search-request.js';
import type { NarrowedQuery } from '../query-narrowing.js';
import { postableCodes, postingKey, unpair } from './posting-keys.js';
import { sortedCodes } from './sort-postings.js';
import type { ResourceEntry } from './mutation.js';
import type { SearchPace } from './search-pace.js';
import type { StateView } from './state.js';

/*
 * Chains, one level (`subject:Patient.name=win`) or two (`subject:Patient.organization.name=x`),
 * through the search postings: the referenced types' postings answer the inner filter exactly (an
 * inner chain resolved so first), and the chain becomes the reference filter it stands for (`subject` = one of the matching `Patient/<id>`s), which the searched type's postings answer
 * exactly too. What `match.ts` does with a resolver (every resource of the referenced types read
 * and tested), without reading a body.
 */

type Chain = Extract<SearchFilter, { kind: 'chain' }>;
type Has = Extract<SearchFilter, { kind: 'has' }>;
/** The search whose chains are resolved: its `reach` bounds every resource they read. */
type Outer = Pick<SearchRequest, 'reach'>;

/** Entries looked at between two `breathe()`s of the search's pace (a `_has` may go through a million). */
const STRIDE = 1024;

/** Calls `fn` on each of `entries`, letting other requests run every `STRIDE` (`SearchPace`). */
async function paced<T>(entries: Iterable<T>, pace: SearchPace, fn: (entry: T) => void): Promise<void> {
  let seen = 0;
  for (const entry of entries) {
    fn(entry);
    if (++seen % STRIDE === 0) await pace.breathe();
  }
}

/** What resolving a search's chains reads through, and its pace. */
interface Resolving {
  view: StateView;
  projectId: string;
  outer: Outer;
  pace: SearchPace;
}

/** Whether `entry` (of `type`) is a live resource the search's chains may read (within its `reach`). */
function reached(outer: Outer, type: string, entry: ResourceEntry): boolean {
  if (entry.deleted) return false;
  const bound = reachOf(outer, type);
  return !bound || entry.patients.some((p) => bound.ids.includes(p));
}

/** Adds to `wanted` the parameters, by type, whose postings resolve `filter` on `type` (`resolveChain`). */
function addWanted(wanted: Map<string, Set<string>>, type: string, filter: SearchFilter): void {
  let codes = wanted.get(type);
  if (!codes) wanted.set(type, (codes = new Set()));
  if (filter.kind === 'parameter') {
    for (const code of postableCodes(filterSearch(type, filter))) codes.add(code);
  } else if (filter.kind === 'chain') {
    codes.add(filter.code);
    for (const target of filter.targetTypes) addWanted(wanted, target, filter.filter);
  } else {
    addWanted(wanted, filter.resourceType, filter.filter);
    wanted.get(filter.resourceType)!.add(filter.referenceParam);
  }
}

/**
 * The parameters, by type, whose postings `search` of `resourceType` can use: its own filters' and
 * sort keys' (`sort-postings.ts`), and for each chain (one or two levels), its reference
 * parameter and, on each referenced type, what its inner filter needs.
 */
export function wantedPostings(resourceType: string, search: SearchRequest): Map<string, string[]> {
  const wanted = new Map<string, Set<string>>([
    [resourceType, new Set([...postableCodes(search), ...sortedCodes(search.sort)])],
  ]);
  for (const f of search.filters) if (f.kind !== 'parameter') addWanted(wanted, resourceType, f);
  return new Map([...wanted].map(([type, codes]) => [type, [...codes]]));
}

/**
 * The reference filter a chain stands for: its parameter, one of the referenced resources whose
 * inner filter (a parameter, or a chain resolved so first) the postings answer exactly. `null`
 * when no resource matches; undefined when some referenced type's postings cannot tell.
 */
async function resolveChain(
  { view, projectId, outer, pace }: Resolving,
  chain: Chain,
): Promise<ParameterFilter | null | undefined> {
  const inner =
    chain.filter.kind === 'chain'
      ? await resolveChain({ view, projectId, outer, pace }, chain.filter)
      : chain.filter;
  if (inner === undefined) return undefined;
  if (inner === null) return null;
  const values: ReferenceSearchValue[] = [];
  for (const type of chain.targetTypes) {
    const found = view.searched(projectId, type, filterSearch(type, inner));
    if (!found?.exact) return undefined;
    await paced([...found.entries], pace, (e) => {
      if (reached(outer, type, e)) values.push({ type: 'reference', resourceType: type, id: e.id });
    });
  }
  if (values.length === 0) return null;
  return { kind: 'parameter', code: chain.code, type: 'reference', values };
}

/**
 * The live resources of `has.resourceType` that match `has`'s inner filter (a parameter, a chain
 * resolved as `resolveChain` does, or a `_has` resolved by `resolveHas`), when the postings answer
 * it exactly; `null` when none; undefined when the postings cannot tell.
 */
async function hasReferrers(r: Resolving, has: Has): Promise<ResourceEntry[] | null | undefined> {
  const { view, projectId, outer, pace } = r;
  const type = has.resourceType;
  if (has.filter.kind === 'has') {
    const ids = await resolveHas(r, type, has.filter);
    if (!ids) return ids;
    const entries: ResourceEntry[] = [];
    await paced(ids, pace, (id) => {
      const entry = view.resource(projectId, type, id);
      if (entry && reached(outer, type, entry)) entries.push(entry);
    });
    return entries.length > 0 ? entries : null;
  }
  const inner = has.filter.kind === 'chain' ? await resolveChain(r, has.filter) : has.filter;
  if (!inner) return inner;
  const found = view.searched(projectId, type, filterSearch(type, inner));
  if (!found?.exact) return undefined;
  const entries: ResourceEntry[] = [];
  await paced([...found.entries], pace, (e) => {
    if (reached(outer, type, e)) entries.push(e);
  });
  return entries;
}

/**
 * The ids of the resources of `type` a `_has` filter stands for (those its matching referencing
 * resources point at through its reference parameter, as `Type/id`, as match.ts reads them), when
 * the referencing type's postings answer its inner filter (a parameter, a chain, or another `_has`,
 * resolved so) exactly and hold that parameter; `null` when none; undefined when the postings
 * cannot tell.
 */
async function resolveHas(r: Resolving, type: string, has: Has): Promise<Set<string> | null | undefined> {
  if (!r.view.postedCodes(r.projectId, has.resourceType)?.has(has.referenceParam)) return undefined;
  const referrers = await hasReferrers(r, has);
  if (!referrers) return referrers;
  const prefix = postingKey(has.referenceParam, 'r', '');
  const ids = new Set<string>();
  await paced(referrers, r.pace, (e) => {
    for (const key of e.postings ?? []) {
      if (!key.startsWith(prefix)) continue;
      const [target, id] = unpair(key.slice(prefix.length));
      if (target === type) ids.add(id);
    }
  });
  return ids.size > 0 ? ids : null;
}

/**
 * `query` with each chain (one or two levels) whose inner filters every referenced type's
 * postings answer exactly replaced by the reference filter it stands for, and each `_has` they
 * answer so dropped from its search for the ids it stands for (ANDed into `ids`); `undefined` when
 * one of them matches no resource (nor then does the search). Only `query.search` of
 * `resourceType` is resolved, every resource it reads within the search's `reach`.
 */
export async function resolveQuery(
  view: StateView,
  projectId: string,
  resourceType: string,
  query: NarrowedQuery,
  pace: SearchPace,
): Promise<NarrowedQuery | undefined> {
  const { search } = query;
  if (search?.resourceType !== resourceType || search.filters.every((f) => f.kind === 'parameter'))
    return query;
  const r: Resolving = { view, projectId, outer: search, pace };
  const filters: SearchFilter[] = [];
  let ids = query.ids ? new Set(query.ids) : undefined;
  for (const f of search.filters) {
    if (f.kind === 'has') {
      const found = await resolveHas(r, resourceType, f);
      if (found === null) return undefined;
      if (found === undefined) filters.push(f);
      else ids = ids ? new Set([...ids].filter((id) => found.has(id))) : found;
      continue;
    }
    const resolved = f.kind === 'chain' ? await resolveChain(r, f) : f;
    if (resolved === null) return undefined;
    filters.push(resolved ?? f);
  }
  return { ...query, search: { ...search, filters }, ...(ids ? { ids: [...ids] } : {}) };
}
