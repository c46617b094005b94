import type { ExportSnapshot } from '../types.js';
import { InvalidRecordError } from '../errors.js';

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
