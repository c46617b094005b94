import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createAuditTrail } from '../../src/audit/trail.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';

const FHIR = '/fhir/R4';
const CLIENT_SYSTEM = 'urn:fhir-platform-kit:client';

describe('AuditEvent through the FHIR API', () => {
  let ctx: PlatformTestApp;
  let projectId: string;
  let otherId: string;
  let auditor: string; // project:admin + system/AuditEvent.rs
  let otherAuditor: string;
  let admin: { id: string; secret: string };
  const ids: Record<string, string> = {};

  beforeEach(async () => {
    // Only the seeded events: the platform itself records none here.
    ctx = await createPlatformApp({ audit: { enabled: false } });
    projectId = await ctx.initProject('Acme');
    otherId = await ctx.initProject('Other');
    admin = await ctx.newClient(projectId, { name: 'admin', scope: 'system/*.*', admin: true });
    const otherAdmin = await ctx.newClient(otherId, { name: 'admin', scope: 'system/*.*', admin: true });
    auditor = await ctx.bearer(admin.id, admin.secret, 'project:admin system/AuditEvent.rs');
    otherAuditor = await ctx.bearer(otherAdmin.id, otherAdmin.secret, 'project:admin system/AuditEvent.rs');

    const trail = createAuditTrail({ storage: ctx.storage, flushIntervalMs: 60_000 });
    const actor = { kind: 'client', id: 'reader-1' } as const;
    ids.read = trail.record({
      kind: 'fhir-access',
      interaction: 'read',
      projectId,
      actor,
      address: '10.1.2.3',
      resourceType: 'Patient',
      reference: 'Patient/pat-1',
      recorded: new Date('2026-03-01T10:00:00Z'),
    })!.id!;
    ids.search = trail.record({
      kind: 'fhir-access',
      interaction: 'search-type',
      projectId,
      actor: { kind: 'user', id: 'u-1', profile: 'Practitioner/pr-1' },
      resourceType: 'Observation',
      query: 'subject=Patient/pat-2',
      patientIds: ['pat-2'],
      recorded: new Date('2026-03-02T10:00:00Z'),
    })!.id!;
    ids.write = trail.record({
      kind: 'fhir-write',
      interaction: 'create',
      projectId,
      actor,
      references: ['Observation/obs-1'],
      recorded: new Date('2026-03-03T10:00:00Z'),
    })!.id!;
    ids.other = trail.record({
      kind: 'fhir-access',
      interaction: 'read',
      projectId: otherId,
      actor,
      resourceType: 'Patient',
      reference: 'Patient/pat-1',
      recorded: new Date('2026-03-01T10:00:00Z'),
    })!.id!;
    await trail.close();
  });
  afterEach(() => ctx.close());

  const search = async (query: string, auth = auditor): Promise<string[]> => {
    const res = await request(ctx.app).get(`${FHIR}/AuditEvent?${query}`).set('Authorization', auth);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const entries = (res.body.entry ?? []) as { resource: { resourceType: string; id: string } }[];
    return entries
      .filter((e) => e.resource.resourceType === 'AuditEvent')
      .map((e) => e.resource.id)
      .sort();
  };
  const sorted = (...list: (string | undefined)[]) => list.map(String).sort();

  it('searches by date, agent, entity, action, type, subtype, outcome and patient', async () => {
    expect(await search('')).toEqual(sorted(ids.read, ids.search, ids.write));
    expect(await search('date=2026-03-01')).toEqual([ids.read]);
    expect(await search('date=ge2026-03-02')).toEqual(sorted(ids.search, ids.write));
    expect(await search('date=ge2026-03-02&date=lt2026-03-03')).toEqual([ids.search]);
    expect(await search('date=2026-03-01,2026-03-03')).toEqual(sorted(ids.read, ids.write));
    expect(await search('agent=reader-1')).toEqual(sorted(ids.read, ids.write));
    expect(await search(`agent:identifier=${CLIENT_SYSTEM}|reader-1`)).toEqual(sorted(ids.read, ids.write));
    expect(await search('agent=Practitioner/pr-1')).toEqual([ids.search]);
    expect(await search('agent=u-1')).toEqual([ids.search]);
    expect(await search('entity=Patient/pat-1')).toEqual([ids.read]);
    expect(await search('entity=Observation/obs-1')).toEqual([ids.write]);
    expect(await search('patient=pat-2')).toEqual([ids.search]);
    expect(await search('action=R')).toEqual([ids.read]);
    expect(await search('action=C,E')).toEqual(sorted(ids.search, ids.write));
    expect(await search('type=110112')).toEqual([ids.search]);
    expect(await search('type=http://dicom.nema.org/resources/ontology/DCM|110110')).toEqual(
      sorted(ids.read, ids.write),
    );
    expect(await search('type=http://other.example|110110')).toEqual([]);
    expect(await search('subtype=http://hl7.org/fhir/restful-interaction|create')).toEqual([ids.write]);
    expect(await search('outcome=0&action=R&agent=reader-1')).toEqual([ids.read]);
  });

  it('pages with _count and next links', async () => {
    const res = await request(ctx.app)
      .get(`${FHIR}/AuditEvent?_count=2&_sort=_lastUpdated&_total=accurate`)
      .set('Authorization', auditor);
    expect(res.body.total).toBe(3);
    expect(res.body.entry).toHaveLength(2);
    const next = (res.body.link as { relation: string; url: string }[]).find((l) => l.relation === 'next');
    const url = new URL(next!.url);
    const page2 = await request(ctx.app).get(`${url.pathname}${url.search}`).set('Authorization', auditor);
    expect(page2.body.entry).toHaveLength(1);
  });

  it('answers 400 for malformed values and an unknown modifier, which handling=lenient ignores', async () => {
    for (const query of ['date=yesterday', 'date=ne2026-01-01', 'agent=a b']) {
      const res = await request(ctx.app).get(`${FHIR}/AuditEvent?${query}`).set('Authorization', auditor);
      expect(res.status, query).toBe(400);
      expect(res.body.resourceType).toBe('OperationOutcome');
    }
    const lenient = await request(ctx.app)
      .get(`${FHIR}/AuditEvent?type:text=Query&_total=accurate`)
      .set('Authorization', auditor)
      .set('Prefer', 'handling=lenient');
    expect(lenient.status).toBe(200);
    expect(lenient.body.total).toBe(3);
    const strict = await request(ctx.app)
      .get(`${FHIR}/AuditEvent?type:text=Query&_total=accurate`)
      .set('Authorization', auditor);
    expect(strict.status).toBe(400);
  });

  it('reads one event by id', async () => {
    const res = await request(ctx.app).get(`${FHIR}/AuditEvent/${ids.read}`).set('Authorization', auditor);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ resourceType: 'AuditEvent', id: ids.read, action: 'R' });
  });

  it('is never visible to another project', async () => {
    expect(await search('', otherAuditor)).toEqual([ids.other]);
    expect(await search('entity=Patient/pat-1', otherAuditor)).toEqual([ids.other]);
    const res = await request(ctx.app)
      .get(`${FHIR}/AuditEvent/${ids.read}`)
      .set('Authorization', otherAuditor);
    expect(res.status).toBe(404);
    expect(res.body.resourceType).toBe('OperationOutcome');
  });

  it('is readable only by project admins whose scopes name AuditEvent', async () => {
    const refused = async (auth: string) => {
      const list = await request(ctx.app).get(`${FHIR}/AuditEvent`).set('Authorization', auth);
      expect(list.status).toBe(403);
      expect(list.body.issue[0].code).toBe('forbidden');
      const one = await request(ctx.app).get(`${FHIR}/AuditEvent/${ids.read}`).set('Authorization', auth);
      expect(one.status).toBe(403);
    };
    // An admin's data token: system/*.* does not cover the trail.
    await refused(await ctx.bearer(admin.id, admin.secret, 'project:admin system/*.*'));
    // The scope without the admin role.
    await refused(await ctx.bearer(admin.id, admin.secret, 'system/AuditEvent.rs'));
    const plain = await ctx.newClient(projectId, { name: 'plain', scope: 'system/*.*' });
    await refused(await ctx.bearer(plain.id, plain.secret, 'system/AuditEvent.rs system/*.*'));
    // Search only: reading by id needs r.
    const searchOnly = await ctx.bearer(admin.id, admin.secret, 'project:admin system/AuditEvent.s');
    expect(await search('', searchOnly)).toHaveLength(3);
    const one = await request(ctx.app).get(`${FHIR}/AuditEvent/${ids.read}`).set('Authorization', searchOnly);
    expect(one.status).toBe(403);
  });

  describe('append-only', () => {
    const body = (id?: string) =>
      JSON.stringify({
        resourceType: 'AuditEvent',
        ...(id ? { id } : {}),
        type: { system: 'http://dicom.nema.org/resources/ontology/DCM', code: '110110' },
        recorded: '2026-01-01T00:00:00Z',
        agent: [{ requestor: true }],
        source: { observer: { display: 'forged' } },
      });
    const expect405 = (res: request.Response) => {
      expect(res.status).toBe(405);
      expect(res.headers.allow).toBe('GET');
      expect(res.body.resourceType).toBe('OperationOutcome');
      expect(res.body.issue[0].code).toBe('not-supported');
    };

    it('refuses create, update, delete and PATCH, even to an admin with every scope', async () => {
      const all = await ctx.bearer(
        admin.id,
        admin.secret,
        'project:admin system/*.* system/AuditEvent.cruds',
      );
      for (const auth of [all, auditor]) {
        expect405(
          await request(ctx.app)
            .post(`${FHIR}/AuditEvent`)
            .set('Authorization', auth)
            .type(FHIR_JSON)
            .send(body()),
        );
        expect405(
          await request(ctx.app)
            .put(`${FHIR}/AuditEvent/${ids.read}`)
            .set('Authorization', auth)
            .type(FHIR_JSON)
            .send(body(ids.read)),
        );
        expect405(await request(ctx.app).delete(`${FHIR}/AuditEvent/${ids.read}`).set('Authorization', auth));
      }
      const patch = await request(ctx.app)
        .patch(`${FHIR}/AuditEvent/${ids.read}`)
        .set('Authorization', all)
        .type('application/json-patch+json')
        .send('[]');
      expect(patch.status).toBe(405);
      expect(patch.body.resourceType).toBe('OperationOutcome');
      expect(await search('')).toEqual(sorted(ids.read, ids.search, ids.write));
      const still = await ctx.storage.readResource(projectId, 'AuditEvent', ids.read!);
      expect(still.meta.versionId).toBe('1');
    });

    it('refuses AuditEvent entries of batches and transactions, and NDJSON upload lines', async () => {
      const all = await ctx.bearer(
        admin.id,
        admin.secret,
        'project:admin system/*.* system/AuditEvent.cruds',
      );
      const entry = (method: string, url: string, resource?: string) => ({
        request: { method, url },
        ...(resource ? { resource: JSON.parse(resource) as unknown } : {}),
      });
      const batch = await request(ctx.app)
        .post(FHIR)
        .set('Authorization', all)
        .type(FHIR_JSON)
        .send(
          JSON.stringify({
            resourceType: 'Bundle',
            type: 'batch',
            entry: [entry('POST', 'AuditEvent', body()), entry('DELETE', `AuditEvent/${ids.read}`)],
          }),
        );
      expect(batch.status).toBe(200);
      for (const e of batch.body.entry) expect(e.response.status).toMatch(/^405/);
      const tx = await request(ctx.app)
        .post(FHIR)
        .set('Authorization', all)
        .type(FHIR_JSON)
        .send(
          JSON.stringify({
            resourceType: 'Bundle',
            type: 'transaction',
            entry: [entry('POST', 'AuditEvent', body())],
          }),
        );
      expect(tx.status).toBe(405);
      expect(tx.body.resourceType).toBe('OperationOutcome');

      const upload = await request(ctx.app)
        .post(FHIR)
        .set('Authorization', all)
        .attach('file', Buffer.from(`${body('forged-1')}\n`), {
          filename: 'a.ndjson',
          contentType: 'application/fhir+ndjson',
        });
      expect(upload.status).toBe(200);
      expect(JSON.stringify(upload.body)).toContain('append-only');
      await expect(ctx.storage.readResource(projectId, 'AuditEvent', 'forged-1')).rejects.toMatchObject({
        code: 'ERR_STORAGE_NOT_FOUND',
      });
      expect(await search('')).toEqual(sorted(ids.read, ids.search, ids.write));
    });

    it('the CapabilityStatement lists AuditEvent with reads, history and search only, and its parameters', async () => {
      const res = await request(ctx.app).get(`${FHIR}/metadata`);
      const entry = res.body.rest[0].resource.find((r: { type: string }) => r.type === 'AuditEvent');
      expect(entry.interaction.map((i: { code: string }) => i.code)).toEqual([
        'read',
        'vread',
        'history-instance',
        'history-type',
        'search-type',
      ]);
      const names = entry.searchParam.map((p: { name: string }) => p.name);
      for (const name of ['date', 'agent', 'entity', 'action', 'type', 'patient'])
        expect(names).toContain(name);
    });
  });
});
