import type { ResourceIndexer } from '../search-index.js';
import type { StoredResource } from '../types.js';
import type { ResourceEntry } from './mutation.js';
import { postingKeys } from './posting-keys.js';
import type { BaseState } from './state.js';

/** Bodies read at once while rebuilding (positioned reads in flight). */
const READ_AHEAD = 256;

/**
 * Posts every current version of the committed state that is not posted yet (a store just
 * opened from its logs): reads each body, indexes it, puts the entry back with its keys. Runs
 * before the store answers anything; until a type's entries are all posted, its searches scan.
 */
export async function rebuildSearchIndex(
  base: BaseState,
  indexer: ResourceIndexer,
  readBody: (entry: ResourceEntry) => Promise<StoredResource>,
): Promise<void> {
  for (const projectId of base.projectIds()) {
    for (const resourceType of base.resourceTypes(projectId)) {
      const todo = [...base.resources(projectId, resourceType)].filter(
        (e) => !e.deleted && e.postings === undefined,
      );
      for (let i = 0; i < todo.length; i += READ_AHEAD) {
        const slice = todo.slice(i, i + READ_AHEAD);
        const bodies = await Promise.all(slice.map(readBody));
        slice.forEach((entry, k) => {
          base.putEntry(projectId, { ...entry, postings: postingKeys(indexer.index(bodies[k]!)) });
        });
      }
    }
  }
}
