import type { ExportFileHandle, ExportFileSink } from '../storage/types.js';
import type { ByteBudget } from './byte-budget.js';
import type { ExportOutputFile } from './export-task.js';

/**
 * The most bytes of one block held in memory to decide where it goes: a block that fits goes
 * whole into the current file or, when it does not fit there, into a new one; a larger block is
 * streamed from a new file on.
 */
const BLOCK_BUFFER_BYTES = 8 * 1024 * 1024;

const NEWLINE = '\n';

/**
 * Writes blocks of NDJSON lines (Bulk Data 3.0.0 `organizeOutputBy`: a header line, then the lines
 * of one resource's block) into files named `{prefix}-{n}.ndjson`. Files are split between
 * blocks, before one would exceed `maxFileSize`; a block larger than that is split between lines,
 * its header repeated at the start of the next file, and the file it leaves lists the next in
 * `continuesInFile`. Memory holds at most one block, and no more than 8 MiB of it: a larger block
 * is streamed (starting a file of its own, so that it is split only when larger than a file).
 */
export class BlockFileWriter {
  readonly #files: ExportOutputFile[] = [];
  #handle: ExportFileHandle | undefined;
  #name = '';
  #size = 0;
  #count = 0;
  #header = '';
  #buffer: string[] = [];
  #bufferBytes = 0;
  #bufferCount = 0;
  #streaming = false;
  #headerOnly = false;
  readonly #cap: number;

  constructor(
    private readonly sink: ExportFileSink,
    private readonly prefix: string,
    private readonly maxFileSize: number,
    private readonly budget: ByteBudget,
    /** Called as each file is committed (complete and served under its name). */
    private readonly onCommit?: (file: ExportOutputFile) => void,
  ) {
    this.#cap = Math.min(Math.max(1, maxFileSize), BLOCK_BUFFER_BYTES);
  }

  /** Starts a block led by the NDJSON line `header` (without its newline). */
  startBlock(header: string): void {
    this.#header = `${header}${NEWLINE}`;
    this.#buffer = [];
    this.#bufferBytes = 0;
    this.#bufferCount = 0;
    this.#streaming = false;
  }

  /** Adds whole NDJSON lines to the current block; `count` is the number of lines in `data`. */
  async write(data: string | Uint8Array, count: number): Promise<void> {
    if (count === 0) return;
    // Copied out: the caller may reuse `data`'s memory for its next chunk.
    const text = typeof data === 'string' ? data : Buffer.from(data).toString('utf8');
    if (this.#streaming) {
      await this.#emit(text, count);
      return;
    }
    this.#buffer.push(text);
    this.#bufferBytes += Buffer.byteLength(text);
    this.#bufferCount += count;
    if (this.#bufferBytes <= this.#cap) return;
    // Too large to hold: streamed from a file of its own.
    this.#streaming = true;
    if (this.#size > 0) await this.#commit(undefined);
    await this.#emit(this.#header + this.#takeBuffer(), this.#bufferCount + 1);
  }

  /** Ends the current block; a block with no line is left out, header included. */
  async endBlock(): Promise<void> {
    if (this.#streaming || this.#bufferCount === 0) return;
    const block = this.#header + this.#takeBuffer();
    if (this.#size > 0 && this.#size + Buffer.byteLength(block) > this.maxFileSize)
      await this.#commit(undefined);
    await this.#emit(block, this.#bufferCount + 1);
  }

  /** Completes the current file and returns every file written. */
  async finish(): Promise<ExportOutputFile[]> {
    await this.#commit(undefined);
    return [...this.#files];
  }

  /** Closes and removes the unfinished file, if any (finished files stay). */
  async abort(): Promise<void> {
    const handle = this.#handle;
    this.#handle = undefined;
    await handle?.abort();
  }

  #takeBuffer(): string {
    const text = this.#buffer.join('');
    this.#buffer = [];
    this.#bufferBytes = 0;
    return text;
  }

  /** Writes lines of the current block, going on in a new file (header first) where one is full. */
  async #emit(text: string, count: number): Promise<void> {
    let rest = text;
    let lines = count;
    while (rest.length > 0) {
      const bytes = Buffer.byteLength(rest);
      if (this.#size + bytes <= this.maxFileSize || (this.#fresh() && lines === 1)) {
        await this.#append(rest, lines);
        return;
      }
      const cut = this.#cutAt(rest);
      if (cut <= 0) {
        // Not even one more line fits: the block goes on in the next file.
        await this.#continue();
        continue;
      }
      const piece = rest.slice(0, cut);
      const pieceLines = piece.split(NEWLINE).length - 1;
      await this.#append(piece, pieceLines);
      rest = rest.slice(cut);
      lines -= pieceLines;
      if (rest.length > 0) await this.#continue();
    }
  }

  /** Where `text` (whole lines) is cut to fit the room left: after its last fitting line, or 0. */
  #cutAt(text: string): number {
    const room = this.maxFileSize - this.#size;
    let cut = 0;
    let bytes = 0;
    for (let at = text.indexOf(NEWLINE); at >= 0; at = text.indexOf(NEWLINE, cut)) {
      bytes += Buffer.byteLength(text.slice(cut, at + 1));
      if (bytes > room) break;
      cut = at + 1;
    }
    // A file with nothing of the block yet takes at least one line, however long.
    if (cut === 0 && this.#fresh()) cut = text.indexOf(NEWLINE) + 1;
    return cut;
  }

  /** True when the current file holds nothing, or only the header a continued block repeats. */
  #fresh(): boolean {
    return this.#size === 0 || this.#headerOnly;
  }

  /** Commits the current file, and starts the next with the header of the block going on in it. */
  async #continue(): Promise<void> {
    await this.#commit(`${this.prefix}-${this.#files.length + 2}.ndjson`);
    await this.#append(this.#header, 1);
    this.#headerOnly = true;
  }

  async #append(text: string, count: number): Promise<void> {
    const length = Buffer.byteLength(text);
    this.budget.take(length);
    if (!this.#handle) {
      this.#name = `${this.prefix}-${this.#files.length + 1}.ndjson`;
      this.#handle = await this.sink.create(this.#name);
    }
    await this.#handle.write(text);
    this.#headerOnly = false;
    this.#size += length;
    this.#count += count;
  }

  /** Commits the current file (if any), noting the file its last block continues in. */
  async #commit(continuesInFile: string | undefined): Promise<void> {
    const handle = this.#handle;
    if (!handle) return;
    this.#handle = undefined;
    await handle.commit();
    const file: ExportOutputFile = { file: this.#name, count: this.#count };
    if (continuesInFile !== undefined) file.continuesInFile = continuesInFile;
    this.#files.push(file);
    this.#size = 0;
    this.#count = 0;
    this.onCommit?.(file);
  }
}
