import fs from 'node:fs/promises';
import type { ResourceEntry } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import type { FaultHook } from './faults.js';
import type { FileRef, LogFile } from './log-file.js';
import { encodeRecord, readSuperseded } from './record.js';
import { encodeOneTimeValue, liveRecords } from './record-logs.js';
import type { StoreFiles } from './store-files.js';

/**
 * Housekeeping after a batch: rewrites the logs it touched that are mostly dead (see
 * docs/storage.md, "Compaction"). `seq` is the last committed batch, given to rewritten records.
 * `beforeRewrite` runs before any log is rewritten (the `batch.log` checkpoint: its entries name
 * offsets in the files a rewrite replaces).
 */
export async function compactTouchedLogs(
  files: StoreFiles,
  base: BaseState,
  seq: number,
  compactionMinDeadBytes: number,
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
    } else if (meta?.resourceType !== undefined) {
      const live = log.size - log.deadBytes;
      if (log.deadBytes >= compactionMinDeadBytes && log.deadBytes > live) {
        await beforeRewrite();
        await compact(log, meta.projectId, meta.resourceType, base, files);
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
 * Rewrites a resource log without superseded records. Exports reading a snapshot keep their
 * hard link to the old file; readers of this process keep the old segment until they finish.
 */
async function compact(
  log: LogFile,
  projectId: string,
  resourceType: string,
  base: BaseState,
  files: StoreFiles,
): Promise<void> {
  const entries = new Map<number, ResourceEntry>();
  for (const e of base.resources(projectId, resourceType)) {
    const ref = e.ref as FileRef;
    if (ref.log === log) entries.set(ref.offset, e);
  }
  const kept: Buffer[] = [];
  const moved = new Map<number, number>();
  let newOffset = 0;
  await log.scan(0, log.size, ({ buf, start, end, offset }) => {
    if (readSuperseded(buf, start) !== 0 || !entries.has(offset)) return;
    kept.push(Buffer.from(buf.subarray(start, end)));
    moved.set(offset, newOffset);
    newOffset += end - start;
  });
  if (moved.size !== entries.size) return; // Marks disagree with the index: leave the log alone.
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
