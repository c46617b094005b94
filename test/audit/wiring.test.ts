import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import type { AuditContext } from '../../src/audit/options.js';
import { fhirPlatform } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import { createPlatformApp, SCIM_JSON, type PlatformTestApp } from '../helpers/platform-app.js';

const apps: PlatformTestApp[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

async function scimSetup(audit: Parameters<typeof fhirPlatform>[0]['audit']) {
  const t = await createPlatformApp({ audit });
  apps.push(t);
  const projectId = await t.initProject('Audited');
  const admin = await t.newClient(projectId, { name: 'idp', admin: true });
  const auth = await t.bearer(admin.id, admin.secret);
  return { t, projectId, admin, auth };
}

describe('audit wiring: SCIM users through fhirPlatform', () => {
  it('records create, update, deactivate and delete with the profile, actor and address', async () => {
    const seen: { event: AuditEventResource; context: AuditContext }[] = [];
    const { t, projectId, admin, auth } = await scimSetup({
      onAudit: (event, context) => {
        seen.push({ event, context });
      },
    });
    const created = await request(t.app)
      .post('/scim/v2/Users')
      .set('Authorization', auth)
      .type(SCIM_JSON)
      .send(JSON.stringify({ userName: 'jane@example.org', userType: 'Patient' }));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const user = (await t.storage.findUsers(projectId, { userName: 'jane@example.org' }))[0]!;
    const profile = `Patient/${user.profileId}`;

    const patch = (active: boolean) =>
      request(t.app)
        .patch(`/scim/v2/Users/${id}`)
        .set('Authorization', auth)
        .type(SCIM_JSON)
        .send(
          JSON.stringify({
            schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
            Operations: [{ op: 'replace', path: 'active', value: active }],
          }),
        );
    expect((await patch(true)).status).toBe(200);
    expect((await patch(false)).status).toBe(200);
    expect((await request(t.app).delete(`/scim/v2/Users/${id}`).set('Authorization', auth)).status).toBe(204);

    const scim = seen.filter((s) => s.context.record.kind === 'scim-user');
    expect(scim.map((s) => (s.context.record as { action: string }).action)).toEqual([
      'create',
      'update',
      'deactivate',
      'delete',
    ]);
    for (const { context } of scim) {
      expect(context.projectId).toBe(projectId);
      expect(context.record.actor).toEqual({ kind: 'client', id: admin.id });
      expect(context.record.address).toMatch(/127\.0\.0\.1/);
      expect((context.record as { userId: string }).userId).toBe(id);
    }
    expect((scim[0]!.context.record as { profile?: string }).profile).toBe(profile);
    // The event reaches the store as an AuditEvent of the project, naming the user and profile.
    await t.platform.close();
    const stored = await t.storage.searchResources(projectId, 'AuditEvent', {});
    const texts = JSON.stringify(stored);
    expect(texts).toContain(profile);
    expect(texts).not.toContain(admin.secret);
  });

  it('records a user created through platform.admin, the platform administration as the actor', async () => {
    const seen: AuditContext[] = [];
    const { t, projectId } = await scimSetup({ onAudit: (_event, context) => void seen.push(context) });
    const created = await t.platform.admin.createUser(projectId, {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      userName: 'seeded@example.org',
      userType: 'Practitioner',
    });
    const user = (await t.storage.findUsers(projectId, { userName: 'seeded@example.org' }))[0]!;
    const event = seen.find((c) => c.record.kind === 'scim-user');
    expect(event?.projectId).toBe(projectId);
    expect(event?.record).toMatchObject({
      action: 'create',
      userId: created.id,
      profile: `Practitioner/${user.profileId}`,
      actor: { kind: 'super-admin', id: 'platform-admin' },
    });
  });

  it('records nothing when audit is disabled', async () => {
    const seen: unknown[] = [];
    const { t, projectId, auth } = await scimSetup({ enabled: false, onAudit: (e) => void seen.push(e) });
    const created = await request(t.app)
      .post('/scim/v2/Users')
      .set('Authorization', auth)
      .type(SCIM_JSON)
      .send(JSON.stringify({ userName: 'joe@example.org', userType: 'Patient' }));
    expect(created.status).toBe(201);
    await t.platform.close();
    expect(seen).toEqual([]);
    expect(JSON.stringify(await t.storage.searchResources(projectId, 'AuditEvent', {}))).not.toContain('joe');
  });

  it('refuses a bad audit option, naming it', () => {
    expect(() =>
      fhirPlatform({
        storage: memoryStorage(),
        bulk: false,
        audit: { batchSize: 0 },
      }),
    ).toThrow(/audit\.batchSize/);
  });
});

describe('audit wiring: token endpoint', () => {
  it('records grants (client, project, scopes, address) and refusals (claimed client, error)', async () => {
    const seen: AuditContext[] = [];
    const t = await createPlatformApp({ audit: { onAudit: (_e, context) => void seen.push(context) } });
    apps.push(t);
    const projectId = await t.initProject('Tokens');
    const client = await t.newClient(projectId, { name: 'etl', admin: true });
    seen.length = 0;
    expect((await t.tokenResponse(client.id, client.secret, 'system/*.read')).status).toBe(200);
    expect((await t.tokenResponse(client.id, 'wrong-secret-0123456789')).status).toBe(401);
    const tokens = seen.filter((c) => c.record.kind === 'token');
    expect(tokens).toHaveLength(2);
    expect(tokens[0]!.projectId).toBe(projectId);
    expect(tokens[0]!.record).toMatchObject({
      result: 'granted',
      scopes: ['system/*.read'],
      actor: { kind: 'client', id: client.id, name: 'etl' },
    });
    expect(tokens[0]!.record.address).toMatch(/127\.0\.0\.1/);
    // The caller failed to authenticate (anonymous), but the client it named is the project's.
    expect(tokens[1]!.projectId).toBe(projectId);
    expect(tokens[1]!.record).toMatchObject({
      result: 'refused',
      error: 'invalid_client',
      actor: { kind: 'anonymous', id: client.id },
    });
    expect(JSON.stringify(tokens)).not.toContain(client.secret);
    expect(JSON.stringify(tokens)).not.toContain('wrong-secret');
  });
});

describe('audit wiring: projects and clients', () => {
  it('records $init, client registration and revocation (HTTP and platform.admin)', async () => {
    const seen: AuditContext[] = [];
    const t = await createPlatformApp({ audit: { onAudit: (_e, context) => void seen.push(context) } });
    apps.push(t);
    const projectId = await t.initProject('Clinic');
    const client = await t.newClient(projectId, { name: 'etl' });
    const auth = await t.bearer('root', 'root-secret-0123456789');
    const revoked = await request(t.app)
      .delete(`/fhir/R4/Project/${projectId}/ClientApplication/${client.id}`)
      .set('Authorization', auth);
    expect(revoked.status).toBe(204);
    const viaAdmin = await t.platform.admin.newClient(projectId, {
      resourceType: 'Parameters',
      parameter: [{ name: 'name', valueString: 'seeded' }],
    });
    const records = seen.map((c) => c.record).filter((r) => r.kind === 'project-init' || r.kind === 'client');
    expect(records).toMatchObject([
      { kind: 'project-init', projectId, projectName: 'Clinic', actor: { kind: 'super-admin', id: 'root' } },
      { kind: 'client', action: 'register', clientId: client.id, clientName: 'etl', projectId },
      { kind: 'client', action: 'revoke', clientId: client.id, projectId },
      { kind: 'client', action: 'register', clientId: viaAdmin.id, projectId },
    ]);
    expect(JSON.stringify(records)).not.toContain(client.secret);
  });
});

describe('audit wiring: refused requests', () => {
  it('records a cross-project 404, a 403 and an anonymous 401', async () => {
    const seen: AuditContext[] = [];
    const t = await createPlatformApp({ audit: { onAudit: (_e, context) => void seen.push(context) } });
    apps.push(t);
    const a = await t.initProject('A');
    const b = await t.initProject('B');
    const clientA = await t.newClient(a, { name: 'a', admin: true });
    const authA = await t.bearer(clientA.id, clientA.secret);
    seen.length = 0;
    const cross = await request(t.app).get(`/fhir/R4/Project/${b}`).set('Authorization', authA);
    expect([403, 404]).toContain(cross.status);
    const anonymous = await request(t.app).get('/fhir/R4/Patient/x');
    expect(anonymous.status).toBe(401);
    const refused = seen.filter((c) => c.record.kind === 'refused').map((c) => c.record);
    expect(refused).toMatchObject([
      {
        status: cross.status,
        method: 'GET',
        path: `/fhir/R4/Project/${b}`,
        projectId: a,
        actor: { kind: 'client', id: clientA.id },
      },
      {
        status: 401,
        method: 'GET',
        path: '/fhir/R4/Patient/x',
        projectId: null,
        actor: { kind: 'anonymous' },
      },
    ]);
  });
});

describe('audit wiring: a trail that cannot record', () => {
  it('never fails a request: token, SCIM, client registration and FHIR answer, the error goes to onError', async () => {
    const errors: unknown[] = [];
    const t = await createPlatformApp({ bulk: false, audit: { onError: (e) => void errors.push(e) } });
    apps.push(t);
    const projectId = await t.initProject('Closed');
    const admin = await t.newClient(projectId, { name: 'idp', admin: true });
    const auth = await t.bearer(admin.id, admin.secret);
    // After close() the trail refuses every event (as when its journal cannot be written).
    await t.platform.close();
    expect(errors).toEqual([]);
    expect((await t.tokenResponse(admin.id, admin.secret)).status).toBe(200);
    const created = await request(t.app)
      .post('/scim/v2/Users')
      .set('Authorization', auth)
      .type(SCIM_JSON)
      .send(JSON.stringify({ userName: 'kim@example.org', userType: 'Patient' }));
    expect(created.status).toBe(201);
    await t.newClient(projectId, { name: 'late' });
    const patient = await request(t.app)
      .post('/fhir/R4/Patient')
      .set('Authorization', auth)
      .type('application/fhir+json')
      .send(JSON.stringify({ resourceType: 'Patient' }));
    expect(patient.status).toBe(201);
    expect(
      (
        await request(t.app)
          .get(`/fhir/R4/Patient/${patient.body.id as string}`)
          .set('Authorization', auth)
      ).status,
    ).toBe(200);
    expect(errors.length).toBeGreaterThanOrEqual(6);
    for (const error of errors) expect((error as Error).message).toMatch(/closed/);
  });
});
