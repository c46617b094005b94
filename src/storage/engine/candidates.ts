import { compartmentOf } from '../search-request.js';
import type { NarrowedQuery } from '../query-narrowing.js';
import type { ResourceEntry } from './mutation.js';
import type { SearchCandidates } from './postings.js';
import type { SearchPace } from './search-pace.js';
import type { StateView } from './state.js';

/**
 * The entries a resource search starts from (tombstones possibly included; the caller filters
 * them by `ids`, `lastUpdated`, the search's compartment and `identifier`, and `where` decides): the search
 * postings' candidates when they are exactly the matches of `query.search` (`exact`, see
 * `TypePostings.candidates`; the filters read out into `ids`, `lastUpdated` and `identifier` left to
 * the caller's), else the ids
 * asked for, else the entries of the identifier keys, else the postings' candidates, else the
 * patients' compartments, else the type.
 */
export function candidateEntries(
  view: StateView,
  projectId: string,
  resourceType: string,
  query: NarrowedQuery,
  keys: ReadonlySet<string> | undefined,
): SearchCandidates {
  let among: ResourceEntry[] | undefined;
  if (query.ids) {
    among = query.ids
      .map((id) => view.resource(projectId, resourceType, id))
      .filter((e): e is ResourceEntry => e !== undefined && !e.deleted);
  } else if (keys) {
    const seen = new Map<string, ResourceEntry>();
    for (const key of keys) for (const e of view.identified(projectId, resourceType, key)) seen.set(e.id, e);
    among = [...seen.values()];
  }
  const own = query.search?.resourceType === resourceType ? query.search : undefined;
  // Nothing left for the postings: the ids (or identifiers) asked for are the answer.
  if (own && among && own.filters.length === 0) return { entries: among, exact: true };
  // A search without filters of its own (a compartment alone, say) leaves nothing to the postings.
  const searched =
    own && own.filters.length > 0 ? view.searched(projectId, resourceType, own, among) : undefined;
  if (searched?.exact) return searched;
  if (among) return { entries: among, exact: false };
  const compartment = compartmentOf(resourceType, query.search);
  if (searched && !compartment) {
    // A compartment is narrower unless the postings answer the whole search.
    return searched;
  }
  if (compartment) {
    const seen = new Map<string, ResourceEntry>();
    for (const patient of compartment) {
      for (const e of view.compartment(projectId, patient))
        if (e.resourceType === resourceType) seen.set(e.id, e);
    }
    return { entries: seen.values(), exact: false };
  }
  return { entries: view.resources(projectId, resourceType), exact: false };
}

/** Whether a version written at `micros` lies in `range` (`_lastUpdated`, epoch ms). */
function inRange(micros: number, range: NarrowedQuery['lastUpdated']): boolean {
  if (!range) return true;
  // `micros` is in microseconds, the range in milliseconds.
  if (range.gt !== undefined && !(micros > range.gt * 1000)) return false;
  if (range.ge !== undefined && !(micros >= range.ge * 1000)) return false;
  if (range.lt !== undefined && !(micros < range.lt * 1000)) return false;
  if (range.le !== undefined && !(micros <= range.le * 1000)) return false;
  return true;
}

/** What narrows a search's candidates before its filters decide (`NarrowedQuery`'s own parts). */
export interface Narrowing {
  ids: readonly string[] | undefined;
  lastUpdated: NarrowedQuery['lastUpdated'];
  /** The patients whose compartments bound the search. */
  compartment: readonly string[] | undefined;
  /** The identifier keys one of which each match holds. */
  keys: ReadonlySet<string> | undefined;
}

/** Candidates looked at between two `breathe()`s of the search's pace. */
const STRIDE = 4096;

/**
 * The live candidates within `narrowing`, each once (only ids may repeat a candidate), looked at in
 * strides between which others run: `all` is taken at once, and pinned by the caller.
 */
export async function narrowedMatches(
  all: readonly ResourceEntry[],
  narrowing: Narrowing,
  pace: SearchPace,
): Promise<ResourceEntry[]> {
  const { lastUpdated, compartment, keys } = narrowing;
  const ids = narrowing.ids ? new Set(narrowing.ids) : undefined;
  const matches: ResourceEntry[] = [];
  const seenIds = new Set<string>();
  for (let i = 0; i < all.length; i++) {
    if (i > 0 && i % STRIDE === 0) await pace.breathe();
    const e = all[i]!;
    if (e.deleted || !inRange(e.lastUpdatedMicros, lastUpdated)) continue;
    if (ids && (!ids.has(e.id) || seenIds.has(e.id))) continue;
    if (compartment && !compartment.some((p) => e.patients.includes(p))) continue;
    if (keys && !e.identifiers.some((k) => keys.has(k))) continue;
    if (ids) seenIds.add(e.id);
    matches.push(e);
  }
  return matches;
}
