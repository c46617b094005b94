/**
 * The commands the benchmark sends to its server child process (see `server-child.ts`) and what
 * each answers. Plain JSON both ways (Node IPC).
 */

/** Which store the server runs on. */
export type StoreKind = 'file' | 'memory' | 'postgres';

/** A project with an admin client's access token, made through `Project/$init` and `$new-client`. */
export interface ProjectHandle {
  projectId: string;
  token: string;
}

export interface ServerInfo {
  /** `http://127.0.0.1:<port>`: the platform (token, SCIM, FHIR, bulk). */
  origin: string;
  /** `http://127.0.0.1:<port>`: a plain Node `http` + `fs.createReadStream` file server (`GET /?path=`). */
  plainOrigin: string;
  /** The store used. */
  store: StoreKind;
  /** True when the store reopens in worker threads (exports then run off the main thread). */
  workerExports: boolean;
  pid: number;
  /** The PostgreSQL schema the store works in (store `postgres`). */
  schema?: string;
}

export interface LoadResult {
  resources: number;
  ms: number;
}

export interface MemorySample {
  /** Current resident set size, bytes. */
  rss: number;
  /** Peak RSS since the last `resetPeak` (Linux `VmHWM` when resettable, else sampled every 10 ms). */
  peakRss: number;
  /** How `peakRss` was obtained. */
  peakSource: 'VmHWM' | 'sampled';
  heapUsed: number;
}

/** Peak memory of the export worker thread's own V8 isolate while it ran one task. */
export interface WorkerProbe {
  /** Peak `heapTotal + external` of the worker isolate (includes array buffers), bytes. */
  peakIsolateBytes: number;
  peakHeapUsed: number;
  /** Peak process RSS seen from inside the worker (shared with the main thread). */
  peakProcessRss: number;
  /** Peak `heapUsed + external` right after a forced full GC (only with `probeGc`; else 0). */
  peakLiveBytes: number;
  samples: number;
}

export interface Commands {
  open: {
    args: {
      store: StoreKind;
      dir: string;
      exportDir: string;
      probeDir: string;
      /** The file store's `durability` (`write` skips fsync: a diagnostic, not a product setting). */
      durability?: 'fsync' | 'write';
      /** Also sample the export worker's live memory after forced GCs (slows exports a little). */
      probeGc?: boolean;
      /** `reference`: strict projects validate with `@medplum/core` alone (a diagnostic). */
      validator?: 'default' | 'reference';
      /** PostgreSQL connection string (store `postgres`): a fresh schema, dropped on close. */
      databaseUrl?: string;
      /**
       * `false`: the PostgreSQL store keeps no search index (a diagnostic: what the index costs
       * writes; searches then answer 400). @default true
       */
      searchIndex?: boolean;
      /** `false`: the platform records no audit event (`audit: { enabled: false }`). @default true */
      audit?: boolean;
      /**
       * The audit trail's journal directory (the durable configuration, as `npm start` runs it).
       * Without it the trail runs as the platform's default: no journal.
       */
      auditJournalDir?: string;
      /**
       * Where export files live: `directory` (`exportDir`, every store) or `database` (the
       * PostgreSQL store's own `exportFiles`, its default; store `postgres` only).
       * @default 'directory'
       */
      exportFiles?: 'directory' | 'database';
    };
    result: ServerInfo;
  };
  /**
   * PostgreSQL only: `COPY (SELECT body …) TO STDOUT` of the rows a system export of the project
   * reads (every live current version of `types`, per type in `seq` order), each type into its
   * own file under `dir`: the export's baseline.
   */
  pgCopy: {
    args: { projectId: string; types: string[]; dir: string };
    result: { ms: number; rows: number; bytes: number };
  };
  /** Sizes in bytes (NDJSON, uncompressed) of completed export files, read from the platform's file store. */
  exportFileSizes: {
    args: { projectId: string; jobId: string; names: string[] };
    result: number[];
  };
  newProject: { args: { name: string; strict: boolean }; result: ProjectHandle };
  projectClient: { args: { projectId: string }; result: ProjectHandle };
  loadGenerated: {
    args: { projectId: string; patients: number; seed: number; batchSize: number };
    result: LoadResult;
  };
  /**
   * PostgreSQL only: generated patients `[skip, patients)` written straight into the store's tables
   * with `COPY` (bench/pg-resource-load.ts); every patient of `[0, patients)` counts for `createGroup`
   * (the first `skip` loaded otherwise, e.g. by an NDJSON upload of `generatePatients(skip, seed)`).
   */
  copyGenerated: {
    args: { projectId: string; patients: number; skip: number; seed: number };
    result: LoadResult & { indexMs: number; rows: Record<string, number> };
  };
  loadSynthea: { args: { projectId: string; dir: string; batchSize: number }; result: LoadResult };
  /** Stores a Group of every `1/fraction`-th patient loaded into the project; answers its id and size. */
  createGroup: { args: { projectId: string; percent: number }; result: { groupId: string; members: number } };
  loadUsers: {
    /** `copy`: PostgreSQL only, the users alone straight into their table (bench/pg-user-load.ts). */
    args: { projectId: string; count: number; batchSize: number; copy?: boolean };
    result: LoadResult;
  };
  memory: { args: Record<string, never>; result: MemorySample };
  resetPeak: { args: Record<string, never>; result: MemorySample };
  workerProbe: { args: { jobId: string }; result: WorkerProbe | null };
  close: { args: Record<string, never>; result: null };
}

export type CommandName = keyof Commands;

export interface Request<K extends CommandName = CommandName> {
  id: number;
  cmd: K;
  args: Commands[K]['args'];
}

export type Response = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };
