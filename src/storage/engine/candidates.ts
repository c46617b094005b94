import type { ResourceQuery } from '../types.js';
import type { ResourceEntry } from './mutation.js';
import type { StateView } from './state.js';

/**
 * The entries a resource search starts from (tombstones possibly included; the caller filters
 * and `where` decides): the ids asked for, else the entries of the identifier keys, else the
 * search postings' candidates (`query.search`), else the patients' compartments, else the type.
 */
export function candidateEntries(
  view: StateView,
  projectId: string,
  resourceType: string,
  query: ResourceQuery,
  keys: ReadonlySet<string> | undefined,
): Iterable<ResourceEntry> {
  if (query.ids) {
    return query.ids
      .map((id) => view.resource(projectId, resourceType, id))
      .filter((e): e is ResourceEntry => e !== undefined);
  } else if (keys) {
    const seen = new Map<string, ResourceEntry>();
    for (const key of keys) for (const e of view.identified(projectId, resourceType, key)) seen.set(e.id, e);
    return seen.values();
  } else if (!query.compartment && query.search?.resourceType === resourceType) {
    return view.searched(projectId, resourceType, query.search) ?? view.resources(projectId, resourceType);
  } else if (query.compartment) {
    const seen = new Map<string, ResourceEntry>();
    for (const patient of query.compartment) {
      for (const e of view.compartment(projectId, patient))
        if (e.resourceType === resourceType) seen.set(e.id, e);
    }
    return seen.values();
  } else {
    return view.resources(projectId, resourceType);
  }
}
