import fs from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import {
  HEADER_LENGTH,
  OP_AT,
  OP_DELETE,
  readLastUpdated,
  readOp,
  readSuperseded,
  SUPERSEDED_AT,
} from './record.js';
import { checkPatientCompartment } from '../patient-compartment.js';
import { untilMicros } from '../export-window.js';
import { asFileSnapshot, type FileSnapshot } from './snapshot.js';
import type {
  ExportReader,
  ExportReadOptions,
  ExportSnapshot,
  NdjsonChunk,
  PatientCompartment,
  StoredResource,
  Tombstone,
} from '../types.js';
import { InvalidOptionError } from '../../errors.js';
import { StorageError } from '../errors.js';
import { unavailable, type FaultHook } from './faults.js';

/** Options of `openFileExportReader` (the `options` of a file store's descriptor: plain data). */
export interface FileExportReaderOptions {
  /** The file store's directory. */
  dir: string;
  /**
   * Target size of the NDJSON chunks yielded, in bytes.
   * @default 1048576
   */
  chunkBytes?: number;
}

const BLOCK = 1024 * 1024;
/** `positions.json`: per type, `[offset, jsonLength]` of the saved compartments' records. */
type Positions = Record<string, [number, number][]>;
/**
 * Compartment reads: records at most this far apart are read in one block with the gap between
 * them (reading a few KiB too many costs less than another read call).
 */
const MAX_GAP = 64 * 1024;
const NEWLINE = 0x0a;
/** Four ASCII '0' bytes read as a little-endian uint32. */
const ZEROS = 0x30303030;
/** Free buffers a reader keeps for reuse (more only while reads run concurrently). */
const POOL_SIZE = 4;

async function readFully(handle: FileHandle, buf: Buffer, length: number, position: number): Promise<void> {
  let got = 0;
  while (got < length) {
    const { bytesRead } = await handle.read(buf, got, length - got, position + got);
    if (bytesRead === 0) throw new StorageError('ERR_STORAGE_CORRUPT', 'Unexpected end of a snapshot file');
    got += bytesRead;
  }
}

/**
 * Buffers of one size, reused across the reads of one reader, so an export allocates its read
 * and chunk buffers once instead of once per MiB (external memory that V8 frees lazily).
 */
class BufferPool {
  private readonly free: Buffer[] = [];

  constructor(readonly size: number) {}

  take(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafe(this.size);
  }

  /** Gives back a buffer taken from this pool (others, e.g. grown ones, are dropped). */
  give(buf: Buffer): void {
    if (buf.length === this.size && this.free.length < POOL_SIZE) this.free.push(buf);
  }
}

/**
 * Reads `[0, end)` of a file in large blocks and yields, per block, the complete lines it holds:
 * `buf[0, stop)`, `offset` being the file offset of `buf[0]`. The buffer is reused once the
 * consumer asks for the next block.
 */
async function* lineBlocks(
  handle: FileHandle,
  end: number,
  pool: BufferPool,
): AsyncIterable<{ buf: Buffer; stop: number; offset: number }> {
  const pooled = pool.take();
  let buf = pooled;
  try {
    let filled = 0;
    let position = 0;
    while (position < end) {
      if (filled === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, filled);
        buf = bigger;
      }
      const { bytesRead } = await handle.read(
        buf,
        filled,
        Math.min(buf.length - filled, end - position),
        position,
      );
      if (bytesRead <= 0) return;
      position += bytesRead;
      const total = filled + bytesRead;
      const lastNewline = buf.lastIndexOf(NEWLINE, total - 1);
      if (lastNewline < 0) {
        filled = total;
        continue;
      }
      yield { buf, stop: lastNewline + 1, offset: position - total };
      buf.copy(buf, 0, lastNewline + 1, total);
      filled = total - lastNewline - 1;
    }
  } finally {
    pool.give(pooled);
  }
}

/** Calls `visit(start, end)` for each line of `buf[0, stop)` (`end` just past its newline). */
/** The `lastUpdated` bounds of a read, in microseconds: after `since` (-1: any), at or before `until`. */
interface TimeWindow {
  since: number;
  until: number;
}

function inWindow(lastUpdated: number, window: TimeWindow): boolean {
  return lastUpdated > window.since && lastUpdated <= window.until;
}

function forEachLine(buf: Buffer, stop: number, visit: (start: number, end: number) => void): void {
  let start = 0;
  while (start < stop) {
    const nl = buf.indexOf(NEWLINE, start);
    visit(start, nl + 1);
    start = nl + 1;
  }
}

/**
 * Collects NDJSON lines into chunk buffers of about `size` bytes. With `reuse`, it alternates
 * between two pooled buffers: a yielded chunk stays intact until the consumer asks for the next
 * one, which is all `ExportReadOptions.reuseChunks` promises. Call `release()` when done.
 */
class ChunkBuilder {
  private out: Buffer;
  /** With `reuse`: the buffer of the chunk last taken (the consumer's until it asks for more). */
  private spare: Buffer | undefined;
  private length = 0;
  private count = 0;
  private readonly size: number;

  constructor(
    private readonly pool: BufferPool,
    private readonly reuse: boolean,
  ) {
    this.size = pool.size;
    this.out = reuse ? pool.take() : Buffer.allocUnsafe(this.size);
  }

  release(): void {
    if (!this.reuse) return;
    this.pool.give(this.out);
    if (this.spare) this.pool.give(this.spare);
    this.spare = undefined;
  }

  /** Adds `src[start, end)` (one line with its newline); returns a full chunk when one is ready. */
  add(src: Buffer, start: number, end: number): NdjsonChunk | undefined {
    const n = end - start;
    let full: NdjsonChunk | undefined;
    if (this.length + n > this.out.length) {
      full = this.take();
      if (n > this.out.length) this.out = Buffer.allocUnsafe(n);
    }
    src.copy(this.out, this.length, start, end);
    this.length += n;
    this.count += 1;
    return full;
  }

  take(): NdjsonChunk | undefined {
    if (this.count === 0) return undefined;
    const chunk = { data: this.out.subarray(0, this.length), count: this.count };
    if (this.reuse) {
      // The consumer has finished with the spare's chunk: it asked for this one.
      const next = this.spare ?? this.pool.take();
      this.spare = this.out;
      this.out = next;
    } else {
      // The yielded buffer now belongs to the consumer: never write into it again.
      this.out = Buffer.allocUnsafe(this.size);
    }
    this.length = 0;
    this.count = 0;
    return chunk;
  }
}

/**
 * Export reads of a file store, from the snapshot files alone (hard links taken at kick-off), so it
 * runs in any thread or process that can see the directory, and compaction or new writes never
 * disturb it. Records are copied from the log into NDJSON without parsing JSON: a record is the
 * version current at the snapshot when it is not a tombstone, lies before the snapshot's end
 * offset, and was not superseded before that offset.
 */
export class FileExportReader implements ExportReader {
  private readonly chunkBytes: number;
  private readonly blocks = new BufferPool(BLOCK);
  private readonly chunkPool: BufferPool;
  /** The positions file last read (one job's reader reads the same one for every type). */
  private positionsCache: { file: string; positions: Promise<Positions> } | undefined;
  /** Per snapshot and type: each patient's record positions (see `compartmentIndex`). */
  private readonly compartmentIndexes = new Map<string, Promise<Map<string, [number, number][]>>>();

  constructor(
    private readonly options: FileExportReaderOptions,
    private readonly patientCompartment: PatientCompartment,
    /** Tests only (see `FaultHook`): the store's hook, for runs in its thread. */
    private readonly faults?: FaultHook,
  ) {
    this.chunkBytes = options.chunkBytes ?? 1024 * 1024;
    this.chunkPool = new BufferPool(this.chunkBytes);
  }

  private file(snapshot: FileSnapshot, name: string): string {
    return path.join(this.options.dir, snapshot.dir, name);
  }

  /** The snapshot's saved compartment positions, read and parsed once per reader and snapshot. */
  private positions(snap: FileSnapshot): Promise<Positions> {
    const file = this.file(snap, snap.positions!);
    if (this.positionsCache?.file !== file) {
      const positions = fs.readFile(file, 'utf8').then((text) => {
        const parsed = JSON.parse(text) as Positions;
        // Sorted when written; sorting again costs little and makes block reads safe regardless.
        for (const list of Object.values(parsed)) list.sort((a, b) => a[0] - b[0]);
        return parsed;
      });
      // A failed read is not cached.
      positions.catch(() => {
        if (this.positionsCache?.positions === positions) this.positionsCache = undefined;
      });
      this.positionsCache = { file, positions };
    }
    return this.positionsCache.positions;
  }

  async *readResources(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<NdjsonChunk> {
    const snap = asFileSnapshot(projectId, snapshot);
    const type = snap.types[options.resourceType];
    if (!type || type.end === 0) return;
    const window: TimeWindow = {
      since: options.since === undefined ? -1 : options.since * 1000,
      until: untilMicros(options),
    };
    const file = this.file(snap, type.file);
    const handle = await fs.open(file, 'r').catch((error: unknown) => {
      throw unavailable(error, 'The file store could not read an export snapshot');
    });
    const chunks = new ChunkBuilder(this.chunkPool, options.reuseChunks === true);
    try {
      this.faults?.('read', file);
      if (options.patientIds) {
        yield* this.compartment(
          snap,
          handle,
          type.end,
          options.resourceType,
          options.patientIds,
          window,
          chunks,
        );
      } else {
        yield* this.scan(handle, type.end, window, chunks, undefined, file);
      }
    } catch (error) {
      // An I/O error (EIO) as StorageUnavailableError: the export fails as transient.
      throw unavailable(error, 'The file store could not read an export snapshot');
    } finally {
      chunks.release();
      await handle.close();
    }
  }

  /** The hot path: one sequential pass in large blocks, copying qualifying JSON lines. */
  private async *scan(
    handle: FileHandle,
    end: number,
    window: TimeWindow,
    chunks: ChunkBuilder,
    only?: ReadonlySet<number>,
    file?: string,
  ): AsyncIterable<NdjsonChunk> {
    const anyTime = window.since < 0 && window.until === Infinity;
    for await (const { buf, stop, offset } of lineBlocks(handle, end, this.blocks)) {
      if (file !== undefined && offset > 0) this.faults?.('read', file);
      let start = 0;
      while (start < stop) {
        const nl = buf.indexOf(NEWLINE, start);
        if (
          buf[start + OP_AT] !== OP_DELETE &&
          (anyTime || inWindow(readLastUpdated(buf, start), window)) &&
          (!only || only.has(offset + start))
        ) {
          // Most records are current: compare the field with "000000000000" before parsing it.
          const at = start + SUPERSEDED_AT;
          const current =
            buf.readUInt32LE(at) === ZEROS &&
            buf.readUInt32LE(at + 4) === ZEROS &&
            buf.readUInt32LE(at + 8) === ZEROS;
          if (current || readSuperseded(buf, start) >= end) {
            const full = chunks.add(buf, start + HEADER_LENGTH, nl + 1);
            if (full) yield full;
          }
        }
        start = nl + 1;
      }
    }
    const last = chunks.take();
    if (last) yield last;
  }

  /** Patient/Group exports: only the records of these compartments. */
  private async *compartment(
    snap: FileSnapshot,
    handle: FileHandle,
    end: number,
    resourceType: string,
    patientIds: string[],
    window: TimeWindow,
    chunks: ChunkBuilder,
  ): AsyncIterable<NdjsonChunk> {
    const wanted = new Set(patientIds);
    const recorded = snap.positions && snap.patientIds ? new Set(snap.patientIds) : undefined;
    const { patientCompartment } = this;
    const inCompartment = (buf: Buffer, start: number, end: number): boolean =>
      patientCompartment
        .patientIds(JSON.parse(buf.toString('utf8', start, end)) as StoredResource)
        .some((p) => wanted.has(p));
    const saved = recorded !== undefined && patientIds.every((p) => recorded.has(p));
    const single = patientIds.length === 1 ? patientIds[0]! : undefined;
    if (saved || single !== undefined) {
      // Positions saved at the snapshot (or, for one patient, indexed by this reader): cost
      // follows the compartment, not the store.
      const exact = saved ? recorded.size === wanted.size : true;
      const list = saved
        ? ((await this.positions(snap))[resourceType] ?? [])
        : ((await this.compartmentIndex(snap, handle, end, resourceType)).get(single!) ?? []);
      let bytes = 0;
      for (const [, jsonLength] of list) bytes += HEADER_LENGTH + jsonLength + 1;
      if (exact && bytes > end / 4) {
        // A large share of the log (a Patient export of most patients): one sequential pass
        // keeping those offsets beats a read per record.
        yield* this.scan(handle, end, window, chunks, new Set(list.map(([offset]) => offset)));
        return;
      }
      // Neighbouring records (a patient's resources were mostly written together) are read in
      // blocks of up to BLOCK bytes, in file order.
      const pooled = this.blocks.take();
      try {
        let i = 0;
        while (i < list.length) {
          const [first, firstLength] = list[i]!;
          if (first >= end) break;
          let runEnd = first + HEADER_LENGTH + firstLength + 1;
          let j = i + 1;
          for (; j < list.length; j++) {
            const [offset, jsonLength] = list[j]!;
            const recordEnd = offset + HEADER_LENGTH + jsonLength + 1;
            if (offset >= end || offset - runEnd > MAX_GAP || recordEnd - first > BLOCK) break;
            runEnd = Math.max(runEnd, recordEnd);
          }
          const length = runEnd - first;
          // A record larger than a block gets a buffer of its own.
          const buf = length <= pooled.length ? pooled : Buffer.allocUnsafe(length);
          await readFully(handle, buf, length, first);
          for (let k = i; k < j; k++) {
            const [offset, jsonLength] = list[k]!;
            const start = offset - first;
            const recordEnd = start + HEADER_LENGTH + jsonLength + 1;
            if (!inWindow(readLastUpdated(buf, start), window)) continue;
            if (!exact && !inCompartment(buf, start + HEADER_LENGTH, recordEnd - 1)) continue;
            const full = chunks.add(buf, start + HEADER_LENGTH, recordEnd);
            if (full) yield full;
          }
          i = j;
        }
      } finally {
        this.blocks.give(pooled);
      }
    } else {
      // No positions for these patients: a full pass, parsing only the candidates.
      for await (const { buf, stop } of lineBlocks(handle, end, this.blocks)) {
        let start = 0;
        while (start < stop) {
          const recordEnd = buf.indexOf(NEWLINE, start) + 1;
          const superseded = readSuperseded(buf, start);
          if (
            readOp(buf, start) !== OP_DELETE &&
            (superseded === 0 || superseded >= end) &&
            inWindow(readLastUpdated(buf, start), window) &&
            inCompartment(buf, start + HEADER_LENGTH, recordEnd - 1)
          ) {
            const full = chunks.add(buf, start + HEADER_LENGTH, recordEnd);
            if (full) yield full;
          }
          start = recordEnd;
        }
      }
    }
    const last = chunks.take();
    if (last) yield last;
  }

  /**
   * The positions of each patient's records of a type, from one pass over its log (each current
   * record parsed once), kept while the reader lasts: an export organized by patient reads every
   * compartment one patient at a time, which would otherwise pass over the log for each.
   */
  private compartmentIndex(
    snap: FileSnapshot,
    handle: FileHandle,
    end: number,
    resourceType: string,
  ): Promise<Map<string, [number, number][]>> {
    const key = `${snap.dir}\u0000${resourceType}`;
    let index = this.compartmentIndexes.get(key);
    if (!index) {
      index = this.buildCompartmentIndex(handle, end);
      this.compartmentIndexes.set(key, index);
      index.catch(() => this.compartmentIndexes.delete(key));
    }
    return index;
  }

  private async buildCompartmentIndex(
    handle: FileHandle,
    end: number,
  ): Promise<Map<string, [number, number][]>> {
    const byPatient = new Map<string, [number, number][]>();
    for await (const { buf, stop, offset } of lineBlocks(handle, end, this.blocks)) {
      forEachLine(buf, stop, (start, recordEnd) => {
        const superseded = readSuperseded(buf, start);
        if (readOp(buf, start) === OP_DELETE || (superseded !== 0 && superseded < end)) return;
        const resource = JSON.parse(
          buf.toString('utf8', start + HEADER_LENGTH, recordEnd - 1),
        ) as StoredResource;
        const position: [number, number] = [offset + start, recordEnd - 1 - start - HEADER_LENGTH];
        for (const patient of new Set(this.patientCompartment.patientIds(resource))) {
          const list = byPatient.get(patient);
          if (list) list.push(position);
          else byPatient.set(patient, [position]);
        }
      });
    }
    return byPatient;
  }

  async *readDeleted(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<Tombstone> {
    const snap = asFileSnapshot(projectId, snapshot);
    const type = snap.types[options.resourceType];
    if (!type || type.end === 0) return;
    const window: TimeWindow = {
      since: options.since === undefined ? -1 : options.since * 1000,
      until: untilMicros(options),
    };
    const handle = await fs.open(this.file(snap, type.file), 'r');
    try {
      // Block by block, so memory stays bounded however many deletions there are.
      for await (const { buf, stop } of lineBlocks(handle, type.end, this.blocks)) {
        const found: Tombstone[] = [];
        forEachLine(buf, stop, (start, end) => {
          if (readOp(buf, start) !== OP_DELETE || !inWindow(readLastUpdated(buf, start), window)) return;
          const superseded = readSuperseded(buf, start);
          if (superseded !== 0 && superseded < type.end) return;
          const tomb = JSON.parse(buf.toString('utf8', start + HEADER_LENGTH, end - 1)) as StoredResource;
          found.push({ resourceType: options.resourceType, id: tomb.id, deletedAt: tomb.meta.lastUpdated });
        });
        yield* found;
      }
    } finally {
      await handle.close();
    }
  }

  close(): Promise<void> {
    this.positionsCache = undefined;
    this.compartmentIndexes.clear();
    return Promise.resolve();
  }
}

/**
 * A read-only export reader on a file store's directory (see `openFileExportReader` in
 * `src/stores.ts`, which export workers import and which fills in the compartment). It needs no
 * lock and touches only snapshot files, so it may run while the store is open in another thread.
 */
export function createFileExportReader(
  options: FileExportReaderOptions,
  compartment: PatientCompartment,
): ExportReader {
  if (typeof options?.dir !== 'string' || options.dir.length === 0) {
    throw new InvalidOptionError('openFileExportReader: dir must be a non-empty string');
  }
  checkPatientCompartment(compartment, 'openFileExportReader');
  return new FileExportReader(options, compartment);
}
