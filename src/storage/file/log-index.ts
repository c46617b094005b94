import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import { crc32 } from 'node:zlib';
import { StorageError } from '../errors.js';
import type { BaseState } from '../engine/state.js';
import type { PatientCompartment } from '../types.js';
import { IDENTIFIER_KEYS_VERSION } from '../identifier-keys.js';
import type { FileRef, LogFile } from './log-file.js';
import type { LogMeta } from './store-files.js';

/**
 * Identifies the compartment definition and the identifier keys in use: index files store
 * compartment patients and identifier keys, so one written by a version that computes either
 * differently must not be used.
 */
export function indexFingerprint(compartment: PatientCompartment): string {
  const definition = compartment.types.map((type) => [type, compartment.params(type)]);
  return (
    createHash('sha256')
      .update(JSON.stringify(definition))
      // The function's source: an index written by a version that computes differently is not used.
      .update(compartment.patientIds.toString())
      .update(`identifier keys ${IDENTIFIER_KEYS_VERSION}`)
      .digest('hex')
      .slice(0, 16)
  );
}

/** What `<Type>.log.idx` holds (see `readIndex`). The field names are the format on disk. */
export interface LogIndex {
  /** 2 since entries hold identifier keys (a format 1 index is ignored: the log is scanned). */
  format: 2;
  /** `indexFingerprint()` of the writer. */
  compartment: string;
  /** Inode of the log file it describes. */
  ino: string;
  /** Log size it covers. */
  size: number;
  records: number;
  deadBytes: number;
  /**
   * [id, versionId, lastUpdated µs, deleted 0/1, offset, jsonLength, compartment patients,
   * identifier keys]
   */
  entries: [string, string, number, 0 | 1, number, number, string[], string[]][];
}

/** `value` as checksummed text: `<crc32 of the JSON, 8 hex>\n<JSON>`, so that damage is detected. */
export function encodeChecked(value: unknown): string {
  const json = JSON.stringify(value);
  return `${crc32(json).toString(16).padStart(8, '0')}\n${json}`;
}

/** The value `encodeChecked` wrote; undefined when the text is damaged (or has no checksum). */
export function decodeChecked(text: string): unknown {
  const json = text.slice(9);
  if (text[8] !== '\n' || text.slice(0, 8) !== crc32(json).toString(16).padStart(8, '0')) return undefined;
  try {
    return JSON.parse(json) as unknown;
  } catch {
    return undefined;
  }
}

/** The text of an index file (`encodeChecked`). */
export function encodeIndexFile(index: LogIndex): string {
  return encodeChecked(index);
}

/** The index an index file holds; undefined when it is damaged (or written without a checksum). */
export function decodeIndexFile(text: string): LogIndex | undefined {
  return decodeChecked(text) as LogIndex | undefined;
}

/** Writes `text` to `file` through a synced temporary file and a rename (never half a file). */
export async function writeFileAtomically(file: string, text: string): Promise<void> {
  const handle = await fs.open(`${file}.tmp`, 'w');
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.rename(`${file}.tmp`, file);
}

/**
 * The index file a clean close leaves next to a resource log (`<Type>.log.idx`): the index
 * entries as of a log size, so opening parses only records appended after it (none after a
 * clean shutdown). A cache: ignored, and the log scanned fully, unless it is intact (checksum),
 * for this very file (same inode, so not compacted since) and in this format.
 *
 * @throws StorageError `ERR_STORAGE_CORRUPT` when the log is shorter than the size the index
 *   covers: records committed before the clean close are missing from it.
 */
export async function readIndex(log: LogFile, fingerprint: string): Promise<LogIndex | undefined> {
  const file = `${log.file}.idx`;
  let index: LogIndex | undefined;
  try {
    index = decodeIndexFile(await fs.readFile(file, 'utf8'));
    const stat = await log.segment.handle.stat({ bigint: true });
    if (index?.format !== 2 || index.ino !== String(stat.ino)) return undefined;
    if (index.compartment !== fingerprint || !Array.isArray(index.entries)) return undefined;
  } catch {
    return undefined;
  }
  if (!(index.size <= log.size)) {
    throw new StorageError(
      'ERR_STORAGE_CORRUPT',
      `${log.file} is shorter (${log.size} bytes) than when the store was last closed (${index.size} bytes): ` +
        `committed records are missing. Restore it from a backup, or delete ${file} to open the store without them.`,
    );
  }
  return index;
}

/** Writes the index file of a resource log from the committed state (on a clean close). */
export async function writeIndex(
  log: LogFile,
  meta: LogMeta,
  base: BaseState,
  fingerprint: string,
): Promise<void> {
  if (meta.resourceType === undefined) return;
  const entries: LogIndex['entries'] = [];
  for (const e of base.resources(meta.projectId, meta.resourceType)) {
    const ref = e.ref as FileRef;
    if (ref.log !== log) return; // Not this log's entries (project re-created): no index.
    entries.push([
      e.id,
      e.versionId,
      e.lastUpdatedMicros,
      e.deleted ? 1 : 0,
      ref.offset,
      ref.jsonLength,
      [...e.patients],
      [...e.identifiers],
    ]);
  }
  const stat = await log.segment.handle.stat({ bigint: true });
  const index: LogIndex = {
    format: 2,
    compartment: fingerprint,
    ino: String(stat.ino),
    size: log.size,
    records: log.records,
    deadBytes: log.deadBytes,
    entries,
  };
  await writeFileAtomically(`${log.file}.idx`, encodeIndexFile(index));
}
