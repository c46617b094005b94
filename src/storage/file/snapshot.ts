import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { ResourceEntry } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import { InvalidRecordError } from '../errors.js';
import type { ExportSnapshot, ExportSnapshotOptions } from '../types.js';
import type { FileRef } from './log-file.js';
import type { StoreFiles } from './store-files.js';

/** The file store's export snapshot (plain JSON, stored in the export job). */
export interface FileSnapshot extends ExportSnapshot {
  adapter: 'file';
  projectId: string;
  /** Snapshot directory, relative to the store directory: `snapshots/<uuid>`. */
  dir: string;
  /** Per resource type: the hard-linked log (in `dir`) and its committed end at the snapshot. */
  types: Record<string, { file: string; end: number }>;
  /** Patients whose compartment record positions were saved (sorted, unique). */
  patientIds?: string[];
  /** File in `dir` with `{ [type]: [offset, jsonLength][] }` of those compartments. */
  positions?: string;
}

const SNAPSHOT_DIR = /^snapshots\/[0-9a-f-]{36}$/;
const LOG_FILE = /^[A-Z][A-Za-z0-9]{0,63}\.log$/;

/** Checks a snapshot taken by a file store for `projectId` (it may come back from a job record). */
export function asFileSnapshot(projectId: string, snapshot: ExportSnapshot): FileSnapshot {
  const s = snapshot as Partial<FileSnapshot>;
  const ok =
    s.adapter === 'file' &&
    s.projectId === projectId &&
    typeof s.dir === 'string' &&
    SNAPSHOT_DIR.test(s.dir) &&
    typeof s.types === 'object' &&
    s.types !== null &&
    Object.values(s.types).every((t) => LOG_FILE.test(t.file) && Number.isSafeInteger(t.end) && t.end >= 0) &&
    (s.positions === undefined || s.positions === 'positions.json');
  if (!ok) throw new InvalidRecordError('Not a file storage snapshot of this project');
  return s as FileSnapshot;
}

/**
 * Takes a snapshot of a project (see docs/file-store.md, "Exports"). Runs in the writer between
 * batches, so each log's size is exactly its committed end: links each type's log and records
 * that end; with `patientIds`, also saves where those patients' compartment resources are.
 */
export function takeSnapshot(
  files: StoreFiles,
  projectId: string,
  takenAt: string,
  base: BaseState,
  options: ExportSnapshotOptions = {},
): FileSnapshot {
  const id = randomUUID();
  const rel = `snapshots/${id}`;
  const snapDir = path.join(files.dir, rel);
  try {
    return writeSnapshot(files, projectId, takenAt, base, options, rel);
  } catch (error) {
    // Nothing half-made stays behind (a full disk fails the copy or positions.json).
    try {
      fs.rmSync(snapDir, { recursive: true, force: true });
    } catch {
      // Removed on the next open (no job refers to it).
    }
    throw error;
  }
}

function writeSnapshot(
  files: StoreFiles,
  projectId: string,
  takenAt: string,
  base: BaseState,
  options: ExportSnapshotOptions,
  rel: string,
): FileSnapshot {
  const { faults } = files;
  const snapDir = path.join(files.dir, rel);
  faults?.('mkdir', snapDir);
  fs.mkdirSync(snapDir, { recursive: true });
  const types: FileSnapshot['types'] = {};
  for (const [resourceType, log] of files.resourceLogsOf(projectId)) {
    const file = `${resourceType}.log`;
    try {
      faults?.('link', path.join(snapDir, file));
      fs.linkSync(log.file, path.join(snapDir, file));
    } catch {
      // No hard links on this file system: a copy is a frozen, equally valid view.
      faults?.('write', path.join(snapDir, file));
      fs.copyFileSync(log.file, path.join(snapDir, file));
    }
    types[resourceType] = { file, end: log.size };
  }
  const snapshot: FileSnapshot = { takenAt, adapter: 'file', projectId, dir: rel, types };
  if (options.patientIds) {
    const patientIds = [...new Set(options.patientIds)].sort();
    const positions: Record<string, [number, number][]> = {};
    // A resource in several of these compartments is one entry object in each: identity is
    // enough to list it once (and much cheaper than building a key string per entry).
    const seen = new Set<ResourceEntry>();
    for (const patient of patientIds) {
      for (const e of base.compartment(projectId, patient)) {
        if (seen.has(e)) continue;
        seen.add(e);
        const ref = e.ref as FileRef;
        (positions[e.resourceType] ??= []).push([ref.offset, ref.jsonLength]);
      }
    }
    for (const list of Object.values(positions)) list.sort((a, b) => a[0] - b[0]);
    faults?.('write', path.join(snapDir, 'positions.json'));
    fs.writeFileSync(path.join(snapDir, 'positions.json'), JSON.stringify(positions));
    snapshot.patientIds = patientIds;
    snapshot.positions = 'positions.json';
  }
  return snapshot;
}
