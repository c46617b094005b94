import type { Engine } from '../engine/engine.js';
import {
  checkHistoryQuery,
  findVersion,
  historyEntries,
  historyPage,
  pickHistory,
  versionNotFound,
  type HistorySource,
} from '../engine/history.js';
import type { HistoryPage, HistoryQuery, StoredResource } from '../types.js';
import type { FileBackend } from './file-backend.js';
import type { FileVersion, FileVersionList } from './version-index.js';

type FileSource = HistorySource<FileVersion> & { list: FileVersionList };

/**
 * The version lists of a project's logs (of one type when given), built where missing. A build
 * reads the whole log once, in the writer between batches (writes wait meanwhile), so it sees
 * exactly the committed records; every later commit then adds its versions to the list.
 */
async function versionSources(
  engine: Engine,
  backend: FileBackend,
  projectId: string,
  resourceType?: string,
): Promise<FileSource[]> {
  for (;;) {
    const logs = backend.versionLists(projectId, resourceType);
    const missing = logs.filter((l) => !l.list?.current);
    if (missing.length === 0) return logs.map((l) => ({ resourceType: l.resourceType, list: l.list! }));
    // A transaction with no write: it holds the writer while the logs are read.
    await engine.transaction(async () => {
      for (const l of backend.versionLists(projectId, resourceType))
        if (!l.list?.current) await backend.buildVersionList(l.log);
    });
  }
}

/** Runs `read` with the segments of `lists` pinned (a compaction may replace them meanwhile). */
async function pinned<T>(lists: Iterable<FileVersionList>, read: () => Promise<T>): Promise<T> {
  const segments = new Set([...lists].map((l) => l.segment));
  for (const s of segments) s.pin();
  try {
    return await read();
  } finally {
    for (const s of segments) s.unpin();
  }
}

/** `Storage.readResourceVersion` of the file store. */
export async function readFileVersion(
  engine: Engine,
  backend: FileBackend,
  {
    projectId,
    resourceType,
    id,
    versionId,
  }: { projectId: string; resourceType: string; id: string; versionId: string },
): Promise<StoredResource> {
  const current = engine.root.view().resource(projectId, resourceType, id);
  if (!current) throw versionNotFound(resourceType, id, versionId);
  if (current.versionId === versionId) {
    // The current version needs no version list.
    if (current.deleted) throw versionNotFound(resourceType, id, versionId, true);
    const unpin = engine.root.pin([current]);
    try {
      return await engine.root.readBody(current);
    } finally {
      unpin();
    }
  }
  const [source] = await versionSources(engine, backend, projectId, resourceType);
  const index = findVersion(source?.list, id, versionId);
  const version = index === undefined ? undefined : source!.list.versions[index]!;
  if (!version || version.deleted) throw versionNotFound(resourceType, id, versionId, version?.deleted);
  return pinned([source!.list], () => backend.readVersion(source!.list, version));
}

/** `Storage.readHistory` of the file store. */
export async function readFileHistory(
  engine: Engine,
  backend: FileBackend,
  projectId: string,
  query: HistoryQuery,
): Promise<HistoryPage> {
  engine.assertOpen();
  checkHistoryQuery(query);
  const sources = await versionSources(engine, backend, projectId, query.type);
  // Chosen and pinned synchronously, so a compaction cannot move what the page reads.
  const choice = pickHistory(sources, query);
  const lists = choice.picked.map((p) => (p.source as FileSource).list);
  const entries = await pinned(lists, () =>
    historyEntries(choice.picked, (p) => backend.readVersion((p.source as FileSource).list, p.head)),
  );
  return historyPage(choice, entries);
}
