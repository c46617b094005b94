import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Low } from 'lowdb';
import { getOrCreate } from '../engine/map-entry.js';
import { openDirectory, type DirectoryData } from './directory.js';
import type { DurableJsonFile } from './durable-json-file.js';
import type { FaultHook } from './faults.js';
import { LogFile } from './log-file.js';
import type { RecordLogName } from './record-logs.js';

/** What a log holds (every log but `once.log` has one). */
export interface LogMeta {
  dirName: string;
  projectId: string;
  /** Set for resource logs. */
  resourceType?: string;
  /** Set for record logs. */
  recordLog?: RecordLogName;
  /** Record logs: the record count at which to check whether a rewrite is due. */
  checkAt?: number;
}

/** Set by a batch that changed the directory data: it then commits by writing `directory.json`. */
export interface DirectoryChange {
  changed: boolean;
}

/**
 * The open files of a file store (`directory.json`, `once.log`, every project's logs) and where
 * each belongs: shared by recovery, the group commit, compaction and snapshots.
 */
export class StoreFiles {
  directory!: Low<DirectoryData>;
  onceLog!: LogFile;
  /** dirName -> resource type -> log. */
  readonly resourceLogs = new Map<string, Map<string, LogFile>>();
  /** dirName -> name -> record log (users, memberships, export jobs). */
  readonly recordLogs = new Map<string, Map<RecordLogName, LogFile>>();
  readonly meta = new Map<LogFile, LogMeta>();
  /** Logs appended to since the last housekeeping. */
  readonly touched = new Set<LogFile>();
  /** Logs appended to through `batch.log` since its last checkpoint (not synced on their own yet). */
  readonly unsynced = new Set<LogFile>();

  constructor(
    readonly dir: string,
    readonly sync: boolean,
    /** Tests only (see `FaultHook`). */
    readonly faults?: FaultHook,
  ) {}

  async openDirectory(): Promise<void> {
    this.directory = await openDirectory(this.dir, this.sync, this.faults);
  }

  /** The `directory.json` file behind `directory`. */
  get directoryFile(): DurableJsonFile<DirectoryData> {
    return this.directory.adapter as DurableJsonFile<DirectoryData>;
  }

  /** Path of a project directory's file (`projects/<dirName>/…`). */
  projectPath(dirName: string, ...parts: string[]): string {
    return path.join(this.dir, 'projects', dirName, ...parts);
  }

  async openLog(file: string, meta: LogMeta, create: boolean): Promise<LogFile> {
    const log = await LogFile.open(file, { create, sync: this.sync, faults: this.faults });
    this.meta.set(log, meta);
    return log;
  }

  /** The project's directory name, given a fresh one (a directory change) on first use. */
  projectDirName(projectId: string, change: DirectoryChange): string {
    const { projectDirs } = this.directory.data;
    let dirName = projectDirs[projectId];
    if (!dirName) {
      dirName = `p-${randomUUID()}`;
      projectDirs[projectId] = dirName;
      change.changed = true;
    }
    return dirName;
  }

  async recordLog(projectId: string, name: RecordLogName, change: DirectoryChange): Promise<LogFile> {
    const dirName = this.projectDirName(projectId, change);
    const byName = getOrCreate(this.recordLogs, dirName, () => new Map());
    let log = byName.get(name);
    if (!log) {
      log = await this.openLog(
        this.projectPath(dirName, `${name}.log`),
        { dirName, projectId, recordLog: name },
        true,
      );
      byName.set(name, log);
    }
    return log;
  }

  async resourceLog(projectId: string, resourceType: string, change: DirectoryChange): Promise<LogFile> {
    const dirName = this.projectDirName(projectId, change);
    const byType = getOrCreate(this.resourceLogs, dirName, () => new Map());
    let log = byType.get(resourceType);
    if (!log) {
      const file = this.projectPath(dirName, 'resources', `${resourceType}.log`);
      log = await this.openLog(file, { dirName, projectId, resourceType }, true);
      byType.set(resourceType, log);
    }
    return log;
  }

  /** The resource logs of a project (none before its first write). */
  resourceLogsOf(projectId: string): Iterable<[string, LogFile]> {
    const dirName = this.directory.data.projectDirs[projectId];
    return (dirName && this.resourceLogs.get(dirName)) || [];
  }

  /** Forgets a deleted project's logs (readers keep their segments) and removes its directory. */
  async dropProjectDir(dirName: string): Promise<void> {
    const logs = [
      ...(this.resourceLogs.get(dirName)?.values() ?? []),
      ...(this.recordLogs.get(dirName)?.values() ?? []),
    ];
    this.resourceLogs.delete(dirName);
    this.recordLogs.delete(dirName);
    for (const log of logs) {
      this.meta.delete(log);
      this.touched.delete(log);
      this.unsynced.delete(log);
      log.segment.retire();
    }
    await fs
      .rm(path.join(this.dir, 'projects', dirName), { recursive: true, force: true })
      .catch(() => undefined);
  }
}
