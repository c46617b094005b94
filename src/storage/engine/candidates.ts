import type { ResourceQuery } from '../types.js';
import type { ResourceEntry } from './mutation.js';
import type { SearchCandidates } from './postings.js';
import type { StateView } from './state.js';

/**
 * The entries a resource search starts from (tombstones possibly included; the caller filters
 * and `where` decides): the ids asked for, else the entries of the identifier keys, else the
 * search postings' candidates (`query.search`; `exact` when they are its matches, see
 * `TypePostings.candidates`), else the patients' compartments, else the type.
 */
export function candidateEntries(
  view: StateView,
  projectId: string,
  resourceType: string,
  query: ResourceQuery,
  keys: ReadonlySet<string> | undefined,
): SearchCandidates {
  if (query.ids) {
    const entries = query.ids
      .map((id) => view.resource(projectId, resourceType, id))
      .filter((e): e is ResourceEntry => e !== undefined);
    return { entries, exact: false };
  } else if (keys) {
    const seen = new Map<string, ResourceEntry>();
    for (const key of keys) for (const e of view.identified(projectId, resourceType, key)) seen.set(e.id, e);
    return { entries: seen.values(), exact: false };
  } else if (query.search?.resourceType === resourceType) {
    // A compartment is narrower unless the postings answer the whole search.
    const found = view.searched(projectId, resourceType, query.search);
    if (found && (found.exact || !query.compartment)) return found;
  }
  if (query.compartment) {
    const seen = new Map<string, ResourceEntry>();
    for (const patient of query.compartment) {
      for (const e of view.compartment(projectId, patient))
        if (e.resourceType === resourceType) seen.set(e.id, e);
    }
    return { entries: seen.values(), exact: false };
  }
  return { entries: view.resources(projectId, resourceType), exact: false };
}
