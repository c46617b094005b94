import { crc32 } from 'node:zlib';

/**
 * One record of a log file: a fixed-width text header, then the JSON, then `\n`:
 *
 * ```
 * <crc32 8 hex> <batch seq 12 hex> <superseded-at 12 hex> <lastUpdated µs 13 hex> <op> <json>\n
 * ```
 *
 * `op` is `C` (create), `U` (update) or `D` (delete: the JSON is a tombstone). The CRC covers
 * the seq, lastUpdated, op and JSON, not the superseded-at field, which is rewritten in place
 * when a newer version of the same resource is appended (0 = still current).
 */
export const HEADER_LENGTH = 51;
export const SEQ_AT = 9;
export const SUPERSEDED_AT = 22;
export const LAST_UPDATED_AT = 35;
export const OP_AT = 49;
const SEQ_WIDTH = 12;
const SUPERSEDED_WIDTH = 12;
const LAST_UPDATED_WIDTH = 13;
const NEWLINE = 0x0a;

export type RecordOp = 'C' | 'U' | 'D';

function hex(value: number, width: number): string {
  return value.toString(16).padStart(width, '0');
}

const SPACE = 0x20;
const ZERO = 0x30;
const HEX_DIGITS = Buffer.from('0123456789abcdef', 'latin1');
/** Where the header has its spaces (before the seq, superseded-at, lastUpdated and op fields, and after op). */
const HEADER_SPACES = [SEQ_AT - 1, SUPERSEDED_AT - 1, LAST_UPDATED_AT - 1, OP_AT - 1, OP_AT + 1];

/** Writes `value` as `width` lowercase hex digits at `at` (as `hex`, without making a string). */
function putHex(buf: Buffer, at: number, value: number, width: number): void {
  let rest = value;
  for (let i = at + width - 1; i >= at; i--) {
    const digit = rest % 16;
    buf[i] = HEX_DIGITS[digit]!;
    rest = (rest - digit) / 16;
  }
}

export function encodeRecord(seq: number, lastUpdatedMicros: number, op: RecordOp, json: string): Buffer {
  const jsonLength = Buffer.byteLength(json);
  const buf = Buffer.allocUnsafe(recordLength(jsonLength));
  encodeRecordInto(buf, 0, seq, lastUpdatedMicros, op, json, jsonLength);
  return buf;
}

/** Bytes of a record whose JSON has `jsonLength` UTF-8 bytes. */
export function recordLength(jsonLength: number): number {
  return HEADER_LENGTH + jsonLength + 1;
}

/**
 * Writes the record at `buf[at, at + recordLength(jsonLength))`, `jsonLength` being
 * `Buffer.byteLength(json)`: a batch's records go into one buffer per log, without a buffer each.
 */
export function encodeRecordInto(
  buf: Buffer,
  at: number,
  seq: number,
  lastUpdatedMicros: number,
  op: RecordOp,
  json: string,
  jsonLength: number,
): void {
  const end = at + recordLength(jsonLength);
  // The header written byte by byte: a record is encoded for every resource written.
  buf.fill(ZERO, at, at + HEADER_LENGTH);
  for (const space of HEADER_SPACES) buf[at + space] = SPACE;
  putHex(buf, at + SEQ_AT, seq, SEQ_WIDTH);
  putHex(buf, at + LAST_UPDATED_AT, lastUpdatedMicros, LAST_UPDATED_WIDTH);
  buf[at + OP_AT] = op.charCodeAt(0);
  buf.write(json, at + HEADER_LENGTH, jsonLength, jsonLength === json.length ? 'latin1' : 'utf8');
  buf[end - 1] = NEWLINE;
  putHex(buf, at, recordCrc(buf, at, end), 8);
}

/** CRC of the record in `buf[start, end)` (`end` just past its newline). */
export function recordCrc(buf: Buffer, start: number, end: number): number {
  const first = crc32(buf.subarray(start + SEQ_AT, start + SEQ_AT + SEQ_WIDTH));
  return crc32(buf.subarray(start + LAST_UPDATED_AT, end - 1), first);
}

/** Parses `width` lowercase hex digits; -1 when any is not a hex digit. */
export function readHex(buf: Buffer, at: number, width: number): number {
  let value = 0;
  for (let i = at; i < at + width; i++) {
    const c = buf[i]!;
    let digit: number;
    if (c >= 0x30 && c <= 0x39) digit = c - 0x30;
    else if (c >= 0x61 && c <= 0x66) digit = c - 0x57;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

export function readSeq(buf: Buffer, start: number): number {
  return readHex(buf, start + SEQ_AT, SEQ_WIDTH);
}
export function readSuperseded(buf: Buffer, start: number): number {
  return readHex(buf, start + SUPERSEDED_AT, SUPERSEDED_WIDTH);
}
export function readLastUpdated(buf: Buffer, start: number): number {
  return readHex(buf, start + LAST_UPDATED_AT, LAST_UPDATED_WIDTH);
}
export function readOp(buf: Buffer, start: number): number {
  return buf[start + OP_AT]!;
}
export const OP_DELETE = 0x44;

/** True when `buf[start, end)` is a well-formed record whose CRC matches. */
export function isValidRecord(buf: Buffer, start: number, end: number): boolean {
  if (end - start < HEADER_LENGTH + 1 || buf[end - 1] !== NEWLINE) return false;
  for (const at of HEADER_SPACES) if (buf[start + at] !== SPACE) return false;
  const op = buf[start + OP_AT];
  if (op !== 0x43 && op !== 0x55 && op !== OP_DELETE) return false;
  const crc = readHex(buf, start, 8);
  return crc >= 0 && crc === recordCrc(buf, start, end);
}

/** The 12 bytes to write at `offset + SUPERSEDED_AT` to mark a record superseded by `by`. */
export function supersededField(by: number): Buffer {
  return Buffer.from(hex(by, SUPERSEDED_WIDTH), 'latin1');
}

export interface ScannedRecord {
  /** The buffer holding the record; valid only during the callback. */
  buf: Buffer;
  /** Start of the record in `buf`. */
  start: number;
  /** Just past the record's newline in `buf`. */
  end: number;
  /** Offset of the record in the file. */
  offset: number;
}

/**
 * Reads `[from, to)` of a file sequentially in large blocks and calls `onRecord` for each
 * complete line. Returns the file offset just past the last complete line. `onRecord` returns
 * false to stop early.
 */
export async function scanRecords(
  read: (buf: Buffer, position: number) => Promise<number>,
  from: number,
  to: number,
  onRecord: (record: ScannedRecord) => boolean | void,
  blockSize = 1024 * 1024,
): Promise<number> {
  let buf = Buffer.allocUnsafe(blockSize);
  let filled = 0;
  let position = from;
  let consumedOffset = from;
  while (position < to) {
    if (filled === buf.length) {
      const bigger = Buffer.allocUnsafe(buf.length * 2);
      buf.copy(bigger, 0, 0, filled);
      buf = bigger;
    }
    const want = Math.min(buf.length - filled, to - position);
    const got = await read(buf.subarray(filled, filled + want), position);
    if (got <= 0) break;
    position += got;
    const end = filled + got;
    let start = 0;
    let nl = buf.indexOf(NEWLINE, filled);
    while (nl !== -1 && nl < end) {
      const keepGoing = onRecord({ buf, start, end: nl + 1, offset: consumedOffset });
      consumedOffset += nl + 1 - start;
      start = nl + 1;
      if (keepGoing === false) return consumedOffset;
      nl = buf.indexOf(NEWLINE, start);
    }
    // Move the partial line to the front.
    buf.copy(buf, 0, start, end);
    filled = end - start;
  }
  return consumedOffset;
}
