import type { ResourceIndexer } from '../search-index.js';
import type { SearchRequest } from '../search-request.js';
import type { StoredResource } from '../types.js';
import type { ResourceEntry } from './mutation.js';
import { POSTED_TYPES, postingKeys, UNPOSTED } from './posting-keys.js';
import type { BaseState } from './state.js';

/** Bodies read at once while building (positioned reads in flight). */
const READ_AHEAD = 256;

/** Modifiers the postings never answer: a filter with one does not build its parameter. */
const UNANSWERED_MODIFIERS = new Set(['missing', 'not', 'text', 'of-type', 'identifier', 'below', 'above']);

/** The parameters of `search`'s own filters that postings could answer (each once, in order). */
export function postableCodes(search: SearchRequest): string[] {
  const codes = new Set<string>();
  for (const f of search.filters) {
    if (f.kind !== 'parameter' || !POSTED_TYPES.has(f.type) || UNPOSTED.has(f.code)) continue;
    if (f.values.length === 0 || (f.modifier !== undefined && UNANSWERED_MODIFIERS.has(f.modifier))) continue;
    codes.add(f.code);
  }
  return [...codes];
}

/**
 * Builds the postings of parameters `codes` of one type of one project (those not built yet):
 * reads every current version, indexes it for those parameters only, then posts every key at once
 * and marks them built, so that a failed read leaves nothing half-posted. Runs holding the writer
 * (`Engine.exclusive`): no write changes the type meanwhile, and every write after it posts these
 * parameters too.
 */
export async function buildPostings(
  base: BaseState,
  projectId: string,
  resourceType: string,
  codes: readonly string[],
  indexer: ResourceIndexer,
  readBody: (entry: ResourceEntry) => Promise<StoredResource>,
): Promise<void> {
  const postings = base.typePostings(projectId, resourceType);
  const wanted = new Set(codes.filter((code) => !postings.built.has(code)));
  if (wanted.size === 0) return;
  const live = [...base.resources(projectId, resourceType)].filter((e) => !e.deleted);
  const keys: string[][] = [];
  for (let i = 0; i < live.length; i += READ_AHEAD) {
    const slice = live.slice(i, i + READ_AHEAD);
    const bodies = await Promise.all(slice.map(readBody));
    for (const body of bodies) keys.push(postingKeys(indexer.index(body, wanted), wanted));
  }
  live.forEach((entry, i) => postings.extend(entry, keys[i]!));
  for (const code of wanted) postings.built.add(code);
}
