import http from 'node:http';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import type { DownloadEvent, ExportEvent } from '../../src/audit/events.js';
import type { AuditContext } from '../../src/audit/options.js';
import { ExportPool, type ExportRunOptions } from '../../src/bulk/export-pool.js';
import type { ExportTask, ExportTaskResult } from '../../src/bulk/export-task.js';
import { PlatformError } from '../../src/errors.js';
import type { FhirPlatformOptions } from '../../src/platform.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { eventually } from '../helpers/eventually.js';
import { listen } from '../helpers/listen.js';

const apps: PlatformTestApp[] = [];
const servers: http.Server[] = [];
const pools: ExportPool[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  for (const app of apps.splice(0)) await app.close();
  for (const pool of pools.splice(0)) await pool.close();
});

interface Seen {
  event: AuditEventResource;
  context: AuditContext;
}

const pathOf = (url: string) => {
  const u = new URL(url);
  return `${u.pathname}${u.search}`;
};

/** A pool whose first export fails as a crashed run does (a host's pool: closed after the test). */
class CrashFirstPool extends ExportPool {
  #runs = 0;
  constructor() {
    super();
    pools.push(this);
  }
  override run(task: ExportTask, options?: ExportRunOptions): Promise<ExportTaskResult> {
    if (++this.#runs === 1) return Promise.reject(new PlatformError('ERR_INTERNAL', 'Export crash (test)'));
    return super.run(task, options);
  }
}

/** A platform keeping every event, a project with a Group of two patients, an admin client. */
async function setup(bulk: FhirPlatformOptions['bulk'] = {}, observations = 40) {
  const seen: Seen[] = [];
  const t = await createPlatformApp({
    bulk,
    audit: { onAudit: (event, context) => void seen.push({ event, context }) },
  });
  apps.push(t);
  const projectId = await t.initProject('Exports');
  const client = await t.newClient(projectId, { name: 'etl', admin: true });
  const auth = await t.bearer(client.id, client.secret);
  const note = 'x'.repeat(2000);
  await t.storage.writeResources(projectId, [
    { op: 'update', resource: { resourceType: 'Patient', id: 'p1' } },
    { op: 'update', resource: { resourceType: 'Patient', id: 'p2' } },
    ...Array.from({ length: observations }, (_, i) => ({
      op: 'update' as const,
      resource: {
        resourceType: 'Observation',
        id: `o${i}`,
        status: 'final',
        code: { text: note },
        subject: { reference: `Patient/p${(i % 2) + 1}` },
      },
    })),
    {
      op: 'update',
      resource: {
        resourceType: 'Group',
        id: 'g1',
        type: 'person',
        actual: true,
        member: [{ entity: { reference: 'Patient/p1' } }, { entity: { reference: 'Patient/p2' } }],
      },
    },
  ]);
  const kickoff = (path: string) =>
    request(t.app)
      .get(`/fhir/R4${path}`)
      .set('Authorization', auth)
      .set('Accept', FHIR_JSON)
      .set('Prefer', 'respond-async');
  /** Polls the status until it is no longer 202. */
  const finished = async (statusPath: string) => {
    return eventually('the export to end', async () => {
      const res = await request(t.app).get(statusPath).set('Authorization', auth);
      return res.status !== 202 && res;
    });
  };
  const exports = () => seen.filter((s) => s.context.record.kind === 'export');
  const downloads = () => seen.filter((s) => s.context.record.kind === 'download');
  return { t, projectId, client, auth, kickoff, finished, exports, downloads, seen };
}

describe('audit wiring: bulk export', () => {
  it('records the kick-off (types, _since, Group) and the completion (counts) with the owner as agent', async () => {
    const { projectId, client, kickoff, finished, exports } = await setup();
    const since = '2020-01-01T00:00:00Z';
    const accepted = await kickoff(`/Group/g1/$export?_type=Patient,Observation&_since=${since}`);
    expect(accepted.status).toBe(202);
    const statusPath = pathOf(accepted.headers['content-location'] as string);
    const jobId = statusPath.split('/').pop()!;
    expect((await finished(statusPath)).status).toBe(200);

    const [start, done] = await eventually('the export events', () =>
      exports().length === 2 ? exports() : undefined,
    );
    expect(start!.context.record).toMatchObject({
      kind: 'export',
      phase: 'kickoff',
      jobId,
      level: 'group',
      groupId: 'g1',
      types: ['Patient', 'Observation'],
      since,
      projectId,
      actor: { kind: 'client', id: client.id },
    });
    expect(start!.context.record.address).toMatch(/127\.0\.0\.1/);
    expect(start!.event.outcome).toBe('0');
    expect(start!.event.entity?.map((e) => e.what)).toEqual([
      { identifier: { system: 'urn:fhir-platform-kit:export-job', value: jobId } },
      { reference: 'Group/g1' },
    ]);
    // Completion happens outside any request: the agent is the owner, with no address.
    expect(done!.context.record).toMatchObject({
      kind: 'export',
      phase: 'completed',
      jobId,
      level: 'group',
      groupId: 'g1',
      counts: { Patient: 2, Observation: 40 },
      projectId,
      actor: { kind: 'client', id: client.id },
    });
    expect(done!.context.record.address).toBeUndefined();
    expect(done!.event.entity?.[0]?.detail).toContainEqual({ type: 'count:Observation', valueString: '40' });
  });

  it('records the Bulk Data 3.0 options of a kick-off: _until, organizeOutputBy, allowPartialManifests', async () => {
    const { kickoff, finished, exports } = await setup();
    const until = '2099-01-01T00:00:00Z';
    const accepted = await kickoff(
      `/Patient/$export?_type=Patient&_until=${until}&organizeOutputBy=Patient&allowPartialManifests=true`,
    );
    expect(accepted.status).toBe(202);
    expect((await finished(pathOf(accepted.headers['content-location'] as string))).status).toBe(200);
    const [start] = await eventually('the export events', () =>
      exports().length === 2 ? exports() : undefined,
    );
    expect(start!.context.record).toMatchObject({
      phase: 'kickoff',
      until,
      organizeOutputBy: 'Patient',
      allowPartialManifests: true,
    });
    expect(start!.event.entity?.[0]?.detail).toEqual(
      expect.arrayContaining([
        { type: '_until', valueString: until },
        { type: 'organizeOutputBy', valueString: 'Patient' },
        { type: 'allowPartialManifests', valueString: 'true' },
      ]),
    );
  });

  it('records a failure (outcome 8, the job owner as agent) and a cancel', async () => {
    const { t, auth, client, kickoff, finished, exports } = await setup({ pool: new CrashFirstPool() });
    const failedPath = pathOf(
      (await kickoff('/$export?_type=Patient')).headers['content-location'] as string,
    );
    expect((await finished(failedPath)).status).toBe(500);
    const failed = await eventually('the failed export event', () =>
      exports().find((s) => (s.context.record as ExportEvent).phase === 'failed'),
    );
    expect(failed.context.record).toMatchObject({
      phase: 'failed',
      level: 'system',
      types: ['Patient'],
      actor: { kind: 'client', id: client.id },
    });
    expect(failed.event.outcome).toBe('8');
    expect(failed.event.outcomeDesc).toMatch(/failed/);

    const okPath = pathOf((await kickoff('/Patient/$export')).headers['content-location'] as string);
    expect((await finished(okPath)).status).toBe(200);
    const cancelled = await request(t.app).delete(okPath).set('Authorization', auth);
    expect(cancelled.status).toBe(202);
    const cancel = exports().find((s) => (s.context.record as ExportEvent).phase === 'cancelled');
    expect(cancel?.context.record).toMatchObject({
      phase: 'cancelled',
      level: 'patient',
      jobId: okPath.split('/').pop(),
      actor: { kind: 'client', id: client.id },
    });
    expect(cancel?.context.record.address).toMatch(/127\.0\.0\.1/);
  });

  it('records a kick-off refused with a protocol error (400), with its status; no job', async () => {
    const { kickoff, exports } = await setup();
    const refused = await kickoff('/$export?_since=not-a-date');
    expect(refused.status).toBe(400);
    expect(refused.body.resourceType).toBe('OperationOutcome');
    const [event] = exports();
    expect(event?.context.record).toMatchObject({
      kind: 'export',
      phase: 'kickoff',
      level: 'system',
      status: 400,
    });
    expect((event?.context.record as ExportEvent).jobId).toBeUndefined();
    expect(event?.event.outcome).toBe('4');
    expect(event?.event.entity?.[0]?.what).toBeUndefined();
  });
});

describe('audit wiring: export file downloads', () => {
  async function exported(observations?: number) {
    const s = await setup({}, observations);
    const accepted = await s.kickoff('/$export?_type=Observation');
    const manifest = await s.finished(pathOf(accepted.headers['content-location'] as string));
    expect(manifest.status).toBe(200);
    const url = pathOf((JSON.parse(manifest.text) as { output: { url: string }[] }).output[0]!.url);
    return { ...s, url, file: url.split('/').pop()!, jobId: url.split('/').slice(-2)[0]! };
  }

  it('records one event per download with the file, the bytes sent and the Range', async () => {
    const { t, auth, url, file, jobId, downloads, client } = await exported();
    const whole = await request(t.app)
      .get(url)
      .set('Authorization', auth)
      .set('Accept-Encoding', 'identity')
      .buffer(true)
      .parse((res, done) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => done(null, Buffer.concat(chunks)));
      });
    expect(whole.status).toBe(200);
    const size = (whole.body as Buffer).length;
    expect(size).toBeGreaterThan(40 * 2000);
    // Recorded before the client could hold the whole answer: there as soon as the answer is.
    const first = downloads()[0]!;
    expect(first.context.record).toMatchObject({
      kind: 'download',
      jobId,
      file,
      bytes: size,
      actor: { kind: 'client', id: client.id },
    });
    expect((first.context.record as DownloadEvent).range).toBeUndefined();
    expect(first.event.outcome).toBe('0');

    const partial = await request(t.app).get(url).set('Authorization', auth).set('Range', 'bytes=100-1099');
    expect(partial.status).toBe(206);
    const ranged = downloads()[1]!;
    expect(ranged.context.record).toMatchObject({ file, bytes: 1000, range: 'bytes=100-1099' });
    expect(ranged.event.entity?.[0]?.detail).toEqual([
      { type: 'file', valueString: file },
      { type: 'bytes', valueString: '1000' },
      { type: 'range', valueString: 'bytes=100-1099' },
    ]);

    const unsatisfiable = await request(t.app)
      .get(url)
      .set('Authorization', auth)
      .set('Range', 'bytes=99999999-');
    expect(unsatisfiable.status).toBe(416);
    const refused = downloads()[2]!;
    expect(refused.context.record).toMatchObject({
      bytes: 0,
      range: 'bytes=99999999-',
      error: 'range not satisfiable',
    });
    expect(refused.event.outcome).toBe('4');

    // gzip: the bytes that went out are the compressed ones, fewer than the file's.
    const zipped = await request(t.app).get(url).set('Authorization', auth).set('Accept-Encoding', 'gzip');
    expect(zipped.status).toBe(200);
    expect(zipped.headers['content-encoding']).toBe('gzip');
    const gz = downloads()[3]!;
    expect((gz.context.record as DownloadEvent).bytes).toBeGreaterThan(0);
    expect((gz.context.record as DownloadEvent).bytes).toBeLessThan(size);
    expect(downloads()).toHaveLength(4);
  });

  it('records an aborted download with the bytes sent so far and a failed outcome', async () => {
    // About 20 MB: more than the connection buffers hold, so the client leaving cuts it short.
    const { t, auth, url, downloads } = await exported(10_000);
    const { server, port } = await listen(t.app);
    servers.push(server);
    // Read the head and one chunk, then go away: the rest of the file is never sent.
    const size = await new Promise<number>((resolve) => {
      const req = http.get(
        {
          host: '127.0.0.1',
          port,
          path: url,
          headers: { authorization: auth, 'accept-encoding': 'identity' },
        },
        (res) => {
          res.once('data', () => {
            req.destroy();
            resolve(Number(res.headers['content-length']));
          });
        },
      );
      req.on('error', () => undefined);
    });
    expect(size).toBeGreaterThan(15_000_000);
    const event = await eventually('the download event', () => downloads()[0]);
    const record = event.context.record as DownloadEvent;
    expect(record.error).toMatch(/aborted/);
    expect(record.bytes).toBeGreaterThan(0);
    expect(record.bytes).toBeLessThan(size);
    expect(event.event.outcome).toBe('4');
    expect(event.event.outcomeDesc).toMatch(/aborted/);
  });
});
