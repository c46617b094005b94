import {
  filterSearch,
  type ParameterFilter,
  type ReferenceSearchValue,
  type SearchFilter,
  type SearchRequest,
} from '../search-request.js';
import { postableCodes } from './build-postings.js';
import { sortedCodes } from './sort-postings.js';
import type { StateView } from './state.js';

/*
 * One-level chains (`subject:Patient.name=win`) through the search postings: the referenced types'
 * postings answer the inner filter exactly, and the chain becomes the reference filter it stands
 * for (`subject` = one of the matching `Patient/<id>`s), which the searched type's postings answer
 * exactly too. What `match.ts` does with a resolver (every resource of the referenced types read
 * and tested), without reading a body.
 */

/** A one-level chain: its inner filter is a parameter. */
type OneLevelChain = Extract<SearchFilter, { kind: 'chain' }> & { filter: ParameterFilter };

const oneLevel = (f: SearchFilter): f is OneLevelChain => f.kind === 'chain' && f.filter.kind === 'parameter';

/**
 * The parameters, by type, whose postings `search` of `resourceType` can use: its own filters' and
 * sort keys' (`sort-postings.ts`), and for each one-level chain, its reference parameter and the inner filter's on each referenced type.
 */
export function wantedPostings(resourceType: string, search: SearchRequest): Map<string, string[]> {
  const wanted = new Map<string, Set<string>>([
    [resourceType, new Set([...postableCodes(search), ...sortedCodes(search.sort)])],
  ]);
  const add = (type: string, codes: readonly string[]): void => {
    let set = wanted.get(type);
    if (!set) wanted.set(type, (set = new Set()));
    for (const code of codes) set.add(code);
  };
  for (const f of search.filters) {
    if (!oneLevel(f)) continue;
    add(resourceType, [f.code]);
    for (const type of f.targetTypes) add(type, postableCodes(filterSearch(type, f.filter)));
  }
  return new Map([...wanted].map(([type, codes]) => [type, [...codes]]));
}

/**
 * `search` with each one-level chain whose inner filter every referenced type's postings answer
 * exactly replaced by the reference filter it stands for; `undefined` when such a chain matches no
 * resource (nor then does the search).
 */
export function resolveChains(
  view: StateView,
  projectId: string,
  search: SearchRequest,
): SearchRequest | undefined {
  if (!search.filters.some(oneLevel)) return search;
  const filters: SearchFilter[] = [];
  for (const f of search.filters) {
    if (!oneLevel(f)) {
      filters.push(f);
      continue;
    }
    const values: ReferenceSearchValue[] = [];
    let exact = true;
    for (const type of f.targetTypes) {
      const found = view.searched(projectId, type, filterSearch(type, f.filter));
      if (!found?.exact) {
        exact = false;
        break;
      }
      for (const e of found.entries)
        if (!e.deleted) values.push({ type: 'reference', resourceType: type, id: e.id });
    }
    if (!exact) {
      filters.push(f);
      continue;
    }
    if (values.length === 0) return undefined;
    filters.push({ kind: 'parameter', code: f.code, type: 'reference', values });
  }
  return { ...search, filters };
}
