import { assertNever } from '../assert-never.js';
import { getOrCreate } from '../engine/map-entry.js';
import { pairKey, type Mutation } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import { StorageError } from '../errors.js';
import type { CommitLog } from './commit-log.js';
import { readDirectory } from './directory.js';
import type { FileRef, LogFile, Segment } from './log-file.js';
import { encodeRecord, HEADER_LENGTH } from './record.js';
import { encodeOneTimeValue, recordLogWrite } from './record-logs.js';
import type { DirectoryChange, StoreFiles } from './store-files.js';

/** The records a batch appends to one log, written with one call. */
interface Pending {
  log: LogFile;
  parts: Buffer[];
  bytes: number;
}

/**
 * A version a batch supersedes, whose superseded-at field is written once the batch commits:
 * `segment` is set for a committed version (`offset` in that file), unset for one written by the
 * same batch (`offset` relative to the batch's start in the log).
 */
interface Mark {
  log: LogFile;
  segment: Segment | undefined;
  offset: number;
  /** Offset of the superseding record, relative to the batch's start in the log. */
  byInBatch: number;
  /** Bytes of the superseded record. */
  length: number;
}

/** Where a resource record of the batch goes, until the batch's start offsets are known. */
interface BatchRef {
  log: LogFile;
  offsetInBatch: number;
  jsonLength: number;
}

/** One batch while it is encoded and written. */
class Batch {
  readonly pending = new Map<LogFile, Pending>();
  /** Aligned with the mutations: a `BatchRef`, then a `FileRef`, for resource records. */
  readonly refs: unknown[];
  /** `project\0type\0id` -> the resource's latest record in this batch. */
  readonly latest = new Map<string, { log: LogFile; offsetInBatch: number; length: number }>();
  readonly marks: Mark[] = [];
  /** Projects deleted by this batch: their committed resources are not superseded, but dropped. */
  readonly dropped = new Set<string>();
  readonly removedDirs: string[] = [];
  readonly directory: DirectoryChange;

  constructor(
    readonly seq: number,
    size: number,
    directoryChanged: boolean,
  ) {
    this.refs = new Array<unknown>(size);
    this.directory = { changed: directoryChanged };
  }

  /** Queues a record for a log; returns its offset relative to the batch's start in that log. */
  add(log: LogFile, record: Buffer): number {
    const p = getOrCreate(this.pending, log, () => ({ log, parts: [], bytes: 0 }));
    const at = p.bytes;
    p.parts.push(record);
    p.bytes += record.length;
    return at;
  }
}

/**
 * The file store's write path: group commit of one batch of mutations at a time. See
 * docs/storage.md, "Writes: group commit".
 */
export class GroupCommit {
  /** The last batch committed (or burned by a failed one). */
  seq = 0;
  private brokenBy: Error | undefined;

  constructor(
    private readonly files: StoreFiles,
    private readonly commitLog: CommitLog,
  ) {}

  /** Set once a failed write could not be undone: the store refuses writes until reopened. */
  get broken(): Error | undefined {
    return this.brokenBy;
  }

  /**
   * Makes a batch durable: append its records (one write per touched file), sync them, then mark
   * the batch committed (directory.json when it changed, else commit.log) and sync that; only
   * then write the superseded-at marks of the versions it replaced. Returns, aligned with
   * `mutations`, the `FileRef` of each resource record. `forceDirectoryWrite` commits through
   * directory.json even when no mutation changed it (a migration that changed it directly).
   */
  async persist(
    mutations: readonly Mutation[],
    base: BaseState,
    forceDirectoryWrite = false,
  ): Promise<unknown[]> {
    if (this.brokenBy)
      throw new StorageError('ERR_STORAGE_BROKEN', 'The store failed a write; reopen it', {
        cause: this.brokenBy,
      });
    const batch = new Batch(this.seq + 1, mutations.length, forceDirectoryWrite);
    for (const [i, m] of mutations.entries()) await this.encode(batch, i, m, base);
    const starts = await this.write(batch);
    this.seq = batch.seq;
    await this.settle(batch, starts);
    return batch.refs;
  }

  /** Applies one mutation to the directory data or queues its log record. */
  private async encode(batch: Batch, i: number, m: Mutation, base: BaseState): Promise<void> {
    const data = this.files.directory.data;
    switch (m.kind) {
      case 'project-put':
        data.projects[m.record.id] = m.record;
        batch.directory.changed = true;
        return;
      case 'project-delete': {
        delete data.projects[m.id];
        for (const [id, c] of Object.entries(data.clients)) if (c.projectId === m.id) delete data.clients[id];
        const dirName = data.projectDirs[m.id];
        if (dirName) batch.removedDirs.push(dirName);
        delete data.projectDirs[m.id];
        batch.dropped.add(m.id);
        for (const key of batch.latest.keys()) if (key.startsWith(`${m.id}\u0000`)) batch.latest.delete(key);
        batch.directory.changed = true;
        return;
      }
      case 'client-put':
        data.clients[m.record.id] = m.record;
        batch.directory.changed = true;
        return;
      case 'signing-key-put':
        data.keys[m.record.kid] = m.record;
        batch.directory.changed = true;
        return;
      case 'one-time-value-put':
        batch.add(
          this.files.onceLog,
          encodeRecord(batch.seq, 0, 'U', encodeOneTimeValue(m.key, m.expiresAt)),
        );
        return;
      case 'user-put':
      case 'user-delete':
      case 'membership-put':
      case 'membership-delete':
      case 'export-job-put':
      case 'export-job-delete': {
        const write = recordLogWrite(m)!;
        const log = await this.files.recordLog(write.projectId, write.log, batch.directory);
        batch.add(log, encodeRecord(batch.seq, 0, write.op, write.json));
        return;
      }
      case 'resource-put':
      case 'resource-delete':
        await this.encodeResource(batch, i, m, base);
        return;
      default:
        assertNever(m);
    }
  }

  /** Queues a resource record and the superseded-at mark of the version it replaces. */
  private async encodeResource(
    batch: Batch,
    i: number,
    m: Extract<Mutation, { kind: 'resource-put' | 'resource-delete' }>,
    base: BaseState,
  ): Promise<void> {
    const { entry } = m;
    const log = await this.files.resourceLog(m.projectId, entry.resourceType, batch.directory);
    const key = `${m.projectId}\u0000${pairKey(entry.resourceType, entry.id)}`;
    const inBatch = batch.latest.get(key);
    const committed = batch.dropped.has(m.projectId)
      ? undefined
      : base.resource(m.projectId, entry.resourceType, entry.id);
    const op = m.kind === 'resource-delete' ? 'D' : inBatch || committed ? 'U' : 'C';
    const record = encodeRecord(batch.seq, entry.lastUpdatedMicros, op, entry.json);
    const offsetInBatch = batch.add(log, record);
    if (inBatch) {
      batch.marks.push({
        log,
        segment: undefined,
        offset: inBatch.offsetInBatch,
        byInBatch: offsetInBatch,
        length: inBatch.length,
      });
    } else if (committed) {
      const ref = committed.ref as FileRef;
      const length = ref.jsonLength + HEADER_LENGTH + 1;
      batch.marks.push({ log, segment: ref.segment, offset: ref.offset, byInBatch: offsetInBatch, length });
    }
    batch.latest.set(key, { log, offsetInBatch, length: record.length });
    batch.refs[i] = { log, offsetInBatch, jsonLength: record.length - HEADER_LENGTH - 1 } satisfies BatchRef;
  }

  /** Appends, syncs and commits the batch; returns where its records start in each log. */
  private async write(batch: Batch): Promise<Map<LogFile, number>> {
    const { seq } = batch;
    const pending = [...batch.pending.values()];
    const starts = new Map<LogFile, number>();
    try {
      await Promise.all(
        pending.map(async (p) => {
          starts.set(p.log, p.log.size);
          await p.log.append(p.parts.length === 1 ? p.parts[0]! : Buffer.concat(p.parts, p.bytes));
        }),
      );
      if (this.files.sync) await Promise.all(pending.map((p) => p.log.sync()));
      if (!batch.directory.changed) await this.commitLog.append(seq);
    } catch (error) {
      // Not committed: undo. The seq is burned, so a commit.log record of this batch that did
      // reach the disk can never vouch for the records of a later batch.
      this.seq = seq;
      await this.rollback(starts, error);
      throw error;
    }
    if (batch.directory.changed) {
      this.files.directory.data.seq = seq;
      try {
        await this.files.directory.write();
      } catch (error) {
        // The rename may or may not have happened: the outcome is unknown until the next open,
        // whose recovery settles it. Refuse further writes meanwhile.
        this.brokenBy = error instanceof Error ? error : new Error(String(error));
        throw error;
      }
    }
    return starts;
  }

  /** After the commit: resolves in-batch offsets to file offsets and writes the superseded-at marks. */
  private async settle(batch: Batch, starts: Map<LogFile, number>): Promise<void> {
    const { refs } = batch;
    for (const [i, ref] of refs.entries()) {
      if (!ref) continue;
      const { log, offsetInBatch, jsonLength } = ref as BatchRef;
      refs[i] = {
        log,
        segment: log.segment,
        offset: starts.get(log)! + offsetInBatch,
        jsonLength,
      } satisfies FileRef;
    }
    await Promise.all(
      batch.marks.map(async (mark) => {
        const start = starts.get(mark.log)!;
        const offset = mark.segment ? mark.offset : start + mark.offset;
        mark.log.deadBytes += mark.length;
        try {
          await mark.log.markSuperseded(mark.segment ?? mark.log.segment, offset, start + mark.byInBatch);
        } catch {
          // Recovery recomputes marks; a failed one only matters until the next open.
        }
      }),
    );
    for (const p of batch.pending.values()) {
      p.log.records += p.parts.length;
      this.files.touched.add(p.log);
    }
    for (const dirName of batch.removedDirs) await this.files.dropProjectDir(dirName);
  }

  /** Undoes a failed batch: cut every touched log back and reload the directory file. */
  private async rollback(starts: Map<LogFile, number>, cause: unknown): Promise<void> {
    try {
      for (const [log, start] of starts) await log.truncate(start);
      await readDirectory(this.files.directory);
    } catch {
      // Cannot undo: refuse further writes rather than risk a corrupt store.
      this.brokenBy = cause instanceof Error ? cause : new Error(String(cause));
    }
  }
}
