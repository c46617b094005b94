import type { GrantStore } from './grant-types.js';
import { MemoryGrants } from './memory-grants.js';
import { randomUUID } from 'node:crypto';
import { isoMicros } from './engine/clock.js';
import { untilMicros } from './export-window.js';
import { Engine, type EngineBackend } from './engine/engine.js';
import type { BaseState } from './engine/state.js';
import { EngineStorage } from './engine/engine-storage.js';
import { getOrCreate } from './engine/map-entry.js';
import { pairKey, type Mutation, type ResourceEntry } from './engine/mutation.js';
import { InvalidRecordError } from './errors.js';
import {
  findVersion,
  historyEntries,
  historyPage,
  pickHistory,
  versionNotFound,
  type HistorySource,
  type VersionList,
} from './engine/history.js';
import { keepOnly, keptVersions } from './engine/retention.js';
import { checkHistoryRetention } from './history-retention.js';
import { checkPatientCompartment, type WithCompartment } from './patient-compartment.js';
import type {
  ExportReader,
  ExportReadOptions,
  ExportSnapshot,
  HistoryPage,
  HistoryQuery,
  HistoryRetention,
  NdjsonChunk,
  PatientCompartment,
  Storage,
  StorageDescriptor,
  StoredResource,
  Tombstone,
} from './types.js';
import { InvalidOptionError } from '../errors.js';
import type { IndexerOption, WithMatcher } from './search-index.js';
import { Indexing } from './engine/indexing.js';

/** Options of `memoryStorage`. */
export interface MemoryStorageOptions {
  /**
   * Largest NDJSON chunk the export reader yields, in bytes (a chunk holds at least one line).
   * @default 1048576
   */
  exportChunkBytes?: number;
  /**
   * The patient compartment resources are indexed by.
   * @default R4_PATIENT_COMPARTMENT (FHIR R4 CompartmentDefinition "Patient")
   */
  compartment?: PatientCompartment;
  /**
   * Computes what versions are indexed by for search (the indexer itself, or a loader called once,
   * by the first search that builds a parameter's postings). Postings are built per type and
   * parameter on demand: the first search filtering on a parameter builds it, and every later
   * write of the type posts its values (docs/fhir.md, "The embedded search index"). `false`: no
   * index, every search scans its type.
   * A host's own indexer must give the values `src/search` compares (`extractValues`) for every
   * parameter it is asked about: the store narrows searches by them. What they do not answer
   * exactly is tested by its `compileFilters`, or by the R4 matcher when it has none.
   * @default r4SearchIndexer (package entry: the FHIR R4 definitions)
   */
  indexer?: IndexerOption | false;
  /**
   * Which superseded versions are kept for `vread` and history (see `HistoryRetention`). Old
   * versions are also kept, whatever this says, while an export snapshot is open.
   * @default 'all'
   */
  history?: HistoryRetention;
}

interface Version {
  id: string;
  versionId: string;
  json: string;
  lastUpdatedMicros: number;
  deleted: boolean;
  /** Index of the version that replaced this one; -1 while current. */
  superseded: number;
  /** Index of the version this one replaced; -1 for the first. */
  prev: number;
  patients: readonly string[];
}

/** Every version of every resource of one type, in commit order: the memory twin of a log file. */
class TypeLog implements VersionList<Version> {
  versions: Version[] = [];
  latest = new Map<string, number>();
  /** Number of superseded versions. */
  dead = 0;
  /** Superseded versions the last clean-up kept (the retention asked for them). */
  keptDead = 0;
}

interface Ref {
  log: TypeLog;
  index: number;
}

interface MemorySnapshot extends ExportSnapshot {
  adapter: 'memory';
  projectId: string;
  id: string;
  /** Number of versions per type at the snapshot. */
  ends: Record<string, number>;
}

class MemoryBackend implements EngineBackend {
  /** project -> type -> log. */
  readonly logs = new Map<string, Map<string, TypeLog>>();
  /** project -> patient -> `Type\0id` of every resource ever in that patient's compartment. */
  readonly everInCompartment = new Map<string, Map<string, Set<string>>>();
  /** Ids of snapshots not released yet: while any exists, old versions are kept. */
  readonly activeSnapshots = new Set<string>();
  private readonly touched = new Set<TypeLog>();

  constructor(private readonly retention: HistoryRetention) {}

  log(projectId: string, resourceType: string): TypeLog | undefined {
    return this.logs.get(projectId)?.get(resourceType);
  }

  persist(mutations: readonly Mutation[]): Promise<unknown[]> {
    const refs: unknown[] = [];
    for (const m of mutations) {
      if (m.kind === 'project-delete') {
        this.logs.delete(m.id);
        this.everInCompartment.delete(m.id);
      }
      if (m.kind !== 'resource-put' && m.kind !== 'resource-delete') {
        refs.push(undefined);
        continue;
      }
      const { entry } = m;
      const byType = getOrCreate(this.logs, m.projectId, () => new Map());
      let log = byType.get(entry.resourceType);
      if (!log) byType.set(entry.resourceType, (log = new TypeLog()));
      const index = log.versions.length;
      const prev = log.latest.get(entry.id) ?? -1;
      if (prev >= 0) {
        log.versions[prev]!.superseded = index;
        log.dead += 1;
        this.touched.add(log);
      }
      const { json } = entry;
      log.versions.push({
        id: entry.id,
        versionId: entry.versionId,
        json,
        lastUpdatedMicros: entry.lastUpdatedMicros,
        deleted: entry.deleted,
        superseded: -1,
        prev,
        patients: entry.patients,
      });
      log.latest.set(entry.id, index);
      if (entry.patients.length > 0) {
        const byPatient = getOrCreate(this.everInCompartment, m.projectId, () => new Map());
        for (const patient of entry.patients) {
          const keys = getOrCreate(byPatient, patient, () => new Set());
          keys.add(pairKey(entry.resourceType, entry.id));
        }
      }
      refs.push({ log, index } satisfies Ref);
    }
    return Promise.resolve(refs);
  }

  pin(): () => void {
    return () => undefined;
  }

  /**
   * Drops the superseded versions of a type the `history` retention does not keep, once those
   * outnumber the current versions (and 1,024), when no export snapshot is open: memory then
   * follows the kept data, not the number of writes. With `'all'`, nothing is dropped.
   */
  maintain(base: BaseState): Promise<void> {
    const nowMicros = Date.now() * 1000;
    if (this.activeSnapshots.size === 0 && this.retention !== 'all') {
      for (const [projectId, byType] of this.logs) {
        for (const [resourceType, log] of byType) {
          const droppable = log.dead - log.keptDead;
          if (!this.touched.has(log) || droppable <= 1024 || droppable <= log.versions.length - log.dead)
            continue;
          const kept = keepOnly(log.versions, keptVersions(log, this.retention, nowMicros));
          const fresh = new TypeLog();
          fresh.versions = kept.versions;
          fresh.latest = kept.latest;
          fresh.dead = fresh.versions.length - fresh.latest.size;
          fresh.keptDead = fresh.dead;
          byType.set(resourceType, fresh);
          for (const e of base.resources(projectId, resourceType)) {
            if ((e.ref as Ref).log === log)
              base.putEntry(projectId, { ...e, ref: { log: fresh, index: fresh.latest.get(e.id)! } });
          }
        }
      }
    }
    this.touched.clear();
    return Promise.resolve();
  }

  readBody(entry: ResourceEntry): Promise<StoredResource> {
    const { log, index } = entry.ref as Ref;
    return Promise.resolve(JSON.parse(log.versions[index]!.json) as StoredResource);
  }
}

function asMemorySnapshot(projectId: string, snapshot: ExportSnapshot): MemorySnapshot {
  if (
    snapshot.adapter !== 'memory' ||
    snapshot.projectId !== projectId ||
    typeof snapshot.ends !== 'object'
  ) {
    throw new InvalidRecordError('Not a memory storage snapshot of this project');
  }
  return snapshot as MemorySnapshot;
}

class MemoryExportReader implements ExportReader {
  constructor(
    private readonly backend: MemoryBackend,
    private readonly chunkBytes: number,
  ) {}

  async *readResources(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<NdjsonChunk> {
    const snap = asMemorySnapshot(projectId, snapshot);
    const end = snap.ends[options.resourceType] ?? 0;
    const log = this.backend.log(projectId, options.resourceType);
    if (!log || end === 0) return;
    const since = options.since === undefined ? -Infinity : options.since * 1000;
    const until = untilMicros(options);
    let lines: string[] = [];
    let bytes = 0;
    for (const version of this.versionsAt(projectId, log, end, options)) {
      if (version.lastUpdatedMicros <= since || version.lastUpdatedMicros > until) continue;
      lines.push(version.json, '\n');
      bytes += version.json.length + 1;
      if (bytes >= this.chunkBytes) {
        yield { data: lines.join(''), count: lines.length / 2 };
        lines = [];
        bytes = 0;
      }
    }
    if (lines.length > 0) yield { data: lines.join(''), count: lines.length / 2 };
    await Promise.resolve();
  }

  /** Live versions as of `end` (an index into the log), in log order. */
  private *versionsAt(
    projectId: string,
    log: TypeLog,
    end: number,
    options: ExportReadOptions,
  ): Iterable<Version> {
    if (!options.patientIds) {
      for (let i = 0; i < end; i++) {
        const v = log.versions[i]!;
        if (!v.deleted && (v.superseded === -1 || v.superseded >= end)) yield v;
      }
      return;
    }
    // Group/Patient export: only the resources ever in these compartments, walking each one's
    // history back to the version current at the snapshot.
    const byPatient = this.backend.everInCompartment.get(projectId);
    const wanted = new Set(options.patientIds);
    const indexes: number[] = [];
    const seen = new Set<string>();
    for (const patient of options.patientIds) {
      for (const key of byPatient?.get(patient) ?? []) {
        const [type, id] = key.split('\u0000') as [string, string];
        if (type !== options.resourceType || seen.has(id)) continue;
        seen.add(id);
        let index = log.latest.get(id) ?? -1;
        while (index >= end) index = log.versions[index]!.prev;
        if (index < 0) continue;
        const v = log.versions[index]!;
        if (!v.deleted && v.patients.some((p) => wanted.has(p))) indexes.push(index);
      }
    }
    for (const index of indexes.sort((a, b) => a - b)) yield log.versions[index]!;
  }

  async *readDeleted(
    projectId: string,
    snapshot: ExportSnapshot,
    options: ExportReadOptions,
  ): AsyncIterable<Tombstone> {
    const snap = asMemorySnapshot(projectId, snapshot);
    const end = snap.ends[options.resourceType] ?? 0;
    const log = this.backend.log(projectId, options.resourceType);
    if (!log) return;
    const since = options.since === undefined ? -Infinity : options.since * 1000;
    const until = untilMicros(options);
    for (let i = 0; i < end; i++) {
      const v = log.versions[i]!;
      if (!v.deleted || v.lastUpdatedMicros <= since || v.lastUpdatedMicros > until) continue;
      if (v.superseded !== -1 && v.superseded < end) continue;
      yield { resourceType: options.resourceType, id: v.id, deletedAt: isoMicros(v.lastUpdatedMicros) };
    }
    await Promise.resolve();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

class MemoryStorage extends EngineStorage {
  readonly exportReader: ExportReader;
  readonly descriptor?: StorageDescriptor = undefined;
  readonly grants: GrantStore = new MemoryGrants();

  constructor(
    engine: Engine,
    private readonly backend: MemoryBackend,
    chunkBytes: number,
    compartment: PatientCompartment,
    indexing: Indexing,
  ) {
    super(engine, compartment, indexing);
    this.exportReader = new MemoryExportReader(backend, chunkBytes);
  }

  exportSnapshot(projectId: string): Promise<ExportSnapshot> {
    // Planned in the writer between batches, so it sees exactly the committed versions.
    return this.engine.enqueueWrite((w): ExportSnapshot => {
      const ends: Record<string, number> = {};
      for (const [type, log] of this.backend.logs.get(projectId) ?? []) ends[type] = log.versions.length;
      const id = randomUUID();
      this.backend.activeSnapshots.add(id);
      const snapshot: MemorySnapshot = { takenAt: w.now().iso, adapter: 'memory', projectId, id, ends };
      return snapshot;
    });
  }

  releaseSnapshot(snapshot: ExportSnapshot): Promise<void> {
    if (typeof snapshot.id === 'string') this.backend.activeSnapshots.delete(snapshot.id);
    return Promise.resolve();
  }

  async readResourceVersion(
    projectId: string,
    resourceType: string,
    id: string,
    versionId: string,
  ): Promise<StoredResource> {
    this.engine.assertOpen();
    const log = this.backend.log(projectId, resourceType);
    const index = findVersion(log, id, versionId);
    const version = index === undefined ? undefined : log!.versions[index]!;
    if (!version || version.deleted) throw versionNotFound(resourceType, id, versionId, version?.deleted);
    return Promise.resolve(JSON.parse(version.json) as StoredResource);
  }

  async readHistory(projectId: string, query: HistoryQuery): Promise<HistoryPage> {
    this.engine.assertOpen();
    const sources: HistorySource<Version>[] = [];
    for (const [resourceType, list] of this.backend.logs.get(projectId) ?? []) {
      if (query.type === undefined || query.type === resourceType) sources.push({ resourceType, list });
    }
    const choice = pickHistory(sources, query);
    const entries = await historyEntries(choice.picked, (p) =>
      Promise.resolve(JSON.parse(p.head.json) as StoredResource),
    );
    return historyPage(choice, entries);
  }

  async close(): Promise<void> {
    await this.engine.close();
  }
}

/** The memory store (see `memoryStorage` in `src/stores.ts`, which fills in the compartment). */
export function createMemoryStorage(options: WithMatcher<WithCompartment<MemoryStorageOptions>>): Storage {
  const chunkBytes = options.exportChunkBytes ?? 1024 * 1024;
  if (!Number.isInteger(chunkBytes) || chunkBytes < 1) {
    throw new InvalidOptionError('memoryStorage: exportChunkBytes must be a positive integer');
  }
  checkPatientCompartment(options.compartment, 'memoryStorage');
  const backend = new MemoryBackend(checkHistoryRetention('memoryStorage', options.history));
  const indexing = new Indexing(options.indexer, options.matcher);
  return new MemoryStorage(new Engine(backend), backend, chunkBytes, options.compartment, indexing);
}
