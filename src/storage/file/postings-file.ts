import fs from 'node:fs/promises';
import type { ResourceEntry } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import type { ResourceIndexer } from '../search-index.js';
import { decodeChecked, encodeChecked, writeFileAtomically, type LogIndex } from './log-index.js';
import type { FileRef, LogFile } from './log-file.js';
import type { LogMeta } from './store-files.js';

/*
 * The search postings a clean close saves next to a resource log (`<Type>.log.postings`), with its
 * index file (`<Type>.log.idx`) and under the same rules: written only then, read only with that
 * index when the index covers the whole log (nothing appended since the close), and consumed on
 * open like it. Postings are a cache: a file that is missing, damaged, of another indexer
 * (`ResourceIndexer.fingerprint`) or that does not name exactly the current versions is ignored,
 * and each parameter is built again by the first search on it. Never a wrong answer.
 */

/** What `<Type>.log.postings` holds. The field names are the format on disk. */
export interface PostingsFile {
  format: 1;
  /** `ResourceIndexer.fingerprint` of the indexer that computed the keys. */
  indexer: string;
  /** Inode and size of the log, as in the index file written with it. */
  ino: string;
  size: number;
  /** The parameters built (`TypePostings.built`). */
  codes: string[];
  /** The distinct posting keys. */
  keys: string[];
  /** Each current version: [id, versionId, indexes in `keys` of its posting keys]. */
  entries: [string, string, number[]][];
}

/** Postings read on open, to post once the indexer is loaded (`postSavedPostings`). */
export interface SavedPostings {
  projectId: string;
  resourceType: string;
  file: PostingsFile;
}

function isPostingsFile(value: unknown): value is PostingsFile {
  const v = value as Partial<PostingsFile> | undefined;
  return (
    v?.format === 1 &&
    typeof v.indexer === 'string' &&
    typeof v.ino === 'string' &&
    typeof v.size === 'number' &&
    Array.isArray(v.codes) &&
    Array.isArray(v.keys) &&
    Array.isArray(v.entries)
  );
}

/**
 * The postings file of a log whose index file `index` covers it whole; undefined when there is
 * none, or it is damaged or was not written with that index.
 */
export async function readPostingsFile(log: LogFile, index: LogIndex): Promise<PostingsFile | undefined> {
  if (index.size !== log.size) return undefined;
  try {
    const value = decodeChecked(await fs.readFile(`${log.file}.postings`, 'utf8'));
    if (!isPostingsFile(value) || value.ino !== index.ino || value.size !== index.size) return undefined;
    return value;
  } catch {
    return undefined;
  }
}

/**
 * Writes the postings file of a resource log from the committed state (on a clean close, right
 * after its index file): nothing when its type has built no parameter.
 */
export async function writePostingsFile(
  log: LogFile,
  meta: LogMeta,
  base: BaseState,
  indexer: string,
): Promise<void> {
  if (meta.resourceType === undefined) return;
  const postings = base.postingsOf(meta.projectId, meta.resourceType);
  if (!postings || postings.built.size === 0) return;
  const keyIndex = new Map<string, number>();
  const entries: PostingsFile['entries'] = [];
  for (const e of base.resources(meta.projectId, meta.resourceType)) {
    if ((e.ref as FileRef).log !== log) return; // Not this log's entries (project re-created).
    if (e.deleted) continue;
    const indexes: number[] = [];
    for (const key of e.postings ?? []) {
      let at = keyIndex.get(key);
      if (at === undefined) keyIndex.set(key, (at = keyIndex.size));
      indexes.push(at);
    }
    entries.push([e.id, e.versionId, indexes]);
  }
  const stat = await log.segment.handle.stat({ bigint: true });
  const file: PostingsFile = {
    format: 1,
    indexer,
    ino: String(stat.ino),
    size: log.size,
    codes: [...postings.built],
    keys: [...keyIndex.keys()],
    entries,
  };
  await writeFileAtomically(`${log.file}.postings`, encodeChecked(file));
}

/**
 * Posts saved postings of the indexer's fingerprint into the state just opened, each file only when
 * it names every current version of its type, at its version, and nothing else.
 * @returns The number of files posted.
 */
export function postSavedPostings(
  base: BaseState,
  saved: readonly SavedPostings[],
  indexer: ResourceIndexer,
): number {
  let posted = 0;
  for (const { projectId, resourceType, file } of saved) {
    if (file.indexer !== indexer.fingerprint || !file.codes.every((c) => typeof c === 'string')) continue;
    const postings = base.typePostings(projectId, resourceType);
    if (postings.built.size > 0 || file.entries.length !== postings.size) continue;
    const matched: [ResourceEntry, string[]][] = [];
    const seen = new Set<string>();
    for (const [id, versionId, indexes] of file.entries) {
      const entry = base.resource(projectId, resourceType, id);
      if (!entry || entry.deleted || entry.versionId !== versionId || !Array.isArray(indexes)) break;
      if (seen.has(id)) break;
      seen.add(id);
      const keys = indexes.map((i) => file.keys[i]);
      if (keys.some((key) => typeof key !== 'string')) break;
      matched.push([entry, keys as string[]]);
    }
    if (matched.length !== file.entries.length) continue;
    for (const [entry, keys] of matched) postings.extend(entry, keys);
    for (const code of file.codes) postings.built.add(code);
    posted += 1;
  }
  return posted;
}
