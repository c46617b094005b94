import fs from 'node:fs';
import type { FhirResource } from '../storage/types.js';
import path from 'node:path';
import { acquireLock, releaseLock, type DirLock } from '../storage/file/lock.js';

/** One journal line: the event's project (`null`: the platform log) and the event itself. */
export interface JournalEntry {
  projectId: string | null;
  event: FhirResource & { id: string };
}

const SEGMENT = /^(\d{12})\.ndjson$/;

function segmentName(seq: number): string {
  return `${String(seq).padStart(12, '0')}.ndjson`;
}

/**
 * The audit trail's write-ahead journal: a directory of append-only NDJSON segment files, one
 * line per event, owned by one process (a `lock` file, taken over when its process is gone).
 *
 * `append` is one `write()` to the open segment: when it returns, the bytes are in the kernel, so
 * they survive the process being killed (SIGKILL, a crash), not a power loss. `rotate` seals
 * the current segment and opens the next; a sealed segment is removed once its events are in the
 * store. Segments found on open hold events that may not have reached the store: `recovered`.
 */
export class AuditJournal {
  readonly dir: string;
  /** Entries of the segments left by an earlier process, in order; read once on open. */
  readonly recovered: JournalEntry[] = [];
  /** Segment files left by an earlier process (removed once `recovered` is stored). */
  readonly recoveredSegments: string[] = [];
  /** Lines of recovered segments that could not be read (a torn last line is not counted). */
  readonly damagedLines: number = 0;
  private readonly lock: DirLock;
  private seq: number;
  private fd: number;
  private file: string;
  private bytes = 0;
  private closed = false;

  constructor(dir: string) {
    this.dir = dir;
    fs.mkdirSync(dir, { recursive: true });
    this.lock = acquireLock(dir);
    try {
      let last = 0;
      let damaged = 0;
      const names = fs
        .readdirSync(dir)
        .filter((name) => SEGMENT.test(name))
        .sort();
      for (const name of names) {
        const file = path.join(dir, name);
        last = Math.max(last, Number(SEGMENT.exec(name)![1]));
        damaged += this.readSegment(file);
        this.recoveredSegments.push(file);
      }
      this.damagedLines = damaged;
      this.seq = last + 1;
      this.file = path.join(dir, segmentName(this.seq));
      this.fd = fs.openSync(this.file, 'a');
    } catch (error) {
      releaseLock(this.lock);
      throw error;
    }
  }

  /** Reads one segment into `recovered`; answers the number of unreadable lines. */
  private readSegment(file: string): number {
    const text = fs.readFileSync(file, 'utf8');
    const lines = text.split('\n');
    // The part after the last newline is a line whose write never completed: never acknowledged.
    lines.pop();
    let damaged = 0;
    for (const line of lines) {
      if (line === '') continue;
      try {
        const parsed = JSON.parse(line) as { p?: unknown; e?: unknown };
        const event = parsed.e as JournalEntry['event'] | undefined;
        if (typeof event !== 'object' || event === null || typeof event.id !== 'string')
          throw new Error('bad');
        this.recovered.push({ projectId: typeof parsed.p === 'string' ? parsed.p : null, event });
      } catch {
        damaged++;
      }
    }
    return damaged;
  }

  /** Appends one entry with a single synchronous `write()`. */
  append(entry: JournalEntry): void {
    if (this.closed) throw new Error('The audit journal is closed');
    const line = `${JSON.stringify({ p: entry.projectId, e: entry.event })}\n`;
    const length = Buffer.byteLength(line);
    const written = fs.writeSync(this.fd, line);
    if (written < length) {
      // A short write (allowed by POSIX, not seen on local files): write the rest.
      const bytes = Buffer.from(line);
      for (let offset = written; offset < length;) offset += fs.writeSync(this.fd, bytes, offset);
    }
    this.bytes += length;
  }

  /**
   * Seals the current segment (when it holds anything) and starts the next one. Answers the sealed
   * segment's path, or undefined when it was empty.
   */
  rotate(): string | undefined {
    if (this.closed || this.bytes === 0) return undefined;
    const sealed = this.file;
    fs.closeSync(this.fd);
    this.seq += 1;
    this.file = path.join(this.dir, segmentName(this.seq));
    this.fd = fs.openSync(this.file, 'a');
    this.bytes = 0;
    return sealed;
  }

  /** Removes sealed segments whose every event is stored. */
  remove(files: readonly string[]): void {
    for (const file of files) fs.rmSync(file, { force: true });
  }

  /**
   * Closes the open segment (removing it when `drained`, i.e. every event is stored) and releases
   * the lock. Segments left behind are replayed by the next process.
   */
  close(drained: boolean): void {
    if (this.closed) return;
    this.closed = true;
    fs.closeSync(this.fd);
    if (drained && this.bytes === 0) fs.rmSync(this.file, { force: true });
    releaseLock(this.lock);
  }
}
