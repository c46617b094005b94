import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import type { FaultHook, FileOp } from '../../src/storage/file/faults.js';
import { createFileStorage, type FileStorageOptions } from '../../src/storage/file/file-storage.js';
import { StorageUnavailableError } from '../../src/storage/errors.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';

const MESSAGES: Record<string, string> = {
  ENOSPC: 'no space left on device',
  EIO: 'i/o error',
  EROFS: 'read-only file system',
  EACCES: 'permission denied',
  EDQUOT: 'disk quota exceeded',
};

const SYSCALLS: Record<FileOp, string> = {
  mkdir: 'mkdir',
  open: 'open',
  write: 'write',
  fsync: 'fsync',
  truncate: 'ftruncate',
  rename: 'rename',
  link: 'link',
  read: 'read',
};

/** The error Node's `fs` throws for `code` (same `message`, `code`, `syscall` and `path` shape). */
export function errnoError(code: string, op: FileOp, file: string): NodeJS.ErrnoException {
  const syscall = SYSCALLS[op];
  return Object.assign(new Error(`${code}: ${MESSAGES[code] ?? 'failed'}, ${syscall} '${file}'`), {
    code,
    syscall,
    path: file,
    errno: -1,
  });
}

/** One fault: which operations on which files fail, how, and how often. */
export interface FaultRule {
  op: FileOp | FileOp[];
  /** The files it hits (full path). @default every file */
  file?: RegExp | string;
  code: string;
  /** How many operations fail. @default every one until `clear()` */
  times?: number;
  /** A write that fails half-way: garbage is appended to the file first (a torn write). */
  tear?: boolean;
}

/**
 * Faults injected into a file store through its internal `FaultHook`: each rule makes the matching
 * operations throw the errno error a full or failing disk gives. Per store, no shared state.
 */
export class FaultPlan {
  private rules: (FaultRule & { left: number })[] = [];
  /** Every operation a fault was injected into. */
  readonly injected: { op: FileOp; file: string; code: string }[] = [];

  readonly hook: FaultHook = (op, file) => {
    for (const rule of this.rules) {
      if (rule.left <= 0) continue;
      const ops = Array.isArray(rule.op) ? rule.op : [rule.op];
      if (!ops.includes(op)) continue;
      if (
        rule.file !== undefined &&
        !(typeof rule.file === 'string' ? file === rule.file : rule.file.test(file))
      )
        continue;
      rule.left -= 1;
      if (rule.tear && op === 'write') fs.appendFileSync(file, 'half a record, then the disk was full');
      this.injected.push({ op, file, code: rule.code });
      throw errnoError(rule.code, op, file);
    }
  };

  fail(rule: FaultRule): this {
    this.rules.push({ ...rule, left: rule.times ?? Number.POSITIVE_INFINITY });
    return this;
  }

  /** The fault clears: every operation succeeds from now on. */
  clear(): void {
    this.rules = [];
  }
}

/** A file store on `dir` whose file operations go through `plan` (default compartment). */
export function openFaultyStore(
  dir: string,
  plan?: FaultPlan,
  options: Partial<FileStorageOptions> = {},
): Promise<Storage> {
  // Compaction (min bytes given) under `{ versions: 1 }`, which drops every old version.
  const history = options.compactionMinDeadBytes !== undefined ? { history: { versions: 1 } } : {};
  return createFileStorage({ dir, ...history, ...options, compartment: R4_PATIENT_COMPARTMENT }, undefined, {
    ...(plan ? { faults: plan.hook } : {}),
  });
}

/** The promise rejects with `StorageUnavailableError` caused by an errno error of `code`. */
export async function expectUnavailable(
  promise: Promise<unknown>,
  code: string,
): Promise<StorageUnavailableError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StorageUnavailableError);
  const unavailable = error as StorageUnavailableError;
  expect(unavailable.code).toBe('ERR_STORAGE_UNAVAILABLE');
  expect((unavailable.cause as NodeJS.ErrnoException).code).toBe(code);
  return unavailable;
}

/** The file of the first project log of `type` under the store directory `dir`. */
export function resourceLog(dir: string, type: string): string {
  for (const project of fs.readdirSync(path.join(dir, 'projects'))) {
    const file = path.join(dir, 'projects', project, 'resources', `${type}.log`);
    if (fs.existsSync(file)) return file;
  }
  throw new Error(`no ${type} log`);
}

/** A Patient with an id and a family name (the id by default). */
export const patient = (id: string, family = id): FhirResource & { id: string } => ({
  resourceType: 'Patient',
  id,
  name: [{ family }],
});
