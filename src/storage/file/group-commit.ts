import path from 'node:path';
import { assertNever } from '../assert-never.js';
import { getOrCreate } from '../engine/map-entry.js';
import { pairKey, type Mutation } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import { StorageUnavailableError } from '../errors.js';
import { BatchLog } from './batch-log.js';
import type { CommitLog } from './commit-log.js';
import { readDirectory } from './directory.js';
import { UnsyncedRenameError } from './durable-json-file.js';
import { unavailable } from './faults.js';
import type { FileRef, LogFile, Segment } from './log-file.js';
import { encodeRecordInto, recordLength, type RecordOp } from './record.js';
import { encodeOneTimeValue, recordLogWrite } from './record-logs.js';
import type { DirectoryChange, StoreFiles } from './store-files.js';

/** A record queued by a batch, encoded when the batch is written. */
interface QueuedRecord {
  lastUpdatedMicros: number;
  op: RecordOp;
  json: string;
  jsonLength: number;
}

/** The records a batch appends to one log, encoded into one buffer and written with one call. */
interface Pending {
  log: LogFile;
  records: QueuedRecord[];
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

  /**
   * Queues a record for a log; returns its offset relative to the batch's start in that log.
   * `jsonLength`: the JSON's UTF-8 bytes, when the caller has measured them.
   */
  add(
    log: LogFile,
    lastUpdatedMicros: number,
    op: RecordOp,
    json: string,
    jsonLength = Buffer.byteLength(json),
  ): number {
    const p = getOrCreate(this.pending, log, () => ({ log, records: [], bytes: 0 }));
    const at = p.bytes;
    p.records.push({ lastUpdatedMicros, op, json, jsonLength });
    p.bytes += recordLength(jsonLength);
    return at;
  }

  /** The records queued for a log, encoded one after the other. */
  encode(p: Pending): Buffer {
    const buf = Buffer.allocUnsafe(p.bytes);
    let at = 0;
    for (const r of p.records) {
      encodeRecordInto(buf, at, this.seq, r.lastUpdatedMicros, r.op, r.json, r.jsonLength);
      at += recordLength(r.jsonLength);
    }
    return buf;
  }
}

/** What undoing a failed batch on disk takes (see `GroupCommit.undo`). */
interface Undo {
  /** Each log the batch appended to (or tried to), and its committed size before the batch. */
  starts: Map<LogFile, number>;
  /** `commit.log`'s end before the batch, when the batch tried to append its commit record. */
  commitEnd: number | undefined;
  /** `batch.log`'s end before the batch, when the batch tried to append its entry. */
  batchEnd?: number | undefined;
  /** The batch's `directory.json` was renamed into place, not known durable: put the old one back. */
  directory: boolean;
  /** The failure that left this undo to do. */
  cause: unknown;
}

/**
 * The file store's write path: group commit of one batch of mutations at a time. See
 * docs/file-store.md, "Writes: group commit".
 */
export class GroupCommit {
  /** The last batch committed (or burned by a failed one). */
  seq = 0;
  /** A failed batch whose undo on disk failed too: retried before the next batch. */
  private pendingUndo: Undo | undefined;

  /**
   * `batchLog`: where batches that change no directory data commit, with one fsync (the file
   * store's write-ahead log; given with `durability: 'fsync'`). Without it they commit by syncing
   * each log they appended to, then a `commit.log` record.
   */
  constructor(
    private readonly files: StoreFiles,
    private readonly commitLog: CommitLog,
    private readonly batchLog?: BatchLog,
  ) {}

  /**
   * Set while a failed batch is not undone on disk yet (each batch retries first): the files may
   * hold its records, so no index file may be written.
   */
  get broken(): unknown {
    return this.pendingUndo?.cause;
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
    const pending = this.pendingUndo;
    if (pending) {
      this.pendingUndo = undefined;
      if (!(await this.undo(pending))) {
        throw new StorageUnavailableError('The file store cannot undo a failed write yet', {
          cause: this.pendingUndo!.cause,
        });
      }
    }
    const batch = new Batch(this.seq + 1, mutations.length, forceDirectoryWrite);
    try {
      // Opening a new log (a project's first write of a type) may fail as any write does.
      for (const [i, m] of mutations.entries()) await this.encode(batch, i, m, base);
    } catch (error) {
      // The directory data may hold changes of this batch: reload it.
      await this.undo({ starts: new Map(), commitEnd: undefined, directory: false, cause: error });
      throw unavailable(error, 'The file store could not write');
    }
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
        batch.add(this.files.onceLog, 0, 'U', encodeOneTimeValue(m.key, m.expiresAt));
        return;
      case 'user-put':
      case 'user-delete':
      case 'membership-put':
      case 'membership-delete':
      case 'export-job-put':
      case 'export-job-delete': {
        const write = recordLogWrite(m)!;
        const log = await this.files.recordLog(write.projectId, write.log, batch.directory);
        batch.add(log, 0, write.op, write.json);
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
    const jsonLength = entry.jsonBytes ?? Buffer.byteLength(entry.json);
    const length = recordLength(jsonLength);
    const offsetInBatch = batch.add(log, entry.lastUpdatedMicros, op, entry.json, jsonLength);
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
      batch.marks.push({
        log,
        segment: ref.segment,
        offset: ref.offset,
        byInBatch: offsetInBatch,
        length: recordLength(ref.jsonLength),
      });
    }
    batch.latest.set(key, { log, offsetInBatch, length });
    batch.refs[i] = { log, offsetInBatch, jsonLength } satisfies BatchRef;
  }

  /**
   * Appends, syncs and commits the batch; returns where its records start in each log. On failure
   * the batch is undone (see `undo`) and the caller gets a `StorageUnavailableError`.
   */
  private async write(batch: Batch): Promise<Map<LogFile, number>> {
    const { seq } = batch;
    const pending = [...batch.pending.values()];
    const starts = new Map<LogFile, number>();
    for (const p of pending) starts.set(p.log, p.log.size);
    let commitEnd: number | undefined;
    let batchEnd: number | undefined;
    try {
      // allSettled (settleAll): no append or sync may still be running when a failure is undone.
      const { batchLog } = this;
      if (batchLog && !batch.directory.changed && BatchLog.fits(pending)) {
        // One entry in batch.log, synced, commits the batch; the logs' own appends go to the page
        // cache alongside (see docs/file-store.md, "Writes: group commit").
        const data = pending.map((p) => batch.encode(p));
        const parts = pending.map((p, i) => ({
          file: path.relative(this.files.dir, p.log.file),
          offset: starts.get(p.log)!,
          data: data[i]!,
        }));
        batchEnd = batchLog.size;
        await settleAll([
          batchLog.append(seq, parts),
          ...pending.map(async (p, i) => {
            await p.log.append(data[i]!);
            // A compaction's rename not known durable yet: sync it before the entry can name
            // offsets in the new file.
            if (p.log.renameUnsynced) await p.log.sync();
            this.files.unsynced.add(p.log);
          }),
        ]);
        return starts;
      }
      // Each log is synced as soon as its own append is done (one wait for all, not one for the
      // appends and another for the syncs).
      const sync = this.files.sync;
      await settleAll(
        pending.map(async (p) => {
          await p.log.append(batch.encode(p));
          if (sync) await p.log.sync();
        }),
      );
      if (!batch.directory.changed) {
        commitEnd = this.commitLog.end;
        await this.commitLog.append(seq);
      } else {
        this.files.directory.data.seq = seq;
        await this.files.directory.write();
      }
    } catch (error) {
      // Not committed: undo. The seq is burned, so a commit.log record of this batch that did
      // reach the disk can never vouch for the records of a later batch.
      this.seq = seq;
      const directory = error instanceof UnsyncedRenameError;
      const cause = directory ? error.cause : error;
      await this.undo({ starts, commitEnd, batchEnd, directory, cause });
      throw unavailable(cause, 'The file store could not write');
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
      p.log.records += p.records.length;
      this.files.touched.add(p.log);
    }
    for (const dirName of batch.removedDirs) await this.files.dropProjectDir(dirName);
  }

  /**
   * Makes the logs hold on their own what `batch.log` holds for them, then empties it: syncs every
   * log appended to since the last checkpoint, records the last committed seq in `commit.log`
   * (durably: `batch.log` no longer carries it), and cuts `batch.log` to nothing. Runs in the
   * writer, between batches: when `batch.log` has grown past `threshold` bytes, before a
   * compaction rewrites a log (its entries name offsets in the files they were written to), and on
   * close. Not while a failed batch is not undone (its seq must not be vouched for). A failure
   * leaves `batch.log` as it was, and the next checkpoint tries again.
   */
  async checkpoint(threshold = 0): Promise<void> {
    const { batchLog } = this;
    if (!batchLog || batchLog.size === 0 || batchLog.size < threshold) return;
    if (this.pendingUndo) throw this.pendingUndo.cause;
    const logs = [...this.files.unsynced];
    await settleAll(logs.map((log) => log.sync()));
    for (const log of logs) this.files.unsynced.delete(log);
    await this.commitLog.append(this.seq);
    await batchLog.truncate(0);
  }

  /**
   * Undoes a failed batch on disk, in an order that keeps the store consistent at every step
   * should the process die: first whatever commits it (the old `directory.json` back, durably;
   * `commit.log` cut before its record, durably), then its records in the logs (cut, durably, so
   * that no later commit can vouch for them), then the directory data reloaded. False when a step
   * fails (the disk still full, say): the undo is then retried before the next batch, which
   * fails meanwhile, and until then the store is as a crash would leave it.
   */
  private async undo(undo: Undo): Promise<boolean> {
    try {
      if (undo.directory) {
        await this.files.directoryFile.restore();
        undo.directory = false;
      }
      if (undo.commitEnd !== undefined) {
        await this.commitLog.truncate(undo.commitEnd);
        undo.commitEnd = undefined;
      }
      if (undo.batchEnd !== undefined) {
        await this.batchLog!.truncate(undo.batchEnd);
        undo.batchEnd = undefined;
      }
      for (const [log, start] of undo.starts) {
        await log.truncate(start);
        if (this.files.sync) await log.sync();
        undo.starts.delete(log);
      }
      await readDirectory(this.files.directory);
      return true;
    } catch (error) {
      undo.cause = error instanceof UnsyncedRenameError ? error.cause : error;
      this.pendingUndo = undo;
      return false;
    }
  }
}

/** Awaits every promise, then throws the first failure, if any. */
async function settleAll(promises: Promise<unknown>[]): Promise<void> {
  const failed = (await Promise.allSettled(promises)).find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}
