// Three server processes on one PostgreSQL schema (a deployment behind a load balancer): exports,
// their files and SCIM uniqueness hold across instances, a killed instance's export is taken over
// and a cancellation through one instance stops the export running on another.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fhirPlatform } from '../../src/platform.js';
import { postgresStorage } from '../../src/postgres.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { parameters } from '../helpers/platform-app.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { sleep } from '../helpers/sleep.js';
import { PATIENCE_MS } from '../helpers/eventually.js';

const url = postgresTestUrl('several instances on one PostgreSQL');
const SERVER = fileURLToPath(new URL('./fixtures/instance-server.ts', import.meta.url));
/** The public origin every instance is configured with, as behind a load balancer. */
const PUBLIC = 'https://fhir.example.test';
// Short, so that a takeover happens within the test; FPK_TEST_LEASE_MS and FPK_TEST_HEARTBEAT_MS
// override them (e.g. 30000 and 10000, the defaults, to measure a takeover as deployed).
const LEASE_MS = Number(process.env.FPK_TEST_LEASE_MS ?? '2000');
const HEARTBEAT_MS = Number(process.env.FPK_TEST_HEARTBEAT_MS ?? '400');
/** Failed token requests allowed per client and address, across all instances. */
const MAX_FAILURES = 6;

interface Instance {
  name: string;
  origin: string;
  process: ChildProcess;
  /** What it printed on stderr (shown when a test fails). */
  errors: string[];
}

function withParam(connectionString: string, name: string, value: string): string {
  return `${connectionString}${connectionString.includes('?') ? '&' : '?'}${name}=${encodeURIComponent(value)}`;
}

async function startInstance(name: string, connectionString: string, schema: string): Promise<Instance> {
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER], {
    env: {
      ...process.env,
      FPK_DATABASE_URL: withParam(connectionString, 'application_name', `${schema}-${name}`),
      FPK_SCHEMA: schema,
      FPK_BASE_URL: PUBLIC,
      FPK_LEASE_MS: String(LEASE_MS),
      FPK_HEARTBEAT_MS: String(HEARTBEAT_MS),
      FPK_MAX_FAILURES: String(MAX_FAILURES),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const errors: string[] = [];
  child.stderr.on('data', (data: Buffer) => errors.push(data.toString()));
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(new Error(`${name} did not start: ${errors.join('')}`)),
      PATIENCE_MS,
    );
    child.stdout.on('data', (data: Buffer) => {
      out += data.toString();
      const match = /READY (\d+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${String(code)}): ${errors.join('')}`));
    });
  });
  return { name, origin: `http://127.0.0.1:${port}`, process: child, errors };
}

if (url) {
  const connectionString = url;
  const schema = `fpk_multi_${randomBytes(6).toString('hex')}`;
  let admin: pg.Pool;
  let storage: Storage;
  let projectId: string;
  let token: string;
  let clientId: string;
  const instances: Record<'A' | 'B' | 'C', Instance> = {} as Record<'A' | 'B' | 'C', Instance>;
  /** Ids per type of the Patients and Observations the project holds now. */
  async function expectedIds(): Promise<Map<string, string[]>> {
    const expected = new Map<string, string[]>();
    for (const type of ['Patient', 'Observation']) {
      const page = await storage.searchResources(projectId, type);
      expected.set(type, page.resources.map((r) => r.id).sort());
    }
    return expected;
  }

  /** `path` (absolute URL on the public origin, or a path) on one instance. */
  function on(instance: Instance, path: string): string {
    return path.startsWith(PUBLIC) ? instance.origin + path.slice(PUBLIC.length) : instance.origin + path;
  }

  async function call(instance: Instance, path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (!headers.has('authorization')) headers.set('authorization', `Bearer ${token}`);
    return fetch(on(instance, path), { ...init, headers });
  }

  async function kickoff(instance: Instance): Promise<string> {
    const res = await call(instance, '/fhir/R4/$export?_type=Patient,Observation', {
      headers: { accept: 'application/fhir+json', prefer: 'respond-async' },
    });
    expect(res.status).toBe(202);
    return res.headers.get('content-location')!;
  }

  async function waitFor<T>(
    what: string,
    probe: () => Promise<T | undefined>,
    ms = PATIENCE_MS + 2 * LEASE_MS,
  ): Promise<T> {
    const until = Date.now() + ms;
    for (;;) {
      const value = await probe();
      if (value !== undefined) return value;
      if (Date.now() > until) throw new Error(`Timed out waiting for ${what}`);
      await sleep(100);
    }
  }

  interface Manifest {
    transactionTime: string;
    output: { type: string; url: string; count: number }[];
  }

  async function manifestOn(instance: Instance, status: string): Promise<Manifest> {
    return waitFor(`the manifest on ${instance.name}`, async () => {
      const res = await call(instance, status);
      if (res.status === 202) return undefined;
      expect(res.status).toBe(200);
      return (await res.json()) as Manifest;
    });
  }

  /** Every file of the manifest through `instance` (gzip), ids per type. */
  async function idsOf(instance: Instance, manifest: Manifest): Promise<Map<string, string[]>> {
    const ids = new Map<string, string[]>();
    for (const output of manifest.output) {
      const res = await call(instance, output.url, { headers: { 'accept-encoding': 'gzip' } });
      expect(res.status).toBe(200);
      // fetch decodes gzip itself; the header says it was sent compressed.
      expect(res.headers.get('content-encoding')).toBe('gzip');
      const lines = (await res.text()).trim().split('\n');
      expect(lines.length).toBe(output.count);
      const list = ids.get(output.type) ?? [];
      for (const line of lines) list.push((JSON.parse(line) as { id: string }).id);
      ids.set(output.type, list);
    }
    for (const list of ids.values()) list.sort();
    return ids;
  }

  /** The instance whose run holds the job's lease (runs are named `{host}/{pid}/…`), if any. */
  async function leaseHolder(jobId: string): Promise<string | undefined> {
    const { rows } = await admin.query<{ owner: string | null }>(
      `SELECT lease_owner AS owner FROM "${schema}".export_jobs WHERE id = $1`,
      [jobId],
    );
    const pid = rows[0]?.owner?.split('/')[1];
    return Object.values(instances).find((i) => String(i.process.pid) === pid)?.name;
  }

  async function slow(ms: number, ...which: Instance[]): Promise<void> {
    for (const instance of which) await fetch(`${instance.origin}/test/slow/${ms}`, { method: 'POST' });
  }

  /** Connections of an instance (export workers included) that are running a query or a cursor. */
  async function busyConnections(name: string): Promise<number> {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE application_name = $1 AND state IN ('active', 'idle in transaction')`,
      [`${schema}-${name}`],
    );
    return rows[0]!.n;
  }

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString, max: 2 });
    storage = postgresStorage({ connectionString, schema });
    const setup = fhirPlatform({ storage, bulk: false });
    const project = await setup.admin.initProject(parameters({ name: 'Multi' }));
    projectId = project.id;
    const client = await setup.admin.newClient(
      projectId,
      parameters({ name: 'etl', scope: 'system/*.*', admin: true }),
    );
    await setup.close();
    const patients: FhirResource[] = [{ resourceType: 'Patient', id: 'p1' }];
    await storage.writeResources(
      projectId,
      patients.map((resource) => ({ op: 'create', resource })),
    );
    for (let batch = 0; batch < 5; batch++) {
      await storage.writeResources(
        projectId,
        Array.from({ length: 500 }, (_, i) => ({
          op: 'create' as const,
          resource: {
            resourceType: 'Observation',
            id: `o${batch * 500 + i}`,
            status: 'final',
            code: { text: 'multi-instance test observation' },
            subject: { reference: 'Patient/p1' },
          },
        })),
      );
    }
    const started = await Promise.all(
      (['A', 'B', 'C'] as const).map((name) => startInstance(name, connectionString, schema)),
    );
    for (const instance of started) instances[instance.name as 'A' | 'B' | 'C'] = instance;
    const secret = (client as { secret?: string }).secret!;
    clientId = client.id;
    const res = await fetch(`${instances.A.origin}/oauth2/token`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${Buffer.from(`${client.id}:${secret}`).toString('base64')}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'project:admin system/*.*' }),
    });
    expect(res.status).toBe(200);
    token = ((await res.json()) as { access_token: string }).access_token;
  });

  afterAll(async () => {
    await Promise.all(
      Object.values(instances).map(
        (instance) =>
          new Promise<void>((resolve) => {
            if (instance.process.exitCode !== null || instance.process.signalCode !== null) return resolve();
            instance.process.once('exit', () => resolve());
            instance.process.kill('SIGTERM');
          }),
      ),
    );
    await storage?.close();
    await admin?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin?.end();
  });

  describe('several instances on one PostgreSQL', () => {
    it('kick-off on A; status, manifest and downloads (gzip, Range) on B and C', async () => {
      const expected = await expectedIds();
      const status = await kickoff(instances.A);
      const manifest = await manifestOn(instances.B, status);
      expect(await manifestOn(instances.C, status)).toEqual(manifest);
      expect(await idsOf(instances.C, manifest)).toEqual(expected);
      // A range across two stored chunks (16 KiB each here) of a file of several.
      const big = manifest.output.find((o) => o.type === 'Observation')!;
      const whole = Buffer.from(await (await call(instances.B, big.url)).arrayBuffer());
      expect(whole.length).toBeGreaterThan(40_000);
      const part = await call(instances.C, big.url, { headers: { range: 'bytes=16300-32800' } });
      expect(part.status).toBe(206);
      expect(part.headers.get('content-range')).toBe(`bytes 16300-32800/${whole.length}`);
      expect(Buffer.from(await part.arrayBuffer())).toEqual(whole.subarray(16300, 32801));
      // Resumed on another instance than the one that sent the start: the same strong ETag everywhere.
      const plain = await call(instances.B, big.url, { headers: { 'accept-encoding': 'identity' } });
      const tag = plain.headers.get('etag')!;
      await plain.arrayBuffer();
      const resumed = await call(instances.C, big.url, {
        headers: { range: 'bytes=16300-', 'if-range': tag },
      });
      expect(resumed.status).toBe(206);
      expect(resumed.headers.get('etag')).toBe(tag);
      expect(Buffer.from(await resumed.arrayBuffer())).toEqual(whole.subarray(16300));
      const past = await call(instances.A, big.url, { headers: { range: `bytes=${whole.length}-` } });
      expect(past.status).toBe(416);
      expect(past.headers.get('content-range')).toBe(`bytes */${whole.length}`);
      // Any instance deletes it; then no instance knows it, and its files are gone from the database.
      expect((await call(instances.B, status, { method: 'DELETE' })).status).toBe(202);
      for (const instance of Object.values(instances))
        expect((await call(instance, status)).status).toBe(404);
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".export_files`,
      );
      expect(rows[0]!.n).toBe(0);
    });

    it('concurrent SCIM creates of one userName through all three: one 201, the others 409', async () => {
      const body = JSON.stringify({
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        userName: 'same@example.org',
        userType: 'Patient',
      });
      const answers = await Promise.all(
        Array.from({ length: 9 }, (_, i) =>
          call(instances[(['A', 'B', 'C'] as const)[i % 3]!], '/scim/v2/Users', {
            method: 'POST',
            headers: { 'content-type': 'application/scim+json' },
            body,
          }),
        ),
      );
      const statuses = answers.map((res) => res.status).sort();
      expect(statuses).toEqual([201, 409, 409, 409, 409, 409, 409, 409, 409]);
      for (const res of answers.filter((r) => r.status === 409)) {
        expect(((await res.json()) as { scimType?: string }).scimType).toBe('uniqueness');
      }
    });

    it('a DELETE on C stops the export running on B', async () => {
      await fetch(`${instances.B.origin}/test/slow/200`, { method: 'POST' });
      try {
        const status = await kickoff(instances.B);
        const jobId = status.split('/').pop()!;
        // Created under B's lease (the instance that accepted it runs it), and B's worker has
        // written part of it.
        expect(await leaseHolder(jobId)).toBe('B');
        await waitFor('the export running on B', async () => {
          const res = await call(instances.A, status);
          expect(res.status).toBe(202);
          return /^[1-9]\d* resources/.test(res.headers.get('x-progress') ?? '') ? true : undefined;
        });
        expect(await leaseHolder(jobId)).toBe('B');
        expect((await call(instances.C, status, { method: 'DELETE' })).status).toBe(202);
        const stoppedAt = Date.now();
        await waitFor(
          'B to stop the export',
          async () =>
            (await busyConnections('B')) === 0 && (await busyConnections('B')) === 0 ? true : undefined,
          HEARTBEAT_MS * 10,
        );
        expect(Date.now() - stoppedAt).toBeLessThan(HEARTBEAT_MS * 10);
        for (const instance of Object.values(instances))
          expect((await call(instance, status)).status).toBe(404);
        const { rows } = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM "${schema}".export_files`,
        );
        expect(rows[0]!.n).toBe(0);
        expect(instances.B.errors.join('')).toBe('');
      } finally {
        await fetch(`${instances.B.origin}/test/slow/0`, { method: 'POST' });
      }
    });

    it('failed logins spread over the three instances count against one limit', async () => {
      const wrongSecret = (instance: Instance) =>
        fetch(`${instance.origin}/oauth2/token`, {
          method: 'POST',
          headers: {
            authorization: `Basic ${Buffer.from(`${clientId}:not-the-secret`).toString('base64')}`,
            'content-type': 'application/x-www-form-urlencoded',
          },
          body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'system/*.rs' }),
        });
      const all = [instances.A, instances.B, instances.C];
      // Each instance alone sees fewer failures than the limit; together they reach it.
      for (let i = 0; i < MAX_FAILURES; i++) {
        const res = await wrongSecret(all[i % 3]!);
        expect(res.status).toBe(401);
        expect(((await res.json()) as { error: string }).error).toBe('invalid_client');
      }
      for (const instance of all) {
        const res = await wrongSecret(instance);
        expect(res.status).toBe(429);
        expect(((await res.json()) as { error: string }).error).toBe('slow_down');
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      }
    });

    it(
      'A killed mid-export: another instance takes the job over after the lease and completes it, every resource once',
      { timeout: 60_000 + 3 * LEASE_MS },
      async () => {
        // Every instance slow, so that the one taking over is seen holding the job before it ends.
        await slow(50, instances.A, instances.B, instances.C);
        const expected = await expectedIds();
        const status = await kickoff(instances.A);
        const jobId = status.split('/').pop()!;
        const job = await storage.readExportJob(projectId, jobId);
        expect(await leaseHolder(jobId)).toBe('A');
        // A has written some files (progress persisted every second) but is far from done.
        await waitFor('A to write part of the export', async () => {
          const res = await call(instances.B, status);
          expect(res.status).toBe(202);
          return /^[1-9]\d* resources/.test(res.headers.get('x-progress') ?? '') ? true : undefined;
        });
        expect(await leaseHolder(jobId)).toBe('A');
        // Written after the kick-off: not in the export, whoever finishes it.
        await storage.createResource(projectId, { resourceType: 'Observation', id: 'late' });
        instances.A.process.kill('SIGKILL');
        const killedAt = Date.now();
        const heir = await waitFor('another instance to take the job over', async () => {
          const holder = await leaseHolder(jobId);
          return holder === 'B' || holder === 'C' ? holder : undefined;
        });
        const takeover = Date.now() - killedAt;
        // Not before A's lease ran out (less one heartbeat: A renewed it at most that long before).
        expect(takeover).toBeGreaterThanOrEqual(LEASE_MS - HEARTBEAT_MS);
        await slow(0, instances.B, instances.C);
        const manifest = await manifestOn(instances.B, status);
        console.info(
          `multi-instance: SIGKILL to takeover by ${heir}: ${takeover} ms, to completed manifest: ${Date.now() - killedAt} ms`,
        );
        expect(manifest.transactionTime).toBe(job.transactionTime);
        expect(await idsOf(instances.C, manifest)).toEqual(expected);
        const done = await storage.readExportJob(projectId, jobId);
        expect(done.transactionTime).toBe(job.transactionTime);
        expect(done.snapshot).toEqual(job.snapshot);
      },
    );
  });
}
