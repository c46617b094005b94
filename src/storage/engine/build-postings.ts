import { SearchPace } from './search-pace.js';
import type { ResourceIndexer } from '../search-index.js';
import type { ResourceQuery } from '../types.js';
import type { OpContext } from './engine.js';
import type { Indexing } from './indexing.js';
import { wantedPostings } from './chains.js';
import type { StoredResource } from '../types.js';
import type { ResourceEntry } from './mutation.js';
import { indexedCodes, postingKeys } from './posting-keys.js';
import type { TypePostings } from './postings.js';
import type { BaseState } from './state.js';

/** Bodies read at once while building (positioned reads in flight). */
const READ_AHEAD = 256;

/** What a build reads through (the engine's context). */
export interface BuildAccess {
  readBody(entry: ResourceEntry): Promise<StoredResource>;
  /** Keeps committed bodies readable while they are read (the file store's compaction). */
  pin(entries: readonly ResourceEntry[]): () => void;
  /** Runs `fn` holding the writer, on the committed state (`Engine.exclusive`). */
  exclusive(fn: (base: BaseState) => Promise<void>): Promise<void>;
}

/** Versions left to index under the writer: catch-up rounds run without it until this few remain. */
const CATCH_UP_UNDER_WRITER = 1024;
/** Catch-up rounds without the writer before the last one (writes may outpace the build). */
const CATCH_UP_ROUNDS = 4;

/**
 * Builds the postings of parameters `codes` of one type of one project (those not built yet), or
 * waits for the build already under way of any of them (concurrent searches share one build).
 * Writes keep flowing: every current version is read and indexed, for those parameters only,
 * without holding the writer (bodies pinned); then, in rounds, the versions written meanwhile.
 * Once few remain, holding the writer (`Engine.exclusive`) only while those are read, every key
 * is posted at once and the parameters marked built, so that a failed read leaves nothing
 * half-posted and every write after it posts these parameters too.
 */
export async function buildPostings(
  base: BaseState,
  projectId: string,
  resourceType: string,
  codes: readonly string[],
  indexer: ResourceIndexer,
  access: BuildAccess,
): Promise<void> {
  const postings = base.typePostings(projectId, resourceType);
  const waits = new Set<Promise<void>>();
  const wanted = new Set<string>();
  for (const code of codes) {
    if (postings.built.has(code)) continue;
    const pending = postings.building.get(code);
    if (pending) waits.add(pending);
    else wanted.add(code);
  }
  if (wanted.size > 0) {
    const build = runBuild(base, projectId, resourceType, postings, wanted, indexer, access).finally(() => {
      for (const code of wanted) if (postings.building.get(code) === build) postings.building.delete(code);
    });
    for (const code of wanted) postings.building.set(code, build);
    waits.add(build);
  }
  await Promise.all(waits);
}

async function runBuild(
  base: BaseState,
  projectId: string,
  resourceType: string,
  postings: TypePostings,
  wanted: ReadonlySet<string>,
  indexer: ResourceIndexer,
  access: BuildAccess,
): Promise<void> {
  const indexed = indexedCodes(wanted);
  /** The keys of each version indexed so far (current or since replaced). */
  const keys = new Map<ResourceEntry, string[]>();
  /** Indexes `entries`; `strict`: a failed read fails the build, else that version is read again later. */
  const index = async (entries: ResourceEntry[], strict: boolean): Promise<void> => {
    const pace = new SearchPace();
    const release = access.pin(entries);
    try {
      for (let i = 0; i < entries.length; i += READ_AHEAD) {
        const slice = entries.slice(i, i + READ_AHEAD);
        const bodies = await Promise.all(
          slice.map((e) => (strict ? access.readBody(e) : access.readBody(e).catch(() => undefined))),
        );
        bodies.forEach((body, k) => {
          if (body) keys.set(slice[k]!, postingKeys(indexer.index(body, indexed), wanted));
        });
        // A build of a large type is shared work with no deadline: it lets other requests run.
        await pace.breathe();
      }
    } finally {
      release();
    }
  };
  /** The current versions not indexed yet. */
  const unindexed = (): ResourceEntry[] => {
    const out: ResourceEntry[] = [];
    for (const e of base.resources(projectId, resourceType)) if (!e.deleted && !keys.has(e)) out.push(e);
    return out;
  };
  let todo = unindexed();
  for (let round = 0; round < CATCH_UP_ROUNDS && todo.length > CATCH_UP_UNDER_WRITER; round++) {
    await index(todo, false);
    todo = unindexed();
  }
  await access.exclusive(async (committed) => {
    // The project was deleted meanwhile: its postings went with it.
    if (committed.postingsOf(projectId, resourceType) !== postings) return;
    await index(unindexed(), true);
    // Posted in slices (a million versions take seconds): searches meanwhile use only what is built,
    // and no write comes in while the writer is held.
    const pace = new SearchPace();
    let posted = 0;
    for (const e of [...committed.resources(projectId, resourceType)]) {
      if (!e.deleted) postings.extend(e, keys.get(e)!);
      if (++posted % 256 === 0) await pace.breathe();
    }
    for (const code of wanted) postings.built.add(code);
  });
}

/**
 * Builds the search postings of the parameters `query.search` filters (and sorts) on that its
 * type has not built yet: from the committed state, holding the writer only to catch up
 * at the end. Not inside a transaction (it holds the writer): the search scans there. An indexer
 * that fails to load leaves the search to scan.
 */
export async function buildSearched(
  ctx: OpContext,
  indexing: Indexing,
  projectId: string,
  resourceType: string,
  query: ResourceQuery,
): Promise<void> {
  const { search } = query;
  const base = ctx.committed?.();
  if (!search || search.resourceType !== resourceType || !base || !indexing.enabled) return;
  const missing = [...wantedPostings(resourceType, search)]
    .map(([type, codes]) => [type, codes.filter((c) => !base.postedCodes(projectId, type)?.has(c))] as const)
    .filter(([, codes]) => codes.length > 0);
  if (missing.length === 0) return;
  const indexer = await indexing.load().catch(() => undefined);
  if (!indexer) return;
  const access: BuildAccess = {
    readBody: (entry) => ctx.readBody(entry),
    pin: (entries) => ctx.pin(entries),
    exclusive: async (fn) => {
      // `committed` answered the base: not in a transaction function, so `exclusive` runs `fn`.
      await ctx.exclusive?.(fn);
    },
  };
  await Promise.all(
    missing.map(([type, codes]) => buildPostings(base, projectId, type, codes, indexer, access)),
  );
}
