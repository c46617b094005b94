import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createPlatformApp,
  FHIR_JSON,
  parameters,
  ROOT_ID,
  ROOT_SECRET,
  type PlatformTestApp,
} from '../helpers/platform-app.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

describe('project administration with real tokens: the administration scopes are required', () => {
  let ctx: PlatformTestApp;
  let projectId: string;
  let admin: { id: string; secret: string };
  let other: { id: string; secret: string };

  beforeEach(async () => {
    ctx = await createPlatformApp();
    projectId = await ctx.initProject('Acme');
    admin = await ctx.newClient(projectId, { name: 'admin', scope: 'system/*.*', admin: true });
    other = await ctx.newClient(projectId, { name: 'other', scope: 'system/*.rs' });
  });
  afterEach(() => ctx.close());

  const base = () => `/fhir/R4/Project/${projectId}`;
  const newClient = (auth: string, name: string) =>
    request(ctx.app)
      .post(`${base()}/$new-client`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name, admin: true })));
  const init = (auth: string, name: string) =>
    request(ctx.app)
      .post('/fhir/R4/Project/$init')
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name })));

  it('refuses $new-client, client list/read/revoke and Project read to a narrowed admin token', async () => {
    const clientsBefore = (await ctx.storage.listClients(projectId)).length;
    for (const scope of ['system/Patient.read', 'system/*.*']) {
      const narrow = await ctx.bearer(admin.id, admin.secret, scope);
      expectOperationOutcome(await newClient(narrow, 'minted'), 403, 'forbidden');
      expectOperationOutcome(
        await request(ctx.app).get(`${base()}/ClientApplication`).set('Authorization', narrow),
        403,
        'forbidden',
      );
      expectOperationOutcome(
        await request(ctx.app).get(`${base()}/ClientApplication/${other.id}`).set('Authorization', narrow),
        403,
        'forbidden',
      );
      expectOperationOutcome(
        await request(ctx.app).delete(`${base()}/ClientApplication/${other.id}`).set('Authorization', narrow),
        403,
        'forbidden',
      );
      expectOperationOutcome(
        await request(ctx.app)
          .post(`${base()}/$revoke-client`)
          .set('Authorization', narrow)
          .type(FHIR_JSON)
          .send(JSON.stringify(parameters({ clientId: other.id }))),
        403,
        'forbidden',
      );
      // Like any member without the role, it is not told about the Project resource.
      expectOperationOutcome(
        await request(ctx.app).get(base()).set('Authorization', narrow),
        404,
        'not-found',
      );
    }
    expect(await ctx.storage.listClients(projectId)).toHaveLength(clientsBefore);
    expect((await ctx.storage.readClient(other.id)).revoked).toBe(false);
  });

  it('allows them with the default token and with project:admin', async () => {
    for (const scope of [undefined, 'project:admin system/*.*', 'project:admin']) {
      const auth = await ctx.bearer(admin.id, admin.secret, scope);
      expect((await newClient(auth, `minted ${scope}`)).status).toBe(201);
      expect(
        (await request(ctx.app).get(`${base()}/ClientApplication`).set('Authorization', auth)).status,
      ).toBe(200);
      expect((await request(ctx.app).get(base()).set('Authorization', auth)).status).toBe(200);
    }
    const auth = await ctx.bearer(admin.id, admin.secret, 'project:admin');
    expect(
      (await request(ctx.app).delete(`${base()}/ClientApplication/${other.id}`).set('Authorization', auth))
        .status,
    ).toBe(204);
    expect((await ctx.storage.readClient(other.id)).revoked).toBe(true);
  });

  it('lets only platform:admin run $init and act on any project', async () => {
    const projectsBefore = (await ctx.storage.listProjects()).length;
    for (const scope of ['system/Patient.read', 'system/*.*']) {
      const narrow = await ctx.bearer(ROOT_ID, ROOT_SECRET, scope);
      expectOperationOutcome(await init(narrow, `Narrow ${scope}`), 403, 'forbidden');
      expectOperationOutcome(await newClient(narrow, 'minted'), 404, 'not-found');
    }
    expect(await ctx.storage.listProjects()).toHaveLength(projectsBefore);

    const platform = await ctx.bearer(ROOT_ID, ROOT_SECRET, 'platform:admin');
    expect((await init(platform, 'Second')).status).toBe(201);
    expect((await newClient(platform, 'minted')).status).toBe(201);
  });

  it('keeps the administration scopes out of registered client scopes', async () => {
    const auth = await ctx.bearer(admin.id, admin.secret);
    for (const scope of ['project:admin', 'system/*.rs platform:admin']) {
      const res = await request(ctx.app)
        .post(`${base()}/$new-client`)
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(JSON.stringify(parameters({ name: 'sneaky', scope })));
      expectOperationOutcome(res, 400, 'invalid');
    }
  });
});
