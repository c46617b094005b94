import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { projectRouter } from '../../src/project/router.js';
import { memoryStorage } from '../../src/stores.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { expectInvalidParameter } from '../helpers/protocol-errors.js';

const FHIR = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';
const SUPER = testToken({ projectId: null, kind: 'super-admin', id: 'root', superAdmin: true });

async function setup() {
  const storage = memoryStorage();
  const app = express();
  app.use(FHIR, projectRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  const post = (path: string, auth: string, body: unknown) =>
    request(app)
      .post(`${FHIR}${path}`)
      .set('Authorization', auth)
      .set('Content-Type', FHIR_JSON)
      .send(JSON.stringify(body));
  const init = await post('/Project/$init', SUPER, params({ name: 'name', valueString: 'Acme' }));
  const id = init.body.id as string;
  const admin = testToken({ projectId: id, admin: true });
  const settings = (...parameter: unknown[]) => post(`/Project/${id}/$settings`, admin, params(...parameter));
  return { storage, app, id, admin, post, settings };
}

const params = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });
/** One `groupRole` parameter. */
const role = (group: string, scope: string) => ({
  name: 'groupRole',
  part: [
    { name: 'group', valueString: group },
    { name: 'scope', valueString: scope },
  ],
});

describe('project settings: the roles of SCIM Groups (groupRole)', () => {
  it('$settings stores the roles, answers them, replaces them whole and resets them', async () => {
    const { storage, app, id, admin, settings } = await setup();
    const set = await settings(
      role('Clinicians', 'user/*.rs'),
      role('Care team A', 'user/Observation.cruds'),
    );
    expect(set.status).toBe(200);
    expect(set.body.groupRoles).toEqual([
      { group: 'Clinicians', scope: 'user/*.rs' },
      { group: 'Care team A', scope: 'user/Observation.cruds' },
    ]);
    expect((await storage.readProject(id)).groupRoles).toEqual([
      { group: 'Clinicians', scopes: ['user/*.rs'] },
      { group: 'Care team A', scopes: ['user/Observation.cruds'] },
    ]);
    const read = await request(app).get(`${FHIR}/Project/${id}`).set('Authorization', admin);
    expect(read.body.groupRoles).toHaveLength(2);

    // Other settings leave them as they are.
    const other = await settings({ name: 'scimEchoUserName', valueBoolean: true });
    expect(other.body.groupRoles).toHaveLength(2);
    // Given again, the list replaces the stored one whole; scopes are split, each kept once.
    const replaced = await settings(role('Clinicians', ' user/*.rs  user/Patient.cruds user/*.rs '));
    expect(replaced.body.groupRoles).toEqual([
      { group: 'Clinicians', scope: 'user/*.rs user/Patient.cruds' },
    ]);
    // v1 scopes are roles' scopes as well.
    const v1 = await settings(role('Readers', 'user/*.read'), role('Writers', 'user/Observation.*'));
    expect(v1.status).toBe(200);

    const reset = await settings({ name: 'reset', valueCode: 'groupRoles' });
    expect(reset.status).toBe(200);
    expect(reset.body).not.toHaveProperty('groupRoles');
    expect((await storage.readProject(id)).groupRoles).toBeUndefined();
    expect((await storage.readProject(id)).scim).toEqual({ echoUserName: true });
  });

  it('refuses a scope that is no user/ resource scope, at its value', async () => {
    const { storage, id, settings } = await setup();
    await settings(role('Clinicians', 'user/*.rs'));
    const scopeAt = 'Parameters.parameter[0].part[1].valueString';
    for (const scope of [
      'patient/*.rs',
      'system/*.rs',
      'user/*.rs openid',
      'launch/patient',
      'user/Observation.rs?category=laboratory',
      'user/observation.rs',
      'user/Observaton.rs',
      'user/*.sr',
      'user/*.',
      'user/*',
    ]) {
      expectInvalidParameter(await settings(role('Care team A', scope)), scopeAt);
    }
    // The second role's scope: the expression points at it.
    expectInvalidParameter(
      await settings(role('Care team A', 'user/*.rs'), role('Care team B', 'patient/*.rs')),
      'Parameters.parameter[1].part[1].valueString',
    );
    // Nothing was stored by a refused call.
    expect((await storage.readProject(id)).groupRoles).toEqual([
      { group: 'Clinicians', scopes: ['user/*.rs'] },
    ]);
  });

  it('refuses malformed roles with the expression of what is wrong', async () => {
    const { settings } = await setup();
    // One group twice, whatever the case.
    expectInvalidParameter(
      await settings(role('Clinicians', 'user/*.rs'), role('CLINICIANS', 'user/*.cruds')),
      'Parameters.parameter[1].part[0].valueString',
    );
    // A part missing, unknown, given twice, or blank; a value instead of parts; parts not a list.
    expectInvalidParameter(
      await settings({ name: 'groupRole', part: [{ name: 'group', valueString: 'Clinicians' }] }),
      'Parameters.parameter[0].part',
    );
    expectInvalidParameter(
      await settings({
        name: 'groupRole',
        part: [...role('Clinicians', 'user/*.rs').part, { name: 'role', valueString: 'x' }],
      }),
      'Parameters.parameter[0].part[2].name',
    );
    expectInvalidParameter(
      await settings({
        name: 'groupRole',
        part: [...role('Clinicians', 'user/*.rs').part, { name: 'scope', valueString: 'user/*.rs' }],
      }),
      'Parameters.parameter[0].part[2]',
    );
    expectInvalidParameter(
      await settings(role(' ', 'user/*.rs')),
      'Parameters.parameter[0].part[0].valueString',
    );
    expectInvalidParameter(
      await settings({ name: 'groupRole', valueString: 'Clinicians=user/*.rs' }),
      'Parameters.parameter[0].valueString',
    );
    expectInvalidParameter(await settings({ name: 'groupRole' }), 'Parameters.parameter[0]');
    expectInvalidParameter(await settings({ name: 'groupRole', part: {} }), 'Parameters.parameter[0].part');
    // Set and reset in one call.
    expectInvalidParameter(
      await settings(role('Clinicians', 'user/*.rs'), { name: 'reset', valueCode: 'groupRoles' }),
      'Parameters.parameter[1].valueCode',
    );
  });

  it('is a setting of $settings only, and only for the project admins and the super admin', async () => {
    const { post, id } = await setup();
    expectInvalidParameter(
      await post(
        '/Project/$init',
        SUPER,
        params({ name: 'name', valueString: 'Other' }, role('Clinicians', 'user/*.rs')),
      ),
      'Parameters.parameter[1].name',
    );
    const body = params(role('Clinicians', 'user/*.rs'));
    expect((await post(`/Project/${id}/$settings`, testToken({ projectId: id }), body)).status).toBe(403);
    expect((await post(`/Project/${id}/$settings`, SUPER, body)).status).toBe(200);
  });
});
