import type { ExportFileHandle, ExportFileSink } from '../storage/types.js';
import type { ByteBudget } from './byte-budget.js';
import { directorySink } from './directory-export-files.js';

/** One finished output file. */
export interface WrittenFile {
  /** File name inside the job directory, e.g. `Observation-2.ndjson`. */
  file: string;
  /** Number of NDJSON lines in it. */
  count: number;
  /** Size in bytes. */
  size: number;
}

const NEWLINE = 0x0a;

function countNewlines(buffer: Buffer): number {
  let count = 0;
  let at = buffer.indexOf(NEWLINE);
  while (at >= 0) {
    count += 1;
    at = buffer.indexOf(NEWLINE, at + 1);
  }
  return count;
}

/**
 * Writes NDJSON lines of one kind (`Observation`, deleted `Bundle`s, …) into files named
 * `{prefix}-{n}.ndjson`, starting a new file before one would exceed `maxFileSize` bytes (a single
 * line larger than that gets a file of its own). Files go to an {@link ExportFileSink} (a directory
 * when given a path), which shows a file under its name only once it is complete. Every write is
 * awaited: memory holds at most one chunk.
 */
export class NdjsonFileWriter {
  readonly #sink: ExportFileSink;
  readonly #prefix: string;
  readonly #maxFileSize: number;
  readonly #budget: ByteBudget | undefined;
  #handle: ExportFileHandle | undefined;
  #name = '';
  #size = 0;
  #count = 0;
  readonly #files: WrittenFile[] = [];
  /** Called as each file is committed (complete and served under its name). */
  onCommit: ((file: WrittenFile) => void) | undefined;

  /** `budget`, when given, counts every byte written and stops the export at its limit. */
  constructor(target: string | ExportFileSink, prefix: string, maxFileSize: number, budget?: ByteBudget) {
    this.#sink = typeof target === 'string' ? directorySink(target) : target;
    this.#prefix = prefix;
    this.#maxFileSize = Math.max(1, maxFileSize);
    this.#budget = budget;
  }

  /** Files completed so far. */
  get files(): readonly WrittenFile[] {
    return this.#files;
  }

  /** Writes whole NDJSON lines; `count` is the number of lines in `data`. */
  async write(data: string | Uint8Array, count: number): Promise<void> {
    if (count === 0) return;
    const length = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
    this.#budget?.take(length);
    if (this.#size + length <= this.#maxFileSize || (this.#size === 0 && count === 1)) {
      await this.#append(data, count, length);
      return;
    }
    // Split at line boundaries so no file exceeds the limit.
    let buffer =
      typeof data === 'string'
        ? Buffer.from(data)
        : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    let remaining = count;
    while (buffer.length > 0) {
      const room = this.#maxFileSize - this.#size;
      if (buffer.length <= room) {
        await this.#append(buffer, remaining, buffer.length);
        return;
      }
      let cut = room > 0 ? buffer.lastIndexOf(NEWLINE, room - 1) : -1;
      if (cut < 0) {
        if (this.#size > 0) {
          await this.#finishFile();
          continue;
        }
        cut = buffer.indexOf(NEWLINE);
        if (cut < 0) cut = buffer.length - 1;
      }
      const piece = buffer.subarray(0, cut + 1);
      const lines = Math.min(remaining, countNewlines(piece));
      await this.#append(piece, lines, piece.length);
      remaining -= lines;
      buffer = buffer.subarray(cut + 1);
      await this.#finishFile();
    }
  }

  async #append(data: string | Uint8Array, count: number, length: number): Promise<void> {
    if (!this.#handle) {
      this.#name = `${this.#prefix}-${this.#files.length + 1}.ndjson`;
      this.#handle = await this.#sink.create(this.#name);
    }
    await this.#handle.write(data);
    this.#size += length;
    this.#count += count;
  }

  async #finishFile(): Promise<void> {
    const handle = this.#handle;
    if (!handle) return;
    this.#handle = undefined;
    await handle.commit();
    const written = { file: this.#name, count: this.#count, size: this.#size };
    this.#files.push(written);
    this.onCommit?.(written);
    this.#size = 0;
    this.#count = 0;
  }

  /** Completes the current file and returns every file written. */
  async finish(): Promise<WrittenFile[]> {
    await this.#finishFile();
    return [...this.#files];
  }

  /** Closes and removes the unfinished file, if any (finished files stay). */
  async abort(): Promise<void> {
    const handle = this.#handle;
    if (!handle) return;
    this.#handle = undefined;
    await handle.abort();
  }
}
