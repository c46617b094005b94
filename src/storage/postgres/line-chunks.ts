import type { NdjsonChunk } from '../types.js';

const NEWLINE = 0x0a;

function countLines(bytes: Uint8Array): number {
  let count = 0;
  for (let at = bytes.indexOf(NEWLINE); at !== -1; at = bytes.indexOf(NEWLINE, at + 1)) count += 1;
  return count;
}

/**
 * Packs a byte stream of newline-terminated lines (a `COPY … TO STDOUT`, cut anywhere) into NDJSON
 * chunks of whole lines, each at most `size` bytes unless one line is longer. With `reuse`, chunks
 * alternate between two buffers: a chunk stays intact only until the next one is produced (the
 * consumer writes each chunk before asking for the next, `ExportReadOptions.reuseChunks`).
 */
export class LineChunks {
  private readonly spare: Buffer[];
  private current: Buffer;
  private used = 0;

  constructor(
    private readonly size: number,
    private readonly reuse: boolean,
  ) {
    this.current = Buffer.allocUnsafe(size);
    this.spare = reuse ? [Buffer.allocUnsafe(size)] : [];
  }

  /** Takes `data` in; yields every chunk it completes. */
  *push(data: Uint8Array): Generator<NdjsonChunk> {
    let offset = 0;
    while (offset < data.length) {
      if (this.used === this.current.length) {
        // One line longer than a chunk: grow until it fits.
        const grown = Buffer.allocUnsafe(this.current.length * 2);
        this.current.copy(grown, 0, 0, this.used);
        this.current = grown;
      }
      const n = Math.min(this.current.length - this.used, data.length - offset);
      this.current.set(data.subarray(offset, offset + n), this.used);
      this.used += n;
      offset += n;
      while (this.used >= this.size) {
        // The lines within `size` bytes, else the one long line, once it is complete.
        let cut = this.current.lastIndexOf(NEWLINE, this.size - 1) + 1;
        if (cut === 0) {
          const end = this.current.subarray(0, this.used).indexOf(NEWLINE, this.size);
          if (end === -1) break;
          cut = end + 1;
        }
        yield this.take(cut);
      }
    }
  }

  /** The last chunk (the lines not yielded yet), if any. */
  end(): NdjsonChunk | undefined {
    if (this.used === 0) return undefined;
    return this.take(this.used);
  }

  /** The first `cut` bytes as a chunk; the rest moves to the start of the next buffer. */
  private take(cut: number): NdjsonChunk {
    const full = this.current;
    const data = full.subarray(0, cut);
    const rest = this.used - cut;
    let next: Buffer;
    if (this.reuse) {
      next = this.spare.pop() ?? Buffer.allocUnsafe(this.size);
      // A grown buffer is dropped after use; a regular one is the spare of the next turn.
      if (full.length === this.size) this.spare.push(full);
    } else {
      next = Buffer.allocUnsafe(Math.max(this.size, rest));
    }
    if (next.length < rest) next = Buffer.allocUnsafe(rest * 2);
    full.copy(next, 0, cut, this.used);
    this.current = next;
    this.used = rest;
    return { data, count: countLines(data) };
  }
}
