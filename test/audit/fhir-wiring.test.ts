import fs from 'node:fs';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import type { AuditRecord } from '../../src/audit/events.js';
import type { AuditContext } from '../../src/audit/options.js';
import type { AuditTrail } from '../../src/audit/trail.js';
import { AUDITED_REFERENCES } from '../../src/fhir/audit/audit-activity.js';
import { ensureSuperAdminClient } from '../../src/auth/client/super-admin.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { fhirPlatform } from '../../src/platform.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import {
  createPlatformApp,
  FHIR_JSON,
  parameters,
  ROOT_ID,
  ROOT_SECRET,
  type PlatformTestApp,
} from '../helpers/platform-app.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { eventually } from '../helpers/eventually.js';
import { tempDir } from '../helpers/temp-dir.js';

const apps: PlatformTestApp[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

interface Seen {
  event: AuditEventResource;
  context: AuditContext;
}

/** A platform whose every event is kept, a project, and an admin client's token. */
async function setup() {
  const seen: Seen[] = [];
  const t = await createPlatformApp({
    audit: { onAudit: (event, context) => void seen.push({ event, context }) },
  });
  apps.push(t);
  const projectId = await t.initProject('Clinic');
  const client = await t.newClient(projectId, { name: 'ehr', admin: true });
  const auth = await t.bearer(client.id, client.secret);
  const post = (path: string, body: unknown) =>
    request(t.app)
      .post(`/fhir/R4${path}`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(body));
  const get = (path: string) => request(t.app).get(`/fhir/R4${path}`).set('Authorization', auth);
  const put = (path: string, body: unknown) =>
    request(t.app)
      .put(`/fhir/R4${path}`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(body));
  /** The FHIR data-plane events recorded since the last call. */
  const take = (): Seen[] => {
    const out = seen.filter(
      (s) => s.context.record.kind === 'fhir-write' || s.context.record.kind === 'fhir-access',
    );
    seen.length = 0;
    return out;
  };
  seen.length = 0;
  return { t, projectId, client, auth, post, get, put, take, seen };
}

const records = (seen: Seen[]): AuditRecord[] => seen.map((s) => s.context.record);
const decode = (base64: string | undefined) => Buffer.from(base64 ?? '', 'base64').toString('utf8');

describe('audit wiring: FHIR writes', () => {
  it('records one event per create, update and delete, with the reference, actor and address', async () => {
    const { projectId, client, post, put, take, t, auth } = await setup();
    const created = await post('/Patient', { resourceType: 'Patient', name: [{ family: 'Doe' }] });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const updated = await put(`/Patient/${id}`, { resourceType: 'Patient', id, name: [{ family: 'Roe' }] });
    expect(updated.status).toBe(200);
    const deleted = await request(t.app).delete(`/fhir/R4/Patient/${id}`).set('Authorization', auth);
    expect(deleted.status).toBe(204);

    const events = take();
    expect(records(events)).toMatchObject([
      { kind: 'fhir-write', interaction: 'create', references: [`Patient/${id}`] },
      { kind: 'fhir-write', interaction: 'update', references: [`Patient/${id}`] },
      { kind: 'fhir-write', interaction: 'delete', references: [`Patient/${id}`] },
    ]);
    for (const { context, event } of events) {
      expect(context.projectId).toBe(projectId);
      expect(context.record.actor).toEqual({ kind: 'client', id: client.id });
      expect(context.record.address).toMatch(/127\.0\.0\.1/);
      expect(event.type.code).toBe('110110');
      expect(event.entity?.[0]?.what?.reference).toBe(`Patient/${id}`);
    }
    expect(events.map((e) => e.event.action)).toEqual(['C', 'U', 'D']);
  });

  it('records a PATCH and a conditional update as updates, a conditional delete as a delete', async () => {
    const { post, put, take, t, auth } = await setup();
    const created = await post('/Patient', {
      resourceType: 'Patient',
      identifier: [{ system: 'urn:a', value: '1' }],
    });
    const id = created.body.id as string;
    take();
    const patched = await request(t.app)
      .patch(`/fhir/R4/Patient/${id}`)
      .set('Authorization', auth)
      .type('application/json-patch+json')
      .send(JSON.stringify([{ op: 'add', path: '/active', value: true }]));
    expect(patched.status).toBe(200);
    const upserted = await put('/Patient?identifier=urn:a|1', {
      resourceType: 'Patient',
      identifier: [{ system: 'urn:a', value: '1' }],
    });
    expect(upserted.status).toBe(200);
    const deleted = await request(t.app)
      .delete('/fhir/R4/Patient?identifier=urn:a|1')
      .set('Authorization', auth);
    expect(deleted.status).toBe(204);
    const events = take();
    expect(records(events)).toMatchObject([
      { kind: 'fhir-write', interaction: 'update', references: [`Patient/${id}`] },
      { kind: 'fhir-write', interaction: 'update', references: [`Patient/${id}`] },
      { kind: 'fhir-write', interaction: 'delete', references: [`Patient/${id}`], count: 1 },
    ]);
    expect(events.map((e) => e.event.action)).toEqual(['U', 'U', 'D']);
  });

  it('records nothing for a write refused with a protocol error', async () => {
    const { post, put, take } = await setup();
    expect((await post('/Patient', { resourceType: 'Observation' })).status).toBe(400);
    expect((await put('/Patient/a', { resourceType: 'Patient', id: 'b' })).status).toBe(400);
    expect((await post('/Patient', '{"resourceType":')).status).toBe(400);
    expect(take()).toEqual([]);
  });

  it('records a transaction as one event per interaction, its references bounded and counted', async () => {
    const { post, take } = await setup();
    const n = AUDITED_REFERENCES + 5;
    const entry = Array.from({ length: n }, (_, i) => ({
      fullUrl: `urn:uuid:00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      resource: { resourceType: 'Observation', status: 'final', code: { text: `obs ${i}` } },
      request: { method: 'POST', url: 'Observation' },
    }));
    entry.push({
      fullUrl: 'urn:uuid:10000000-0000-4000-8000-000000000000',
      resource: { resourceType: 'Patient', id: 'kept', name: [{ family: 'Kept' }] } as never,
      request: { method: 'PUT', url: 'Patient/kept' },
    });
    const res = await post('', { resourceType: 'Bundle', type: 'transaction', entry });
    expect(res.status).toBe(200);
    const events = take();
    expect(events).toHaveLength(2);
    const [creates, updates] = records(events) as [
      Extract<AuditRecord, { kind: 'fhir-write' }>,
      Extract<AuditRecord, { kind: 'fhir-write' }>,
    ];
    expect(creates).toMatchObject({ interaction: 'create', count: n });
    expect(creates.references).toHaveLength(AUDITED_REFERENCES);
    expect(creates.references.every((r) => /^Observation\/[0-9a-f-]{36}$/.test(r))).toBe(true);
    expect(updates).toMatchObject({ interaction: 'update', references: ['Patient/kept'], count: 1 });
    // The event says how many were written beyond the references it names.
    const countEntity = events[0]!.event.entity?.find((e) => e.detail?.some((d) => d.type === 'count'));
    expect(countEntity?.detail).toEqual([{ type: 'count', valueString: String(n) }]);
  });

  it('records nothing for a transaction that failed, and only the applied entries of a batch', async () => {
    const { post, take } = await setup();
    const failed = await post('', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { resource: { resourceType: 'Patient' }, request: { method: 'POST', url: 'Patient' } },
        { request: { method: 'DELETE', url: 'Patient/never-was' } },
      ],
    });
    expect(failed.status).toBe(404);
    expect(take()).toEqual([]);
    const batch = await post('', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        { resource: { resourceType: 'Patient' }, request: { method: 'POST', url: 'Patient' } },
        { request: { method: 'DELETE', url: 'Patient/never-was' } },
        { resource: { resourceType: 'Patient', id: 'x' }, request: { method: 'PUT', url: 'Patient/y' } },
      ],
    });
    expect(batch.status).toBe(200);
    const id = (batch.body.entry[0].response.location as string).split('/')[1];
    expect(records(take())).toMatchObject([
      { kind: 'fhir-write', interaction: 'create', references: [`Patient/${id}`], count: 1 },
    ]);
  });

  it('records an NDJSON upload as one event per interaction', async () => {
    const { t, auth, take } = await setup();
    const lines = [
      '{"resourceType":"Patient","id":"u1"}',
      '{"resourceType":"Observation","status":"final","code":{"text":"a"},"subject":{"reference":"Patient/u1"}}',
      'not json',
      '{"resourceType":"Observation","status":"final","code":{"text":"b"}}',
    ];
    const res = await request(t.app)
      .post('/fhir/R4')
      .set('Authorization', auth)
      .attach('f', Buffer.from(lines.join('\n')), {
        filename: 'a.ndjson',
        contentType: 'application/fhir+ndjson',
      });
    expect(res.status).toBe(200);
    const events = records(take()) as Extract<AuditRecord, { kind: 'fhir-write' }>[];
    expect(events.map((e) => [e.interaction, e.count])).toEqual([
      ['create', 2],
      ['update', 1],
    ]);
    expect(events[0]!.references).toHaveLength(2);
    expect(events[1]!.references).toEqual(['Patient/u1']);
  });
});

describe('audit wiring: FHIR reads and searches of patient data', () => {
  it('records a read with its reference and patient, a search with its query: one event per request', async () => {
    const { post, get, take, t } = await setup();
    const pat = await post('/Patient', { resourceType: 'Patient' });
    const pid = pat.body.id as string;
    for (let i = 0; i < 3; i++) {
      const obs = await post('/Observation', {
        resourceType: 'Observation',
        status: 'final',
        code: { text: `o${i}` },
        subject: { reference: `Patient/${pid}` },
      });
      expect(obs.status).toBe(201);
    }
    const org = await post('/Organization', { resourceType: 'Organization', name: 'Acme' });
    take();

    const read = await get(`/Observation?subject=Patient/${pid}&_count=2`);
    expect(read.status).toBe(200);
    expect(read.body.entry).toHaveLength(2);
    const obsId = read.body.entry[0].resource.id as string;
    const version = read.body.entry[0].resource.meta.versionId as string;
    expect((await get(`/Observation/${obsId}`)).status).toBe(200);
    expect((await get(`/Observation/${obsId}/_history/${version}`)).status).toBe(200);
    // Not patient-compartment data: no event.
    expect((await get(`/Organization/${org.body.id as string}`)).status).toBe(200);
    expect((await get('/Organization?name=Acme')).status).toBe(200);

    const events = take();
    expect(records(events)).toMatchObject([
      {
        kind: 'fhir-access',
        interaction: 'search-type',
        resourceType: 'Observation',
        query: `subject=Patient/${pid}&_count=2`,
        count: 2,
        patientIds: [pid],
      },
      { kind: 'fhir-access', interaction: 'read', reference: `Observation/${obsId}`, patientIds: [pid] },
      {
        kind: 'fhir-access',
        interaction: 'vread',
        reference: `Observation/${obsId}/_history/${version}`,
        patientIds: [pid],
      },
    ]);
    const [search, readEvent] = events.map((e) => e.event) as [AuditEventResource, AuditEventResource];
    // Search: a Query (E) with the query base64 in entity.query; read: Patient Record (R).
    expect([search.type.code, search.action]).toEqual(['110112', 'E']);
    expect(decode(search.entity?.find((e) => e.query !== undefined)?.query)).toBe(
      `subject=Patient/${pid}&_count=2`,
    );
    expect(search.entity?.some((e) => e.what?.reference === `Observation/${obsId}`)).toBe(false);
    expect([readEvent.type.code, readEvent.action]).toEqual(['110110', 'R']);
    expect(readEvent.entity?.map((e) => e.what?.reference)).toEqual([
      `Observation/${obsId}`,
      `Patient/${pid}`,
    ]);

    // Stored in the project, as AuditEvents.
    await t.platform.close();
    const stored = await t.storage.searchResources(events[0]!.context.projectId!, 'AuditEvent', {});
    expect(
      stored.resources.filter((r) => (r.subtype as { code: string }[])[0]?.code === 'search-type'),
    ).toHaveLength(1);
  });

  it('records the GET entries of a batch, one event each', async () => {
    const { post, take } = await setup();
    const pat = await post('/Patient', { resourceType: 'Patient' });
    const pid = pat.body.id as string;
    take();
    const res = await post('', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        { request: { method: 'GET', url: `Patient/${pid}` } },
        { request: { method: 'GET', url: `Patient?_id=${pid}` } },
        { request: { method: 'GET', url: 'Patient/missing' } },
      ],
    });
    expect(res.status).toBe(200);
    expect(records(take())).toMatchObject([
      { kind: 'fhir-access', interaction: 'read', reference: `Patient/${pid}`, patientIds: [pid] },
      { kind: 'fhir-access', interaction: 'search-type', query: `_id=${pid}`, count: 1, patientIds: [pid] },
    ]);
  });
});

describe('audit wiring: $everything', () => {
  it('records each page, over HTTP and as a batch entry, as a search of Patient naming its patients', async () => {
    const { post, get, take } = await setup();
    const pat = await post('/Patient', { resourceType: 'Patient' });
    const pid = pat.body.id as string;
    const obs = await post('/Observation', {
      resourceType: 'Observation',
      status: 'final',
      code: { text: 'x' },
      subject: { reference: `Patient/${pid}` },
    });
    expect(obs.status).toBe(201);
    take();
    expect((await get(`/Patient/${pid}/$everything?_type=Patient,Observation`)).status).toBe(200);
    const batch = await post('', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [{ request: { method: 'GET', url: `Patient/${pid}/$everything?_count=1` } }],
    });
    expect(batch.status).toBe(200);
    const expected = {
      kind: 'fhir-access',
      interaction: 'search-type',
      resourceType: 'Patient',
      patientIds: [pid],
    };
    expect(records(take())).toMatchObject([
      { ...expected, query: '$everything?_type=Patient%2CObservation', count: 2 },
      { ...expected, query: '$everything', count: 1 },
    ]);
  });
});

describe('audit wiring: FHIR history reads', () => {
  it('records a history page as one search event per patient-compartment type it holds', async () => {
    const { post, put, get, take } = await setup();
    const pat = await post('/Patient', { resourceType: 'Patient' });
    const pid = pat.body.id as string;
    await put(`/Patient/${pid}`, { resourceType: 'Patient', id: pid, active: true });
    await post('/Observation', {
      resourceType: 'Observation',
      status: 'final',
      code: { text: 'x' },
      subject: { reference: `Patient/${pid}` },
    });
    await post('/Organization', { resourceType: 'Organization', name: 'Acme' });
    take();
    expect((await get(`/Patient/${pid}/_history/1`)).status).toBe(200);
    expect((await get(`/Patient/${pid}/_history?_count=5`)).status).toBe(200);
    expect((await get('/_history')).status).toBe(200);
    expect(records(take())).toMatchObject([
      {
        kind: 'fhir-access',
        interaction: 'vread',
        reference: `Patient/${pid}/_history/1`,
        patientIds: [pid],
      },
      {
        kind: 'fhir-access',
        interaction: 'search-type',
        resourceType: 'Patient',
        query: '_history?_count=5',
        count: 2,
      },
      // The project's history: Observation and Patient (newest first), no event for Organization.
      {
        kind: 'fhir-access',
        interaction: 'search-type',
        resourceType: 'Observation',
        count: 1,
        patientIds: [pid],
      },
      {
        kind: 'fhir-access',
        interaction: 'search-type',
        resourceType: 'Patient',
        count: 2,
        patientIds: [pid],
      },
    ]);
  });
});

describe('audit wiring: FHIR router without the platform', () => {
  it('never fails a request when the trail throws: the error goes to onError', async () => {
    const storage = memoryStorage();
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    const errors: unknown[] = [];
    const trail: AuditTrail = {
      enabled: true,
      record: () => {
        throw new Error('journal full');
      },
      flush: () => Promise.resolve(),
      sweep: () => Promise.resolve(0),
      close: () => Promise.resolve(),
    };
    const app = express();
    app.use(
      '/fhir',
      fhirRouter({
        storage,
        authenticate: testAuthenticate,
        auditTrail: trail,
        onError: (e) => void errors.push(e),
      }),
    );
    const token = testToken({ projectId: 'p1' });
    const created = await request(app)
      .post('/fhir/Patient')
      .set('Authorization', token)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Patient' }));
    expect(created.status).toBe(201);
    const read = await request(app)
      .get(`/fhir/Patient/${created.body.id as string}`)
      .set('Authorization', token);
    expect(read.status).toBe(200);
    expect(errors.map((e) => (e as Error).message)).toEqual(['journal full', 'journal full']);
    await storage.close();
  });

  it('records nothing without a trail, or with a disabled one', async () => {
    const storage = memoryStorage();
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    const calls: unknown[] = [];
    const disabled: AuditTrail = {
      enabled: false,
      record: (r) => void calls.push(r),
      flush: () => Promise.resolve(),
      sweep: () => Promise.resolve(0),
      close: () => Promise.resolve(),
    };
    const app = express();
    app.use('/fhir', fhirRouter({ storage, authenticate: testAuthenticate, auditTrail: disabled }));
    const created = await request(app)
      .post('/fhir/Patient')
      .set('Authorization', testToken({ projectId: 'p1' }))
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Patient' }));
    expect(created.status).toBe(201);
    expect(calls).toEqual([]);
    await storage.close();
  });
});

describe('audit wiring: FHIR on the file store', () => {
  it('stores the events of a read and a search, which an auditor then finds through the FHIR API', async () => {
    const dir = tempDir('fpk-audit-file-');
    const storage = await fileStorage({ dir: path.join(dir, 'store'), durability: 'write' });
    await ensureSuperAdminClient(storage, { clientId: ROOT_ID, clientSecret: ROOT_SECRET });
    const platform = fhirPlatform({
      storage,
      bulk: false,
      baseUrl: 'http://fhir.test',
      onError: () => undefined,
      audit: { flushIntervalMs: 5 },
    });
    const app = express();
    app.use(platform.router);
    try {
      const token = async (id: string, secret: string, scope?: string) => {
        const res = await request(app)
          .post('/oauth2/token')
          .auth(id, secret)
          .type('form')
          .send({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        return `Bearer ${res.body.access_token as string}`;
      };
      const root = await token(ROOT_ID, ROOT_SECRET);
      const admin = (path: string, body: unknown) =>
        request(app).post(path).set('Authorization', root).type(FHIR_JSON).send(JSON.stringify(body));
      const init = await admin('/fhir/R4/Project/$init', parameters({ name: 'Files' }));
      expect(init.status, JSON.stringify(init.body)).toBe(201);
      const projectId = init.body.id as string;
      const registered = await admin(
        `/fhir/R4/Project/${projectId}/$new-client`,
        parameters({ name: 'ehr', admin: true }),
      );
      expect(registered.status, JSON.stringify(registered.body)).toBe(201);
      const client = registered.body as { id: string; secret: string };
      const ehr = await token(client.id, client.secret);
      const created = await request(app)
        .post('/fhir/R4/Patient')
        .set('Authorization', ehr)
        .type(FHIR_JSON)
        .send(JSON.stringify({ resourceType: 'Patient' }));
      const pid = created.body.id as string;
      expect((await request(app).get(`/fhir/R4/Patient/${pid}`).set('Authorization', ehr)).status).toBe(200);
      expect((await request(app).get(`/fhir/R4/Patient?_id=${pid}`).set('Authorization', ehr)).status).toBe(
        200,
      );

      const auditor = await token(client.id, client.secret, 'project:admin system/AuditEvent.rs');
      /** AuditEvents matching `query`, once `ready` says they are all there (they are written in batches). */
      const find = async (
        query: string,
        ready = (found: AuditEventResource[]) => found.length > 0,
      ): Promise<AuditEventResource[]> => {
        return eventually(`AuditEvents of ${query}`, async () => {
          const res = await request(app).get(`/fhir/R4/AuditEvent?${query}`).set('Authorization', auditor);
          expect(res.status).toBe(200);
          const found = ((res.body.entry ?? []) as { resource: AuditEventResource }[]).map((e) => e.resource);
          return ready(found) && found;
        });
      };
      const queryOf = (e: AuditEventResource) => decode(e.entity?.find((x) => x.query !== undefined)?.query);
      const [read] = await find(`action=R&entity=Patient/${pid}`);
      expect(read?.subtype?.[0]?.code).toBe('read');
      expect(read?.agent[0]?.who?.identifier?.value).toBe(client.id);
      const [created1] = await find(`action=C&entity=Patient/${pid}`);
      expect(created1?.type.code).toBe('110110');
      // The Patient search, and the auditor's own searches of the trail (AuditEvent is patient data).
      const expected = [`_id=${pid}`, `action=R&entity=Patient/${pid}`];
      const searches = await find(`type=110112&patient=${pid}`, (found) =>
        expected.every((q) => found.map(queryOf).includes(q)),
      );
      expect(searches.map(queryOf)).toEqual(expect.arrayContaining(expected));
    } finally {
      await platform.close();
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
