import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';

const FHIR = '/fhir/R4';

function expectForbidden(res: request.Response) {
  expect(res.status).toBe(403);
  expect(res.body.resourceType).toBe('OperationOutcome');
  expect(res.body.issue[0].code).toBe('forbidden');
}

describe('FHIR data with real tokens: admins are held to their scopes', () => {
  let ctx: PlatformTestApp;
  let projectId: string;
  let admin: { id: string; secret: string };
  let patientId: string;

  beforeEach(async () => {
    ctx = await createPlatformApp();
    projectId = await ctx.initProject('Acme');
    admin = await ctx.newClient(projectId, { name: 'admin', scope: 'system/*.*', admin: true });
    const created = await post(await ctx.bearer(admin.id, admin.secret), 'Patient', {
      resourceType: 'Patient',
    });
    expect(created.status).toBe(201);
    patientId = created.body.id as string;
  });
  afterEach(() => ctx.close());

  const post = (auth: string, type: string, body: Record<string, unknown>) =>
    request(ctx.app)
      .post(`${FHIR}/${type}`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(body));
  const observation = () => ({
    resourceType: 'Observation',
    status: 'final',
    code: { text: 'Body height' },
    subject: { reference: `Patient/${patientId}` },
  });

  it('lets an admin token narrowed to system/Patient.read only read Patients', async () => {
    const narrow = await ctx.bearer(admin.id, admin.secret, 'system/Patient.read');
    expectForbidden(await post(narrow, 'Observation', observation()));
    expectForbidden(await post(narrow, 'Patient', { resourceType: 'Patient' }));
    expectForbidden(
      await request(ctx.app)
        .put(`${FHIR}/Patient/${patientId}`)
        .set('Authorization', narrow)
        .type(FHIR_JSON)
        .send(JSON.stringify({ resourceType: 'Patient', id: patientId, active: false })),
    );
    expectForbidden(
      await request(ctx.app).delete(`${FHIR}/Patient/${patientId}`).set('Authorization', narrow),
    );
    expectForbidden(await request(ctx.app).get(`${FHIR}/Observation`).set('Authorization', narrow));
    expectForbidden(
      await post(narrow, '', {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [{ resource: observation(), request: { method: 'POST', url: 'Observation' } }],
      }),
    );
    expect(
      (await request(ctx.app).get(`${FHIR}/Patient/${patientId}`).set('Authorization', narrow)).status,
    ).toBe(200);
    const search = await request(ctx.app).get(`${FHIR}/Patient?_total=accurate`).set('Authorization', narrow);
    expect(search.status).toBe(200);
    expect(search.body.total).toBe(1);
    // Nothing was written.
    const all = await ctx.bearer(admin.id, admin.secret);
    expect(
      (await request(ctx.app).get(`${FHIR}/Observation?_total=accurate`).set('Authorization', all)).body
        .total,
    ).toBe(0);
    expect(
      (await request(ctx.app).get(`${FHIR}/Patient?_total=accurate`).set('Authorization', all)).body.total,
    ).toBe(1);
  });

  it('gives project:admin alone no data access', async () => {
    const adminOnly = await ctx.bearer(admin.id, admin.secret, 'project:admin');
    expectForbidden(
      await request(ctx.app).get(`${FHIR}/Patient/${patientId}`).set('Authorization', adminOnly),
    );
    expectForbidden(await post(adminOnly, 'Observation', observation()));
  });

  it('lets the default token and project:admin system/*.* do everything', async () => {
    for (const scope of [undefined, 'project:admin system/*.*', 'system/*.*']) {
      const auth = await ctx.bearer(admin.id, admin.secret, scope);
      expect((await post(auth, 'Observation', observation())).status).toBe(201);
      expect((await post(auth, 'Patient', { resourceType: 'Patient' })).status).toBe(201);
      expect(
        (await request(ctx.app).get(`${FHIR}/Patient/${patientId}`).set('Authorization', auth)).status,
      ).toBe(200);
    }
  });
});
