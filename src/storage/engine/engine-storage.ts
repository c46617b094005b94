import { ConflictError, NotFoundError } from '../errors.js';
import type {
  ExportJobChanges,
  ExportJobRecord,
  ExportJobStatus,
  ExportReader,
  ExportSnapshot,
  ExportSnapshotOptions,
  HistoryPage,
  HistoryQuery,
  NewExportJob,
  PatientCompartment,
  ProjectRecord,
  SigningKeyRecord,
  Storage,
  StorageDescriptor,
  StorageOperations,
  StoredResource,
} from '../types.js';
import type { Engine } from './engine.js';
import { EngineOperations } from './operations.js';
import type { Indexing } from './indexing.js';
import { byCreatedThenId } from '../record-order.js';
import { checkIfVersion, newExportJobRecord, updatedExportJobRecord } from '../record-rules.js';

/** The server-wide part of `Storage` on top of the engine; adapters add exports and `close`. */
export abstract class EngineStorage extends EngineOperations implements Storage {
  abstract readonly exportReader: ExportReader;
  abstract readonly descriptor?: StorageDescriptor;
  abstract exportSnapshot(projectId: string, options?: ExportSnapshotOptions): Promise<ExportSnapshot>;
  abstract releaseSnapshot(snapshot: ExportSnapshot): Promise<void>;
  abstract close(): Promise<void>;
  abstract readResourceVersion(
    projectId: string,
    resourceType: string,
    id: string,
    versionId: string,
  ): Promise<StoredResource>;
  abstract readHistory(projectId: string, query: HistoryQuery): Promise<HistoryPage>;

  constructor(
    protected readonly engine: Engine,
    compartment: PatientCompartment,
    indexing: Indexing,
  ) {
    super(engine.root, compartment, indexing);
  }

  /** Open means reachable: everything is in this process (the file store adds its directory). */
  async ping(): Promise<void> {
    await Promise.resolve();
    this.engine.assertOpen();
  }

  transaction<T>(fn: (tx: StorageOperations) => Promise<T>): Promise<T> {
    return this.engine.transaction((ctx) => fn(new EngineOperations(ctx, this.compartment, this.indexing)));
  }

  deleteProject(id: string): Promise<void> {
    return this.engine.enqueueWrite((w) => {
      if (!w.view.project(id)) throw new NotFoundError(`Project ${id} not found`);
      w.emit({ kind: 'project-delete', id });
    });
  }

  async listProjects(): Promise<ProjectRecord[]> {
    const projects = [...this.engine.root.view().projects()].sort(byCreatedThenId);
    return Promise.resolve(structuredClone(projects));
  }

  async listSigningKeys(): Promise<SigningKeyRecord[]> {
    const keys = [...this.engine.root.view().signingKeys()].sort((a, b) =>
      a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.kid < b.kid ? -1 : 1,
    );
    return Promise.resolve(structuredClone(keys));
  }

  saveSigningKey(key: SigningKeyRecord): Promise<void> {
    return this.engine.enqueueWrite((w) => {
      w.emit({ kind: 'signing-key-put', record: structuredClone(key) });
    });
  }

  useOnce(key: string, expiresAt: number): Promise<boolean> {
    this.engine.assertOpen();
    this.engine.base.purgeOnce(Date.now());
    return this.engine.enqueueWrite((w) => {
      const existing = w.view.once(key);
      if (existing !== undefined && existing > Date.now()) return false;
      w.emit({ kind: 'one-time-value-put', key, expiresAt });
      return true;
    });
  }

  createExportJob(job: NewExportJob): Promise<ExportJobRecord> {
    return this.engine.enqueueWrite((w) => {
      if (w.view.job(job.projectId, job.id))
        throw new ConflictError(`Export job ${job.id} exists`, { attribute: 'id' });
      const record = newExportJobRecord(job, new Date(w.now().ms).toISOString());
      w.emit({ kind: 'export-job-put', record });
      return structuredClone(record);
    });
  }

  async readExportJob(projectId: string, id: string): Promise<ExportJobRecord> {
    const record = this.engine.root.view().job(projectId, id);
    if (!record) throw new NotFoundError(`Export job ${id} not found`);
    return Promise.resolve(structuredClone(record));
  }

  updateExportJob(
    projectId: string,
    id: string,
    changes: ExportJobChanges,
    options?: { ifVersion?: number },
  ): Promise<ExportJobRecord> {
    return this.engine.enqueueWrite((w) => {
      const current = w.view.job(projectId, id);
      if (!current) throw new NotFoundError(`Export job ${id} not found`);
      checkIfVersion('Export job', id, current.version, options?.ifVersion);
      const record = updatedExportJobRecord(
        current,
        projectId,
        id,
        changes,
        new Date(w.now().ms).toISOString(),
      );
      w.emit({ kind: 'export-job-put', record });
      return structuredClone(record);
    });
  }

  deleteExportJob(projectId: string, id: string): Promise<void> {
    return this.engine.enqueueWrite((w) => {
      if (!w.view.job(projectId, id)) throw new NotFoundError(`Export job ${id} not found`);
      w.emit({ kind: 'export-job-delete', projectId, id });
    });
  }

  async listExportJobs(query?: {
    projectId?: string;
    status?: ExportJobStatus[];
  }): Promise<ExportJobRecord[]> {
    const jobs = [...this.engine.root.view().jobs()].filter(
      (j) =>
        (query?.projectId === undefined || j.projectId === query.projectId) &&
        (query?.status === undefined || query.status.includes(j.status)),
    );
    return Promise.resolve(structuredClone(jobs.sort(byCreatedThenId)));
  }
}
