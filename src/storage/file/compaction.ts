import fs from 'node:fs/promises';
import type { ResourceEntry } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import type { FaultHook } from './faults.js';
import type { FileRef, LogFile } from './log-file.js';
import { encodeRecord, readSuperseded, SUPERSEDED_AT, supersededField } from './record.js';
import { encodeOneTimeValue, liveRecords } from './record-logs.js';
import type { StoreFiles } from './store-files.js';
import { keptVersions } from '../engine/retention.js';
import type { HistoryRetention } from '../types.js';
import { scanVersions } from './version-index.js';

/** When and what compaction may drop: see `FileStorageOptions`. */
export interface CompactionRules {
  /** A resource log is rewritten once its droppable records take more than this and more than the rest. */
  minDeadBytes: number;
  /** Superseded versions to keep (`'all'`: resource logs are never rewritten). */
  history: HistoryRetention;
}

/**
 * Housekeeping after a batch: rewrites the logs it touched that are mostly dead (see
 * docs/file-store.md, "Compaction"). `seq` is the last committed batch, given to rewritten records.
 * `beforeRewrite` runs before any log is rewritten (the `batch.log` checkpoint: its entries name
 * offsets in the files a rewrite replaces).
 */
export async function compactTouchedLogs(
  files: StoreFiles,
  base: BaseState,
  seq: number,
  rules: CompactionRules,
  beforeRewrite: () => Promise<void> = () => Promise.resolve(),
): Promise<void> {
  const logs = [...files.touched];
  files.touched.clear();
  for (const log of logs) {
    const meta = files.meta.get(log);
    // Constant-time checks: this runs after every batch.
    if (log === files.onceLog) {
      if (log.records > 2 * base.onceCount() + 1024) {
        await beforeRewrite();
        await rewriteOnce(files, base, seq);
      }
    } else if (meta?.recordLog !== undefined) {
      // Counting live memberships or jobs is linear, so it runs only when the log has grown
      // past the last count's threshold: amortised constant time per record.
      if (log.records > (meta.checkAt ?? 0)) {
        const live = [...liveRecords(base, meta.recordLog, meta.projectId)];
        if (log.records > 2 * live.length + 1024) {
          await beforeRewrite();
          await rewriteRecords(log, live, seq, files);
        }
        meta.checkAt = 2 * live.length + 1024;
      }
    } else if (meta?.resourceType !== undefined && rules.history !== 'all') {
      // `deadBytes` counts what was superseded since the log was last written whole: with a
      // retention that keeps some of it, a rewrite keeps those and the count starts again at 0.
      const live = log.size - log.deadBytes;
      if (log.deadBytes >= rules.minDeadBytes && log.deadBytes > live) {
        await beforeRewrite();
        await compact(log, meta.projectId, meta.resourceType, base, files, rules.history);
      }
    }
  }
}

/**
 * Writes `chunks` to `<file>.compact` (synced with `files.sync`), in writes of about 1 MiB. On
 * failure (a full disk) the temp file is removed and the log is left as it was.
 */
async function writeTemp(
  file: string,
  chunks: Iterable<Buffer>,
  { sync, faults }: { sync: boolean; faults?: FaultHook | undefined },
): Promise<{ temp: string; size: number }> {
  const temp = `${file}.compact`;
  faults?.('open', temp);
  const handle = await fs.open(temp, 'w');
  let size = 0;
  const write = async (data: Buffer): Promise<void> => {
    faults?.('write', temp);
    await handle.write(data);
  };
  try {
    try {
      let parts: Buffer[] = [];
      let bytes = 0;
      for (const chunk of chunks) {
        parts.push(chunk);
        bytes += chunk.length;
        if (bytes >= 1024 * 1024) {
          await write(Buffer.concat(parts, bytes));
          size += bytes;
          parts = [];
          bytes = 0;
        }
      }
      if (bytes > 0) await write(Buffer.concat(parts, bytes));
      size += bytes;
      if (sync) {
        faults?.('fsync', temp);
        await handle.sync();
      }
    } finally {
      await handle.close();
    }
  } catch (error) {
    await fs.rm(temp, { force: true }).catch(() => undefined);
    throw error;
  }
  return { temp, size };
}

/** Rewrites `once.log` with only the unexpired values. */
async function rewriteOnce(files: StoreFiles, base: BaseState, seq: number): Promise<void> {
  const now = Date.now();
  const records: Buffer[] = [];
  for (const [key, expiresAt] of base.onceEntries()) {
    if (expiresAt > now) records.push(encodeRecord(seq, 0, 'U', encodeOneTimeValue(key, expiresAt)));
  }
  const { temp, size } = await writeTemp(files.onceLog.file, records, files);
  await files.onceLog.replaceWith(temp, size, files.sync);
  files.onceLog.records = records.length;
}

/** Rewrites a record log with only the current records. */
async function rewriteRecords(
  log: LogFile,
  live: readonly { id: string }[],
  seq: number,
  files: StoreFiles,
): Promise<void> {
  const records: Buffer[] = [];
  for (const record of live) records.push(encodeRecord(seq, 0, 'U', JSON.stringify(record)));
  const { temp, size } = await writeTemp(log.file, records, files);
  await log.replaceWith(temp, size, files.sync);
  log.records = records.length;
}

/**
 * The superseded records `history` keeps: offset -> offset of the record that superseded it (none
 * for `{ versions: 1 }`, which needs no parse of the log).
 */
async function keptSuperseded(log: LogFile, history: HistoryRetention): Promise<Map<number, number>> {
  const kept = new Map<number, number>();
  if (history === 'all' || ('versions' in history && history.versions === 1)) return kept;
  const list = await scanVersions(log);
  const keep = keptVersions(list, history, Date.now() * 1000);
  list.versions.forEach((v, i) => {
    if (keep[i] && v.superseded >= 0) kept.set(v.offset, list.versions[v.superseded]!.offset);
  });
  return kept;
}

/**
 * Rewrites a resource log without the superseded records `history` does not keep. Exports
 * reading a snapshot keep their hard link to the old file; readers of this process keep the old
 * segment until they finish.
 */
async function compact(
  log: LogFile,
  projectId: string,
  resourceType: string,
  base: BaseState,
  files: StoreFiles,
  history: HistoryRetention,
): Promise<void> {
  const entries = new Map<number, ResourceEntry>();
  for (const e of base.resources(projectId, resourceType)) {
    const ref = e.ref as FileRef;
    if (ref.log === log) entries.set(ref.offset, e);
  }
  const superseded = await keptSuperseded(log, history);
  const kept: Buffer[] = [];
  const moved = new Map<number, number>();
  let newOffset = 0;
  let current = 0;
  const marks: [Buffer, number][] = [];
  await log.scan(0, log.size, ({ buf, start, end, offset }) => {
    const isCurrent = readSuperseded(buf, start) === 0 && entries.has(offset);
    const by = superseded.get(offset);
    if (!isCurrent && by === undefined) return;
    if (isCurrent) current += 1;
    const record = Buffer.from(buf.subarray(start, end));
    if (by !== undefined) marks.push([record, by]);
    kept.push(record);
    moved.set(offset, newOffset);
    newOffset += end - start;
  });
  // Marks disagree with the index, or a kept version's successor is not kept: leave the log alone.
  if (current !== entries.size || marks.some(([, by]) => !moved.has(by))) return;
  // A kept old version's superseded-at names its successor's new offset (exports read it).
  for (const [record, by] of marks) supersededField(moved.get(by)!).copy(record, SUPERSEDED_AT);
  const { temp, size } = await writeTemp(log.file, kept, files);
  await log.replaceWith(temp, size, files.sync);
  log.records = kept.length;
  for (const [oldOffset, entry] of entries) {
    const ref = entry.ref as FileRef;
    base.putEntry(projectId, {
      ...entry,
      ref: { ...ref, segment: log.segment, offset: moved.get(oldOffset)! },
    });
  }
}
