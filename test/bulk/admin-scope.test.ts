import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { poll } from '../helpers/bulk-export.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';

const FHIR = '/fhir/R4';

describe('bulk export with real tokens: admins are held to their read scopes', () => {
  let ctx: PlatformTestApp;
  let admin: { id: string; secret: string };

  beforeEach(async () => {
    ctx = await createPlatformApp();
    const projectId = await ctx.initProject('Acme');
    admin = await ctx.newClient(projectId, { name: 'admin', scope: 'system/*.*', admin: true });
    const auth = await ctx.bearer(admin.id, admin.secret);
    const patient = await request(ctx.app)
      .post(`${FHIR}/Patient`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Patient' }));
    expect(patient.status).toBe(201);
    const obs = await request(ctx.app)
      .post(`${FHIR}/Observation`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(
        JSON.stringify({
          resourceType: 'Observation',
          status: 'final',
          code: { text: 'x' },
          subject: { reference: `Patient/${patient.body.id}` },
        }),
      );
    expect(obs.status).toBe(201);
  });
  afterEach(() => ctx.close());

  const kickoff = (auth: string, query = '') =>
    request(ctx.app)
      .get(`${FHIR}/$export${query}`)
      .set('Authorization', auth)
      .set('Accept', FHIR_JSON)
      .set('Prefer', 'respond-async');

  async function manifest(auth: string, statusPath: string) {
    const status = await poll(ctx.app, auth, statusPath);
    expect(status.status).toBe(200);
    return status.body as { output: { type: string; url: string }[] };
  }

  it('refuses an export the token has no read scope for', async () => {
    const adminOnly = await ctx.bearer(admin.id, admin.secret, 'project:admin');
    const none = await kickoff(adminOnly);
    expect(none.status).toBe(403);
    expect(none.body.issue[0].code).toBe('forbidden');
    const narrow = await ctx.bearer(admin.id, admin.secret, 'system/Patient.read');
    const named = await kickoff(narrow, '?_type=Observation');
    expect(named.status).toBe(403);
    expect(named.body.issue[0].code).toBe('forbidden');
  });

  it('exports and serves only the types a narrowed admin token covers', async () => {
    const full = await ctx.bearer(admin.id, admin.secret);
    const started = await kickoff(full);
    expect(started.status).toBe(202);
    const statusPath = new URL(started.headers['content-location']!).pathname;
    const done = await manifest(full, statusPath);
    // $init made the owner's Practitioner profile too.
    expect(done.output.map((o) => o.type).sort()).toEqual(['Observation', 'Patient', 'Practitioner']);

    // The same client, narrowed, may not download the Observation file of its own job.
    const narrow = await ctx.bearer(admin.id, admin.secret, 'system/Patient.read');
    for (const file of done.output) {
      const res = await request(ctx.app).get(new URL(file.url).pathname).set('Authorization', narrow);
      expect(res.status).toBe(file.type === 'Patient' ? 200 : 403);
    }

    const narrowed = await kickoff(narrow);
    expect(narrowed.status).toBe(202);
    const only = await manifest(narrow, new URL(narrowed.headers['content-location']!).pathname);
    expect(only.output.map((o) => o.type)).toEqual(['Patient']);
  });
});
