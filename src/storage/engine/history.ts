import { InvalidRecordError, NotFoundError } from '../errors.js';
import type { HistoryEntry, HistoryMethod, HistoryPage, HistoryQuery, StoredResource } from '../types.js';
import { isoMicros } from './clock.js';

/**
 * The history of the memory and file stores: every kept version of a type in one list in commit
 * order (the memory store's `TypeLog`, the file store's version index), linked per resource.
 * `meta.lastUpdated` is strictly increasing across a store in commit order, so a version's
 * microseconds are its place in the history and the paging cursor: a page starts below the last
 * entry of the one before, and versions committed meanwhile (later, so higher) never show up in
 * it, nor shift it.
 */
export interface VersionHead {
  id: string;
  versionId: string;
  lastUpdatedMicros: number;
  deleted: boolean;
  /** Index of the version this one replaced; -1 when there is none (kept). */
  prev: number;
  /** Index of the version that replaced this one; -1 while current. */
  superseded: number;
}

/** A type's kept versions in commit order, and the index of each resource's latest one. */
export interface VersionList<H extends VersionHead = VersionHead> {
  readonly versions: readonly H[];
  readonly latest: ReadonlyMap<string, number>;
}

/** The version list of one resource type. */
export interface HistorySource<H extends VersionHead = VersionHead> {
  resourceType: string;
  list: VersionList<H>;
}

/** A version chosen for a page. */
export interface PickedVersion<H extends VersionHead = VersionHead> {
  source: HistorySource<H>;
  head: H;
  method: HistoryMethod;
}

const CURSOR = /^h([0-9a-z]{1,12})$/;

function encodeCursor(micros: number): string {
  return `h${micros.toString(36)}`;
}

function decodeCursor(cursor: string | undefined): number {
  if (cursor === undefined) return Infinity;
  const match = typeof cursor === 'string' ? CURSOR.exec(cursor) : null;
  if (!match) throw new InvalidRecordError('Not a history cursor of this store');
  return parseInt(match[1]!, 36);
}

/** Throws `InvalidRecordError` for a query no store could answer. */
export function checkHistoryQuery(query: HistoryQuery): void {
  if (!Number.isSafeInteger(query.count) || query.count < 0)
    throw new InvalidRecordError('History count must be a non-negative integer');
  if (query.id !== undefined && query.type === undefined)
    throw new InvalidRecordError('A resource history needs its type');
}

/** POST for a first version or a re-creation, PUT for an update, DELETE for a deletion. */
export function methodOf(list: VersionList, index: number): HistoryMethod {
  const head = list.versions[index]!;
  if (head.deleted) return 'DELETE';
  if (head.prev < 0) return head.versionId === '1' ? 'POST' : 'PUT';
  return list.versions[head.prev]!.deleted ? 'POST' : 'PUT';
}

/** The index of a resource's version in `list`, if kept. */
export function findVersion(
  list: VersionList | undefined,
  id: string,
  versionId: string,
): number | undefined {
  let index = list?.latest.get(id) ?? -1;
  while (index >= 0) {
    const head = list!.versions[index]!;
    if (head.versionId === versionId) return index;
    index = head.prev;
  }
  return undefined;
}

/** The `NotFoundError` of a version that is not kept, or of a deletion (`deleted`). */
export function versionNotFound(
  resourceType: string,
  id: string,
  versionId: string,
  deleted = false,
): NotFoundError {
  return deleted
    ? new NotFoundError(`${resourceType}/${id} version ${versionId} is a deletion`, { deleted: true })
    : new NotFoundError(`${resourceType}/${id} has no version ${versionId}`);
}

/** Whether a version passes `_since` and `_at` (bounds in microseconds). */
function inTime(list: VersionList, head: VersionHead, since: number, at: HistoryQuery['at']): boolean {
  if (head.lastUpdatedMicros < since) return false;
  if (!at) return true;
  if (head.lastUpdatedMicros >= at.to * 1000) return false;
  return head.superseded < 0 || list.versions[head.superseded]!.lastUpdatedMicros > at.from * 1000;
}

/** The versions of one type (or resource) below `before`, newest first, at most `limit`. */
function* newestFirst<H extends VersionHead>(
  source: HistorySource<H>,
  id: string | undefined,
  before: number,
  since: number,
): Generator<number> {
  const { versions, latest } = source.list;
  if (id !== undefined) {
    for (let i = latest.get(id) ?? -1; i >= 0; i = versions[i]!.prev) {
      const micros = versions[i]!.lastUpdatedMicros;
      if (micros < since) return;
      if (micros < before) yield i;
    }
    return;
  }
  // Binary search for the first version at or above `before` (versions are in commit order).
  let low = 0;
  let high = versions.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (versions[mid]!.lastUpdatedMicros < before) low = mid + 1;
    else high = mid;
  }
  for (let i = low - 1; i >= 0; i--) {
    if (versions[i]!.lastUpdatedMicros < since) return;
    yield i;
  }
}

/**
 * Chooses the page of `query` among `sources` (the one type of a type or resource history, every
 * type of the project for the whole history), synchronously, so the caller can pin what it reads.
 */
export function pickHistory<H extends VersionHead>(
  sources: readonly HistorySource<H>[],
  query: HistoryQuery,
): { picked: PickedVersion<H>[]; next?: string; total?: number } {
  checkHistoryQuery(query);
  const before = decodeCursor(query.cursor);
  const since = query.since === undefined ? -Infinity : query.since * 1000;
  const want = query.count + 1;
  const candidates: { source: HistorySource<H>; index: number }[] = [];
  let total: number | undefined;
  for (const source of sources) {
    let taken = 0;
    for (const index of newestFirst(source, query.id, before, since)) {
      if (!inTime(source.list, source.list.versions[index]!, since, query.at)) continue;
      candidates.push({ source, index });
      if (++taken === want) break;
    }
  }
  if (query.id !== undefined) {
    total = 0;
    for (const source of sources)
      for (const index of newestFirst(source, query.id, Infinity, since))
        if (inTime(source.list, source.list.versions[index]!, since, query.at)) total += 1;
  }
  const micros = (c: (typeof candidates)[number]): number =>
    c.source.list.versions[c.index]!.lastUpdatedMicros;
  candidates.sort((a, b) => micros(b) - micros(a));
  const page = candidates.slice(0, query.count);
  const picked = page.map(({ source, index }) => ({
    source,
    head: source.list.versions[index]!,
    method: methodOf(source.list, index),
  }));
  const last = page[page.length - 1];
  // With `count` 0 there is no page to continue from: only `total`.
  const next = candidates.length > query.count && last ? encodeCursor(micros(last)) : undefined;
  return { picked, ...(next !== undefined ? { next } : {}), ...(total !== undefined ? { total } : {}) };
}

/** The entries of the picked versions, their bodies read with `read`. */
export async function historyEntries<H extends VersionHead>(
  picked: readonly PickedVersion<H>[],
  read: (picked: PickedVersion<H>) => Promise<StoredResource>,
): Promise<HistoryEntry[]> {
  return Promise.all(
    picked.map(async (p): Promise<HistoryEntry> => {
      const { head } = p;
      const entry: HistoryEntry = {
        method: p.method,
        resourceType: p.source.resourceType,
        id: head.id,
        versionId: head.versionId,
        lastUpdated: isoMicros(head.lastUpdatedMicros),
      };
      if (!head.deleted) entry.resource = await read(p);
      return entry;
    }),
  );
}

/** A page of `HistoryPage` shape from `pickHistory`'s answer and the entries read. */
export function historyPage(choice: { next?: string; total?: number }, entries: HistoryEntry[]): HistoryPage {
  return {
    entries,
    ...(choice.next !== undefined ? { next: choice.next } : {}),
    ...(choice.total !== undefined ? { total: choice.total } : {}),
  };
}
