import path from 'node:path';
import { Low } from 'lowdb';
import type { Mutation } from '../engine/mutation.js';
import type {
  ClientRecord,
  ExportJobRecord,
  MembershipRecord,
  ProjectRecord,
  SigningKeyRecord,
} from '../types.js';
import { DurableJsonFile } from './durable-json-file.js';
import type { FaultHook } from './faults.js';

/**
 * The directory data kept in `directory.json` (lowdb): only small, rarely written records. Records
 * written often, or many per project (users, memberships, export jobs), go to per-project logs.
 */
export interface DirectoryData {
  /** Sequence number of the last batch that wrote this file. */
  seq: number;
  projects: Record<string, ProjectRecord>;
  /** project id -> its directory name under `projects/` (a fresh name per incarnation). */
  projectDirs: Record<string, string>;
  clients: Record<string, ClientRecord>;
  keys: Record<string, SigningKeyRecord>;
  /** Stores written before memberships had their own log: moved to the logs on open. */
  memberships?: Record<string, Record<string, MembershipRecord>>;
  /** Stores written before export jobs had their own log: moved to the logs on open. */
  jobs?: Record<string, Record<string, ExportJobRecord>>;
}

function emptyDirectory(): DirectoryData {
  return { seq: 0, projects: {}, projectDirs: {}, clients: {}, keys: {} };
}

/** `directory.json` of the store in `dir`, read (every field present even when the file is not). */
export async function openDirectory(
  dir: string,
  sync: boolean,
  faults?: FaultHook,
): Promise<Low<DirectoryData>> {
  const db = new Low(
    new DurableJsonFile<DirectoryData>(path.join(dir, 'directory.json'), sync, faults),
    emptyDirectory(),
  );
  await readDirectory(db);
  return db;
}

/** (Re)reads `directory.json`, dropping any change not written (a failed batch). */
export async function readDirectory(db: Low<DirectoryData>): Promise<void> {
  await db.read();
  db.data = { ...emptyDirectory(), ...db.data };
}

/** The mutations that replay the directory's records into the engine state. */
export function* directoryMutations(data: DirectoryData): Iterable<Mutation> {
  for (const record of Object.values(data.projects)) yield { kind: 'project-put', record };
  for (const record of Object.values(data.clients)) yield { kind: 'client-put', record };
  for (const [projectId, byId] of Object.entries(data.memberships ?? {})) {
    for (const record of Object.values(byId)) yield { kind: 'membership-put', projectId, record };
  }
  for (const record of Object.values(data.keys)) yield { kind: 'signing-key-put', record };
  for (const byId of Object.values(data.jobs ?? {})) {
    for (const record of Object.values(byId)) yield { kind: 'export-job-put', record };
  }
}

/**
 * The records an older layout kept in the directory (memberships, export jobs), as the mutations
 * that write them to their logs; removes them from `data`. Empty for the current layout.
 */
export function takeLegacyRecords(data: DirectoryData): Mutation[] {
  const mutations: Mutation[] = [];
  for (const [projectId, byId] of Object.entries(data.memberships ?? {})) {
    for (const record of Object.values(byId)) mutations.push({ kind: 'membership-put', projectId, record });
  }
  for (const byId of Object.values(data.jobs ?? {})) {
    for (const record of Object.values(byId)) mutations.push({ kind: 'export-job-put', record });
  }
  delete data.memberships;
  delete data.jobs;
  return mutations;
}
