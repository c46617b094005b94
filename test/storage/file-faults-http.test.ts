import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { DirectoryExportFiles } from '../../src/bulk/directory-export-files.js';
import type { ExportFileStore, Storage } from '../../src/storage/types.js';
import { eventually } from '../helpers/eventually.js';
import { errnoError, FaultPlan, openFaultyStore } from '../helpers/file-faults.js';
import {
  createPlatformApp,
  FHIR_JSON,
  ROOT_ID,
  ROOT_SECRET,
  type PlatformTestApp,
} from '../helpers/platform-app.js';
import { expectOAuthError, expectOperationOutcome, expectScimError } from '../helpers/protocol-errors.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * Disk faults under the whole platform on a file store: each route answers 503 in its protocol
 * (FHIR OperationOutcome `transient`, SCIM Error, OAuth `temporarily_unavailable`, each with
 * `Retry-After`), the next request after the fault clears succeeds without a restart, and what was
 * acknowledged is there after a reopen. Faults go through the store's internal `FaultHook`
 * (see file-faults.test.ts for the store alone).
 */

interface Setup {
  t: PlatformTestApp;
  plan: FaultPlan;
  dir: string;
}

const apps: PlatformTestApp[] = [];
afterEach(async () => {
  for (const t of apps.splice(0)) await t.close().catch(() => undefined);
});

async function setup(exportFiles?: (dir: string) => ExportFileStore): Promise<Setup> {
  const dir = path.join(tempDir('fpk-faults-http-'), 'store');
  const plan = new FaultPlan();
  const storage = await openFaultyStore(dir, plan, { durability: 'fsync' });
  const t = await createPlatformApp(
    exportFiles ? { bulk: { exportFiles: exportFiles(path.join(dir, '..', 'exports')) } } : {},
    storage,
  );
  apps.push(t);
  return { t, plan, dir };
}

/** Closes the platform and its store, and opens the store again without faults. */
async function reopened({ t, dir }: Setup): Promise<Storage> {
  await t.platform.close();
  await t.storage.close();
  const storage = await openFaultyStore(dir);
  apps.push({ close: () => storage.close() } as PlatformTestApp);
  return storage;
}

function expectRetryAfter(res: request.Response): void {
  expect(res.headers['retry-after']).toBe('1');
}

const patient = (id: string) => ({ resourceType: 'Patient', id, name: [{ family: id }] });

describe('FHIR routes on a full disk', () => {
  it('a write answers 503 transient; reads go on; the next write after the fault succeeds; nothing acknowledged is lost', async () => {
    const s = await setup();
    const { t, plan } = s;
    const projectId = await t.initProject('Acme');
    const client = await t.newClient(projectId, { name: 'app', scope: 'system/*.*' });
    const auth = await t.bearer(client.id, client.secret);
    const put = (id: string) =>
      request(t.app)
        .put(`/fhir/R4/Patient/${id}`)
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(JSON.stringify(patient(id)));
    expect((await put('kept')).status).toBe(201);

    plan.fail({ op: 'write', file: /Patient\.log$/, code: 'ENOSPC', tear: true });
    const refused = await put('refused');
    expectOperationOutcome(refused, 503, 'transient');
    expect(refused.body.issue[0].severity).toBe('fatal');
    expectRetryAfter(refused);
    // A transaction fails as a whole, in the same shape.
    const bundle = await request(t.app)
      .post('/fhir/R4')
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(
        JSON.stringify({
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [{ resource: patient('tx'), request: { method: 'PUT', url: 'Patient/tx' } }],
        }),
      );
    expectOperationOutcome(bundle, 503, 'transient');
    const read = await request(t.app).get('/fhir/R4/Patient/kept').set('Authorization', auth);
    expect(read.status).toBe(200);
    expect((await request(t.app).get('/fhir/R4/Patient/refused').set('Authorization', auth)).status).toBe(
      404,
    );

    plan.clear();
    expect((await put('after')).status).toBe(201);
    const storage = await reopened(s);
    const ids = (await storage.searchResources(projectId, 'Patient', { sort: '_id' })).resources.map(
      (r) => r.id,
    );
    expect(ids).toEqual(['after', 'kept']);
  });
});

describe('SCIM routes on a failing disk', () => {
  it('a user creation answers 503 SCIM Error; the next one succeeds; the refused user is absent after a reopen', async () => {
    const s = await setup();
    const { t, plan } = s;
    const projectId = await t.initProject('Acme');
    const admin = await t.newClient(projectId, { name: 'idp', scope: 'system/*.*', admin: true });
    const auth = await t.bearer(admin.id, admin.secret);
    const post = (userName: string) => t.scimUser(auth, userName);
    expect((await post('kept@acme.example')).status).toBe(201);

    plan.fail({ op: 'fsync', file: /batch\.log$/, code: 'EIO' });
    const refused = await post('refused@acme.example');
    expectScimError(refused, 503);
    expect(refused.body.scimType).toBeUndefined();
    expectRetryAfter(refused);

    plan.clear();
    expect((await post('after@acme.example')).status).toBe(201);
    const storage = await reopened(s);
    // ($init made the project's admin user too.)
    const names = (await storage.listUsers(projectId)).map((u) => u.userName);
    expect(names.filter((n) => n.endsWith('@acme.example')).sort()).toEqual([
      'after@acme.example',
      'kept@acme.example',
    ]);
  });
});

describe('the token endpoint on a failing disk', () => {
  it('answers 503 temporarily_unavailable while its signing key cannot be saved, then issues tokens', async () => {
    const s = await setup();
    const { t, plan } = s;
    // The first token request generates the signing key: a directory.json write.
    plan.fail({ op: 'fsync', file: /directory\.json\.tmp$/, code: 'EIO' });
    const refused = await t.tokenResponse(ROOT_ID, ROOT_SECRET);
    expectOAuthError(refused, 503, 'temporarily_unavailable');
    expect(refused.headers['cache-control']).toBe('no-store');
    expectRetryAfter(refused);
    expect(await t.storage.listSigningKeys()).toEqual([]);

    plan.clear();
    const res = await t.tokenResponse(ROOT_ID, ROOT_SECRET);
    expect(res.status).toBe(200);
    const [key] = await t.storage.listSigningKeys();
    const storage = await reopened(s);
    expect((await storage.listSigningKeys()).map((k) => k.kid)).toEqual([key!.kid]);
  });
});

describe('bulk export on a full disk', () => {
  async function kickoff(t: PlatformTestApp, auth: string): Promise<request.Response> {
    return request(t.app)
      .get('/fhir/R4/$export')
      .set('Authorization', auth)
      .set('Accept', 'application/fhir+json')
      .set('Prefer', 'respond-async');
  }

  /** The status answer once the job is over. */
  async function finished(t: PlatformTestApp, auth: string, location: string): Promise<request.Response> {
    const statusPath = new URL(location).pathname;
    return eventually('the export to end', async () => {
      const res = await request(t.app).get(statusPath).set('Authorization', auth);
      return res.status !== 202 && res;
    });
  }

  async function project(t: PlatformTestApp): Promise<{ projectId: string; auth: string }> {
    const projectId = await t.initProject('Acme');
    const client = await t.newClient(projectId, { name: 'app', scope: 'system/*.*' });
    const auth = await t.bearer(client.id, client.secret);
    for (const id of ['p1', 'p2'])
      await request(t.app)
        .put(`/fhir/R4/Patient/${id}`)
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(JSON.stringify(patient(id)))
        .expect(201);
    return { projectId, auth };
  }

  it('a kick-off whose snapshot or job cannot be written answers 503 transient and leaves no snapshot', async () => {
    const s = await setup();
    const { t, plan, dir } = s;
    const { auth } = await project(t);
    for (const rule of [
      { op: ['link', 'write'] as const, file: /snapshots/, code: 'ENOSPC' },
      { op: ['write'] as const, file: /jobs\.log$/, code: 'ENOSPC' },
    ]) {
      plan.fail({ ...rule, op: [...rule.op] });
      const refused = await kickoff(t, auth);
      expectOperationOutcome(refused, 503, 'transient');
      expectRetryAfter(refused);
      expect(fs.readdirSync(path.join(dir, 'snapshots'))).toEqual([]);
      plan.clear();
    }
    const accepted = await kickoff(t, auth);
    expect(accepted.status).toBe(202);
    const done = await finished(t, auth, accepted.headers['content-location'] as string);
    expect(done.status).toBe(200);
    expect((done.body as { output: { type: string; count: number }[] }).output).toContainEqual(
      expect.objectContaining({ type: 'Patient', count: 2 }),
    );
  });

  it('an export whose file write fails: the status answers the failure (transient), no file is left, the next export completes', async () => {
    let full = true;
    let exportRoot = '';
    const s = await setup((root) => {
      exportRoot = root;
      return diskFullExportFiles(new DirectoryExportFiles(root), () => full);
    });
    const { t } = s;
    const { auth } = await project(t);
    const accepted = await kickoff(t, auth);
    expect(accepted.status).toBe(202);
    const failed = await finished(t, auth, accepted.headers['content-location'] as string);
    expectOperationOutcome(failed, 500, 'transient');
    expect(fs.existsSync(exportRoot) ? fs.readdirSync(exportRoot, { recursive: true }) : []).toEqual([]);

    full = false;
    const retried = await kickoff(t, auth);
    const done = await finished(t, auth, retried.headers['content-location'] as string);
    expect(done.status).toBe(200);
    const [file] = (done.body as { output: { url: string }[] }).output;
    const lines = await request(t.app)
      .get(new URL(file!.url).pathname)
      .set('Authorization', auth)
      .buffer(true);
    expect(lines.status).toBe(200);
  });
});

describe('reads on a failing disk (EIO)', () => {
  it('a read answers 503 transient while the disk fails and 200 once it answers; the store stays usable', async () => {
    const s = await setup();
    const { t, plan } = s;
    const projectId = await t.initProject('Acme');
    const client = await t.newClient(projectId, { name: 'app', scope: 'system/*.*' });
    const auth = await t.bearer(client.id, client.secret);
    const put = (id: string) =>
      request(t.app)
        .put(`/fhir/R4/Patient/${id}`)
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(JSON.stringify(patient(id)));
    expect((await put('kept')).status).toBe(201);
    const read = () => request(t.app).get('/fhir/R4/Patient/kept').set('Authorization', auth);

    plan.fail({ op: 'read', file: /Patient\.log$/, code: 'EIO' });
    const refused = await read();
    expectOperationOutcome(refused, 503, 'transient');
    expectRetryAfter(refused);
    const search = await request(t.app).get('/fhir/R4/Patient?_id=kept').set('Authorization', auth);
    expectOperationOutcome(search, 503, 'transient');
    expectRetryAfter(search);
    expect(plan.injected.length).toBeGreaterThanOrEqual(2);

    plan.clear();
    const again = await read();
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject(patient('kept'));
    // Not marked damaged: writes and reads go on, and a reopen finds everything.
    expect((await put('after')).status).toBe(201);
    const storage = await reopened(s);
    expect((await storage.readResource(projectId, 'Patient', 'kept')).id).toBe('kept');
    expect((await storage.readResource(projectId, 'Patient', 'after')).id).toBe('after');
  });

  it('an export whose snapshot read fails: the status answers the failure (transient), no file is left, the next export completes', async () => {
    let exportRoot = '';
    const s = await setup((root) => {
      exportRoot = root;
      return new DirectoryExportFiles(root);
    });
    const { t, plan } = s;
    const projectId = await t.initProject('Acme');
    const client = await t.newClient(projectId, { name: 'app', scope: 'system/*.*' });
    const auth = await t.bearer(client.id, client.secret);
    for (const [type, id] of [
      ['Patient', 'p1'],
      ['Observation', 'o1'],
    ] as const) {
      await request(t.app)
        .put(`/fhir/R4/${type}/${id}`)
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(
          JSON.stringify({
            resourceType: type,
            id,
            ...(type === 'Observation' ? { status: 'final', code: { text: 'x' } } : {}),
          }),
        )
        .expect(201);
    }
    const kickoff = () =>
      request(t.app)
        .get('/fhir/R4/$export?_type=Patient,Observation')
        .set('Authorization', auth)
        .set('Prefer', 'respond-async');
    const finished = async (location: string): Promise<request.Response> => {
      const statusPath = new URL(location).pathname;
      return eventually('the export to end', async () => {
        const res = await request(t.app).get(statusPath).set('Authorization', auth);
        return res.status !== 202 && res;
      });
    };
    // The Patient file is written, then reading the Observation snapshot fails.
    plan.fail({ op: 'read', file: /snapshots.*Observation/, code: 'EIO' });
    const accepted = await kickoff();
    expect(accepted.status).toBe(202);
    const failed = await finished(accepted.headers['content-location'] as string);
    expectOperationOutcome(failed, 500, 'transient');
    expect(plan.injected.some((f) => f.op === 'read')).toBe(true);
    expect(fs.existsSync(exportRoot) ? fs.readdirSync(exportRoot, { recursive: true }) : []).toEqual([]);

    plan.clear();
    const retried = await kickoff();
    const done = await finished(retried.headers['content-location'] as string);
    expect(done.status).toBe(200);
    expect((done.body as { output: { type: string; count: number }[] }).output).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ type: 'Patient', count: 1 }),
        expect.objectContaining({ type: 'Observation', count: 1 }),
      ]),
    );
  });
});

describe('bulk export while the store fails', () => {
  it('a job whose end cannot be recorded: in progress while the store fails, then failed (transient), without a restart', async () => {
    const armed: { plan?: FaultPlan } = {};
    let exportRoot = '';
    const s = await setup((root) => {
      exportRoot = root;
      // The store fails from the export's first file write on: its end cannot be recorded.
      return diskFullExportFiles(new DirectoryExportFiles(root), () => {
        armed.plan?.fail({ op: 'write', file: /jobs\.log$/, code: 'ENOSPC' });
        return false;
      });
    });
    const { t } = s;
    const projectId = await t.initProject('Acme');
    const client = await t.newClient(projectId, { name: 'app', scope: 'system/*.*' });
    const auth = await t.bearer(client.id, client.secret);
    await request(t.app)
      .put('/fhir/R4/Patient/p1')
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(patient('p1')))
      .expect(201);
    armed.plan = s.plan;
    const accepted = await request(t.app)
      .get('/fhir/R4/$export')
      .set('Authorization', auth)
      .set('Prefer', 'respond-async')
      .expect(202);
    const statusPath = new URL(accepted.headers['content-location'] as string).pathname;
    // Once the store has failed to record the job's end (not after a fixed time), it is still running.
    await eventually('the store to fail the job record', () =>
      s.plan.injected.some((f) => f.op === 'write' && /jobs\.log$/.test(f.file)),
    );
    expect((await request(t.app).get(statusPath).set('Authorization', auth)).status).toBe(202);
    s.plan.clear();
    const res = await eventually('the export to end', async () => {
      const answer = await request(t.app).get(statusPath).set('Authorization', auth);
      return answer.status !== 202 && answer;
    });
    expectOperationOutcome(res, 500, 'transient');
    expect(fs.existsSync(exportRoot) ? fs.readdirSync(exportRoot, { recursive: true }) : []).toEqual([]);
    const jobId = statusPath.split('/').at(-1)!;
    const storage = await reopened(s);
    expect((await storage.readExportJob(projectId, jobId)).status).toBe('failed');
  });
});

/**
 * Export files on a disk that is full while `isFull()`: each write puts part of its data in the file,
 * then fails with ENOSPC, as a full disk does.
 */
function diskFullExportFiles(files: DirectoryExportFiles, isFull: () => boolean): ExportFileStore {
  return {
    sink: (ref) => {
      const sink = files.sink(ref);
      return {
        async create(name) {
          const handle = await sink.create(name);
          return {
            async write(data) {
              if (!isFull()) return handle.write(data);
              await handle.write(typeof data === 'string' ? data.slice(0, 10) : data.subarray(0, 10));
              throw errnoError('ENOSPC', 'write', path.join(files.jobDir(ref.jobId), `.${name}.part`));
            },
            commit: () => handle.commit(),
            abort: () => handle.abort(),
          };
        },
      };
    },
    size: (ref, name) => files.size(ref, name),
    read: (ref, name, range) => files.read(ref, name, range),
    bytes: (ref) => files.bytes(ref),
    remove: (ref) => files.remove(ref),
    jobIds: () => files.jobIds(),
    close: () => files.close(),
  };
}
