import type { VersionHead, VersionList } from '../engine/history.js';
import type { Mutation } from '../engine/mutation.js';
import type { StoredResource } from '../types.js';
import type { FileRef, LogFile, Segment } from './log-file.js';
import { HEADER_LENGTH, OP_DELETE, readLastUpdated, readOp } from './record.js';

/** A version in a resource log: its place in the log besides its head. */
export interface FileVersion extends VersionHead {
  /** Offset of the record in the segment's file. */
  offset: number;
  /** Bytes of the record's JSON. */
  jsonLength: number;
}

/** Every version a resource log holds, in log (commit) order, for one segment of it. */
export class FileVersionList implements VersionList<FileVersion> {
  readonly versions: FileVersion[] = [];
  readonly latest = new Map<string, number>();

  constructor(
    readonly log: LogFile,
    readonly segment: Segment,
  ) {}

  /** False once a compaction replaced the file the list describes. */
  get current(): boolean {
    return this.log.segment === this.segment;
  }

  add(version: Omit<FileVersion, 'prev' | 'superseded'>): void {
    const index = this.versions.length;
    const prev = this.latest.get(version.id) ?? -1;
    const before = prev >= 0 ? this.versions[prev]! : undefined;
    if (before) before.superseded = index;
    // One literal of a fixed shape, and one id string per resource (its first version's): memory.
    this.versions.push({
      id: before?.id ?? version.id,
      versionId: version.versionId,
      lastUpdatedMicros: version.lastUpdatedMicros,
      deleted: version.deleted,
      prev,
      superseded: -1,
      offset: version.offset,
      jsonLength: version.jsonLength,
    });
    this.latest.set(version.id, index);
  }

  /** Where the body of a version is, for `LogFile.readJson`. */
  ref(version: FileVersion): FileRef {
    return { log: this.log, segment: this.segment, offset: version.offset, jsonLength: version.jsonLength };
  }
}

/**
 * Reads every record of `log` up to its committed end into a version list (one parse per record:
 * a tombstone's JSON names its version too). Runs in the writer between batches (nothing is
 * appended meanwhile) or on a pinned segment.
 */
export async function scanVersions(log: LogFile): Promise<FileVersionList> {
  const list = new FileVersionList(log, log.segment);
  await log.scan(0, log.size, ({ buf, start, end, offset }) => {
    const jsonLength = end - 1 - (start + HEADER_LENGTH);
    const json = buf.toString('utf8', start + HEADER_LENGTH, end - 1);
    const { id, meta } = JSON.parse(json) as StoredResource;
    list.add({
      id,
      versionId: meta.versionId,
      lastUpdatedMicros: readLastUpdated(buf, start),
      deleted: readOp(buf, start) === OP_DELETE,
      offset,
      jsonLength,
    });
  });
  return list;
}

/**
 * The version lists of the resource logs whose history was asked for, built on first use and then
 * kept up to date by every commit. Memory: one small object per version of those types (about 130
 * bytes); types never asked for cost nothing.
 */
export class FileVersionIndex {
  private readonly lists = new Map<LogFile, FileVersionList>();

  /** The list of `log`, if built and still describing its file. */
  get(log: LogFile): FileVersionList | undefined {
    const list = this.lists.get(log);
    if (list && !list.current) this.lists.delete(log);
    return list?.current ? list : undefined;
  }

  /** Builds the list of `log` (call in the writer, between batches). */
  async build(log: LogFile): Promise<FileVersionList> {
    const known = this.get(log);
    if (known) return known;
    const list = await scanVersions(log);
    this.lists.set(log, list);
    return list;
  }

  /** Adds a committed batch's versions to the lists built (refs as `persist` answers them). */
  record(
    mutations: readonly Mutation[],
    refs: readonly unknown[],
    liveLogs: ReadonlyMap<LogFile, unknown>,
  ): void {
    if (this.lists.size === 0) return;
    mutations.forEach((m, i) => {
      if (m.kind === 'project-delete') {
        for (const log of this.lists.keys()) if (!liveLogs.has(log)) this.lists.delete(log);
      }
      if (m.kind !== 'resource-put' && m.kind !== 'resource-delete') return;
      const ref = refs[i] as FileRef;
      const list = this.get(ref.log);
      if (!list) return;
      if (ref.segment !== list.segment) {
        this.lists.delete(ref.log);
        return;
      }
      const { entry } = m;
      list.add({
        id: entry.id,
        versionId: entry.versionId,
        lastUpdatedMicros: entry.lastUpdatedMicros,
        deleted: entry.deleted,
        offset: ref.offset,
        jsonLength: ref.jsonLength,
      });
    });
  }
}
