/**
 * The benchmark's server process: runs the real platform (`fhirPlatform`: token endpoint with real
 * client tokens, SCIM, FHIR, bulk export with its worker pool) and a plain Node file server, and
 * answers the commands of `server-protocol.ts` over IPC. It runs in its own process so that its RSS
 * is the server's alone.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { pipeline } from 'node:stream/promises';
import express from 'express';
import { ensureSuperAdminClient } from '../src/auth/client/super-admin.js';
import { referenceR4Validator } from '../src/fhir/validation/structure-validator.js';
import { fhirPlatform, type FhirPlatform } from '../src/platform.js';
import { postgresStorage } from '../src/postgres.js';
import { R4_PATIENT_COMPARTMENT } from '../src/fhir/compartment.js';
import { createPostgresStorage } from '../src/storage/postgres/postgres-storage.js';
import { loadR4Indexer } from '../src/search/index-resource.js';
import { DirectoryExportFiles } from '../src/bulk/directory-export-files.js';
import { fileStorage, memoryStorage } from '../src/stores.js';
import type { FhirResource, ResourceWrite, Storage } from '../src/storage/types.js';
import { generatePatients } from './dataset.js';
import { bearer, clientToken, expectJson } from './http-json.js';
import type {
  CommandName,
  Commands,
  LoadResult,
  MemorySample,
  ProjectHandle,
  Request,
  Response,
  ServerInfo,
  WorkerProbe,
} from './server-protocol.js';
import { copyRowsOut, dropSchema } from './measure-pg-copy.js';
import { copyUsersIn } from './pg-user-load.js';
import { copyResourcesIn } from './pg-resource-load.js';
import { readSynthea } from './synthea.js';

const PROBE_WORKER = fileURLToPath(new URL('./export-worker-probe.mjs', import.meta.url));

function listen(server: http.Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    });
  });
}

/** Streams `?path=` with nothing but `http` and `fs.createReadStream`: the download baseline. */
function plainFileServer(): http.Server {
  return http.createServer((req, res) => {
    const file = new URL(req.url ?? '/', 'http://x').searchParams.get('path') ?? '';
    fs.stat(file, (error, stat) => {
      if (error) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/fhir+ndjson', 'content-length': stat.size });
      pipeline(fs.createReadStream(file), res).catch(() => res.destroy());
    });
  });
}

function vmHwm(): number | undefined {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

class BenchServer {
  #storage: Storage | undefined;
  #pg: { connectionString: string; schema: string } | undefined;
  #platform: FhirPlatform | undefined;
  #servers: http.Server[] = [];
  #origin = '';
  #superSecret = '';
  #probeDir = '';
  readonly #patients = new Map<string, string[]>();
  #sampledPeak = 0;
  #hwmResettable = false;
  #neverReset = true;
  readonly #sampler: NodeJS.Timeout;

  constructor() {
    this.#sampler = setInterval(() => {
      this.#sampledPeak = Math.max(this.#sampledPeak, process.memoryUsage.rss());
    }, 10);
    this.#sampler.unref();
  }

  get storage(): Storage {
    if (!this.#storage) throw new Error('open first');
    return this.#storage;
  }

  async open({
    store,
    dir,
    exportDir,
    probeDir,
    durability,
    probeGc,
    validator,
    databaseUrl,
    searchIndex,
    audit,
    auditJournalDir,
    exportFiles,
  }: Commands['open']['args']): Promise<ServerInfo> {
    if (exportFiles === 'database' && store !== 'postgres')
      throw new Error('exportFiles database needs postgres');
    if (store === 'postgres') {
      if (!databaseUrl) throw new Error('store postgres needs databaseUrl');
      this.#pg = { connectionString: databaseUrl, schema: `fpk_bench_${randomBytes(6).toString('hex')}` };
      this.#storage =
        searchIndex === false
          ? createPostgresStorage({ ...this.#pg, compartment: R4_PATIENT_COMPARTMENT })
          : postgresStorage(this.#pg);
    } else {
      this.#storage =
        store === 'file'
          ? await fileStorage({ dir, ...(durability ? { durability } : {}) })
          : memoryStorage();
    }
    this.#probeDir = probeDir;
    process.env.FPK_BENCH_PROBE_DIR = probeDir;
    if (probeGc) process.env.FPK_BENCH_PROBE_GC = '1';
    this.#platform = fhirPlatform({
      storage: this.#storage,
      exportDir,
      bulk: {
        pool: { workerFilename: PROBE_WORKER, maxThreads: 1 },
        maxRunningExports: 4,
        // The bench keeps some exports' files (`--large`: over the 1 GiB default); no quota here,
        // and no cap on one export (`--huge`: about 13 GiB at 10M resources, over the 4 GiB default).
        maxProjectExportSize: Infinity,
        maxExportSize: Infinity,
        // Export files on disk for every store (PostgreSQL would keep them in the database by
        // default): the export figures compare reading the store, and the COPY baseline writes
        // files too. bench/export-files.ts compares the two file stores.
        // `database` keeps PostgreSQL's default (files in the database) for the figures of that path.
        ...(exportFiles === 'database' ? {} : { exportFiles: new DirectoryExportFiles(exportDir) }),
      },
      // The --large run uploads one 1.3 GiB file: over the default 1 GiB upload limit (413).
      fhir: {
        upload: { maxFileSize: 4 * 1024 ** 3 },
        ...(validator === 'reference' ? { validator: referenceR4Validator() } : {}),
      },
      // Enabled (with the journal when given: the durable configuration) unless told to record nothing.
      ...(audit === false
        ? { audit: { enabled: false } }
        : auditJournalDir !== undefined
          ? { audit: { journalDir: auditJournalDir } }
          : {}),
      onError: (error) => console.error('[bench server]', error),
    });
    await this.#platform.ready;
    const app = express();
    app.use(this.#platform.router);
    const platformServer = http.createServer(app);
    // Longer than the main thread may stay busy with one large Bundle on a loaded machine: Node
    // runs an expired keep-alive timer before reading the next request already waiting on that
    // connection, and closes it under the client ("other side closed", seen with 4 Synthea
    // bundles in flight at load average 11). Hosts behind a proxy raise it likewise.
    platformServer.keepAliveTimeout = 65_000;
    const plain = plainFileServer();
    this.#servers = [platformServer, plain];
    this.#origin = await listen(platformServer);
    const plainOrigin = await listen(plain);

    const secret = randomBytes(24).toString('base64url');
    await ensureSuperAdminClient(this.#storage, { clientId: 'bench-root', clientSecret: secret });
    this.#superSecret = secret;
    return {
      origin: this.#origin,
      plainOrigin,
      store,
      workerExports: Boolean(this.#storage.descriptor),
      pid: process.pid,
      ...(this.#pg ? { schema: this.#pg.schema } : {}),
    };
  }

  /** A fresh super-admin token (a long run, `--large` on a busy machine, outlives one). */
  #superToken(): Promise<string> {
    return clientToken(this.#origin, 'bench-root', this.#superSecret);
  }

  /** A project through `Project/$init`, and an admin client of it through `$new-client`. */
  async newProject({ name, strict }: Commands['newProject']['args']): Promise<ProjectHandle> {
    const json = { 'content-type': 'application/fhir+json' };
    const init = await expectJson(201, `${this.#origin}/fhir/R4/Project/$init`, {
      method: 'POST',
      headers: bearer(await this.#superToken(), json),
      body: JSON.stringify({
        resourceType: 'Parameters',
        parameter: [
          { name: 'name', valueString: name },
          { name: 'ownerEmail', valueString: 'owner@bench.example' },
        ],
      }),
    });
    const projectId = (init.body as { id: string }).id;
    if (!strict) await this.storage.updateProject(projectId, { strictMode: false });
    return this.projectClient({ projectId });
  }

  /** An admin client of an existing project (a store reopened by another server process). */
  async projectClient({ projectId }: Commands['projectClient']['args']): Promise<ProjectHandle> {
    const json = { 'content-type': 'application/fhir+json' };
    const client = await expectJson(201, `${this.#origin}/fhir/R4/Project/${projectId}/$new-client`, {
      method: 'POST',
      headers: bearer(await this.#superToken(), json),
      body: JSON.stringify({
        resourceType: 'Parameters',
        parameter: [
          { name: 'name', valueString: 'bench admin' },
          { name: 'admin', valueBoolean: true },
          { name: 'accessTokenLifetime', valueInteger: 86400 },
        ],
      }),
    });
    const { id, secret } = client.body as { id: string; secret: string };
    return { projectId, token: await clientToken(this.#origin, id, secret) };
  }

  async #write(projectId: string, resources: Iterable<FhirResource>, batchSize: number): Promise<LoadResult> {
    const start = performance.now();
    let batch: ResourceWrite[] = [];
    let count = 0;
    for (const resource of resources) {
      batch.push(
        resource.id
          ? { op: 'update', resource: resource as FhirResource & { id: string } }
          : { op: 'create', resource },
      );
      if (batch.length >= batchSize) {
        await this.storage.writeResources(projectId, batch);
        count += batch.length;
        batch = [];
      }
    }
    if (batch.length) await this.storage.writeResources(projectId, batch);
    count += batch.length;
    return { resources: count, ms: performance.now() - start };
  }

  loadGenerated({
    projectId,
    patients,
    seed,
    batchSize,
  }: Commands['loadGenerated']['args']): Promise<LoadResult> {
    const ids = this.#patients.get(projectId) ?? [];
    this.#patients.set(projectId, ids);
    function* tracked(): Generator<FhirResource> {
      for (const resource of generatePatients(patients, seed) as Generator<FhirResource>) {
        if (resource.resourceType === 'Patient') ids.push(resource.id!);
        yield resource;
      }
    }
    return this.#write(projectId, tracked(), batchSize);
  }

  async copyGenerated({ projectId, patients, skip, seed }: Commands['copyGenerated']['args']) {
    if (!this.#pg) throw new Error('copyGenerated needs the postgres store');
    const ids = this.#patients.get(projectId) ?? [];
    this.#patients.set(projectId, ids);
    function* rest(): Generator<FhirResource> {
      let p = 0;
      for (const resource of generatePatients(patients, seed) as Generator<FhirResource>) {
        if (resource.resourceType === 'Patient') {
          ids.push(resource.id!);
          p++;
        }
        if (p > skip) yield resource;
      }
    }
    const load = await copyResourcesIn({
      ...this.#pg,
      projectId,
      resources: rest(),
      indexer: await loadR4Indexer(),
      compartment: R4_PATIENT_COMPARTMENT,
      log: (line) => console.error(`[bench server] ${line}`),
    });
    return { resources: load.resources, ms: load.ms, indexMs: load.indexMs, rows: load.rows };
  }

  async loadSynthea({ projectId, dir, batchSize }: Commands['loadSynthea']['args']): Promise<LoadResult> {
    const resources = readSynthea(dir);
    return this.#write(projectId, resources, batchSize);
  }

  async createGroup({ projectId, percent }: Commands['createGroup']['args']) {
    const ids = this.#patients.get(projectId) ?? [];
    const step = Math.max(1, Math.round(100 / percent));
    const members = ids.filter((_, i) => i % step === 0);
    const [written] = await this.storage.writeResources(projectId, [
      {
        op: 'create',
        resource: {
          resourceType: 'Group',
          type: 'person',
          actual: true,
          member: members.map((id) => ({ entity: { reference: `Patient/${id}` } })),
        },
      },
    ]);
    return { groupId: written!.resource!.id, members: members.length };
  }

  /** SCIM users straight through the storage (profile, user, membership, as a SCIM create makes them). */
  async loadUsers({ projectId, count, batchSize, copy }: Commands['loadUsers']['args']): Promise<LoadResult> {
    if (copy) {
      if (!this.#pg) throw new Error('loadUsers with copy needs the postgres store');
      const { ms } = await copyUsersIn({ ...this.#pg, projectId, count });
      return { resources: count, ms };
    }
    const start = performance.now();
    for (let from = 0; from < count; from += batchSize) {
      const to = Math.min(count, from + batchSize);
      await this.storage.transaction(async (tx) => {
        for (let i = from; i < to; i++) {
          const email = `user${i}@bench.example`;
          const profile = await tx.createResource(projectId, {
            resourceType: 'Practitioner',
            name: [{ given: [`Given${i}`], family: `Family${i}` }],
            telecom: [{ system: 'email', value: email, use: 'work' }],
          });
          const user = await tx.createUser(projectId, {
            projectId,
            userName: email,
            externalId: `ext-${i}`,
            userType: 'Practitioner',
            profileId: profile.id,
            active: true,
            data: {
              name: { givenName: `Given${i}`, familyName: `Family${i}` },
              emails: [{ value: email, type: 'work', primary: true }],
            },
          });
          await tx.createMembership(projectId, {
            projectId,
            userId: user.id,
            admin: false,
            profile: `Practitioner/${profile.id}`,
          });
        }
      });
    }
    return { resources: count, ms: performance.now() - start };
  }

  memory(): MemorySample {
    const m = process.memoryUsage();
    // VmHWM is the lifetime peak until the first reset, then the peak since the last reset.
    const hwm = this.#neverReset || this.#hwmResettable ? vmHwm() : undefined;
    this.#sampledPeak = Math.max(this.#sampledPeak, m.rss);
    return {
      rss: m.rss,
      peakRss: hwm ?? this.#sampledPeak,
      peakSource: hwm === undefined ? 'sampled' : 'VmHWM',
      heapUsed: m.heapUsed,
    };
  }

  resetPeak(): MemorySample {
    this.#neverReset = false;
    // Started with --expose-gc: drop garbage left by earlier phases so the peak is this phase's.
    (globalThis as { gc?: () => void }).gc?.();
    try {
      fs.writeFileSync('/proc/self/clear_refs', '5');
      this.#hwmResettable = vmHwm() !== undefined;
    } catch {
      this.#hwmResettable = false;
    }
    this.#sampledPeak = process.memoryUsage.rss();
    return this.memory();
  }

  pgCopy({ projectId, types, dir }: Commands['pgCopy']['args']) {
    if (!this.#pg) throw new Error('pgCopy needs the postgres store');
    return copyRowsOut({ ...this.#pg, projectId, types, dir });
  }

  async exportFileSizes({ projectId, jobId, names }: Commands['exportFileSizes']['args']): Promise<number[]> {
    const files = this.storage.exportFiles;
    if (!files)
      throw new Error('exportFileSizes: the store keeps no export files (exportFiles: database only)');
    return Promise.all(names.map(async (name) => (await files.size({ projectId, jobId }, name)) ?? -1));
  }

  workerProbe({ jobId }: Commands['workerProbe']['args']): WorkerProbe | null {
    const file = `${this.#probeDir}/${jobId}.json`;
    return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as WorkerProbe) : null;
  }

  async close(): Promise<null> {
    clearInterval(this.#sampler);
    for (const server of this.#servers) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    await this.#platform?.close();
    await this.#storage?.close();
    if (this.#pg) await dropSchema(this.#pg.connectionString, this.#pg.schema);
    return null;
  }
}

const server = new BenchServer();
const handlers: { [K in CommandName]: (args: Commands[K]['args']) => unknown } = {
  open: (a) => server.open(a),
  newProject: (a) => server.newProject(a),
  projectClient: (a) => server.projectClient(a),
  loadGenerated: (a) => server.loadGenerated(a),
  loadSynthea: (a) => server.loadSynthea(a),
  copyGenerated: (a) => server.copyGenerated(a),
  createGroup: (a) => server.createGroup(a),
  loadUsers: (a) => server.loadUsers(a),
  memory: () => server.memory(),
  resetPeak: () => server.resetPeak(),
  workerProbe: (a) => server.workerProbe(a),
  pgCopy: (a) => server.pgCopy(a),
  exportFileSizes: (a) => server.exportFileSizes(a),
  close: () => server.close(),
};

process.on('message', (message: Request) => {
  const handler = handlers[message.cmd] as (args: unknown) => unknown;
  Promise.resolve()
    .then(() => handler(message.args))
    .then(
      (value): Response => ({ id: message.id, ok: true, value: value ?? null }),
      (error: unknown): Response => ({
        id: message.id,
        ok: false,
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      }),
    )
    .then((response) => {
      process.send?.(response);
      if (message.cmd === 'close') process.disconnect();
    })
    .catch(() => process.exit(1));
});
