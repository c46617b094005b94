// Replays the request sequence the Microsoft Entra ID provisioning service (and its SCIM
// validator) sends: lookups by userName (with `+` for spaces), externalId and work email, create
// with the enterprise extension, PATCH with capitalised ops, value-path email updates, string
// booleans, manager as a plain string, path-less Add with dotted keys, disable, delete, re-create.
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { createScimApp, MOUNT } from './scim-app.js';

const CORE = 'urn:ietf:params:scim:schemas:core:2.0:User';
const ENTERPRISE = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

const userName = 'Test_User_ab6490ee-1e48-479e-a20b-2d77186b5dd1';
const externalId = '0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef';
const createBody = {
  schemas: [CORE, ENTERPRISE],
  externalId,
  userName,
  active: true,
  emails: [{ primary: true, type: 'work', value: 'Test_User_fd0ea19b@testuser.com' }],
  meta: { resourceType: 'User' },
  name: { formatted: 'givenName familyName', familyName: 'familyName', givenName: 'givenName' },
  roles: [],
  userType: 'Practitioner',
  [ENTERPRISE]: { employeeNumber: '99887766', department: 'Cardiology' },
};

describe.each([false, true])('Entra ID provisioning sequence (echoUserName %s)', (echoUserName) => {
  it('provisions, updates, disables, deletes and re-creates a user', async () => {
    const { app, admin, storage } = await createScimApp({ echoUserName });
    const agent = request(app);
    const get = (path: string) => agent.get(`${MOUNT}${path}`).set('Authorization', admin);
    const patch = (id: string, ...Operations: unknown[]) =>
      agent
        .patch(`${MOUNT}/Users/${id}`)
        .set('Authorization', admin)
        .set('Content-Type', 'application/scim+json')
        .send(JSON.stringify({ schemas: [PATCH_OP], Operations }));
    const byUserName = (name: string) => get(`/Users?filter=userName+eq+%22${encodeURIComponent(name)}%22`);

    // Matching: Entra looks the user up before creating it.
    const none = await byUserName(userName);
    expect(none.status).toBe(200);
    expect(none.body.totalResults).toBe(0);

    const created = await agent
      .post(`${MOUNT}/Users`)
      .set('Authorization', admin)
      .set('Content-Type', 'application/scim+json')
      .send(JSON.stringify(createBody));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const profileId = (await storage.readUser('proj-a', id)).profileId;
    expect(created.body.userName).toBe(echoUserName ? userName : profileId);
    expect(created.body[ENTERPRISE]).toEqual({ employeeNumber: '99887766', department: 'Cardiology' });
    expect(created.body).not.toHaveProperty('roles');

    // Lookups by userName (case-insensitive), externalId, work email, and the profile id.
    for (const res of [
      await byUserName(userName.toUpperCase()),
      await byUserName(profileId),
      await get(`/Users?filter=${encodeURIComponent(`externalId eq "${externalId}"`)}`),
      await get(
        `/Users?filter=${encodeURIComponent('emails[type eq "work"].value eq "test_user_fd0ea19b@testuser.com"')}`,
      ),
    ]) {
      expect(res.status).toBe(200);
      expect(res.body.totalResults).toBe(1);
      expect(res.body.Resources[0].id).toBe(id);
    }

    // Multi-valued update: value-path email and a sub-attribute.
    const multi = await patch(
      id,
      { op: 'Replace', path: 'emails[type eq "work"].value', value: 'updatedEmail@microsoft.com' },
      { op: 'Replace', path: 'name.familyName', value: 'updatedFamilyName' },
    );
    expect(multi.status).toBe(200);
    expect(multi.body.emails).toEqual([{ primary: true, type: 'work', value: 'updatedEmail@microsoft.com' }]);
    expect(multi.body.name.familyName).toBe('updatedFamilyName');
    const profile = await storage.readResource('proj-a', 'Practitioner', profileId);
    expect(profile.telecom).toEqual([
      { system: 'email', value: 'updatedEmail@microsoft.com', use: 'work', rank: 1 },
    ]);
    expect(profile.name).toMatchObject([{ family: 'updatedFamilyName' }]);

    // Entra adds a missing email through a value path with Add.
    const added = await patch(id, {
      op: 'Add',
      path: 'emails[type eq "home"].value',
      value: 'home@example.org',
    });
    expect(added.body.emails).toContainEqual({ type: 'home', value: 'home@example.org' });

    // Single-valued update: userName.
    const renamed = `${userName}-renamed@testuser.com`;
    const single = await patch(id, { op: 'Replace', path: 'userName', value: renamed });
    expect(single.status).toBe(200);
    expect(single.body.userName).toBe(echoUserName ? renamed : profileId);
    expect((await byUserName(renamed)).body.totalResults).toBe(1);
    expect((await byUserName(userName)).body.totalResults).toBe(0);

    // Manager as a plain string, then removed; path-less Add with dotted and qualified keys.
    const manager = await patch(id, { op: 'Add', path: `${ENTERPRISE}:manager`, value: 'boss-id' });
    expect(manager.body[ENTERPRISE].manager).toEqual({ value: 'boss-id' });
    const pathless = await patch(id, {
      op: 'Add',
      value: {
        displayName: 'New Display',
        'name.givenName': 'NewGiven',
        [`${ENTERPRISE}:department`]: 'Oncology',
      },
    });
    expect(pathless.body).toMatchObject({ displayName: 'New Display', name: { givenName: 'NewGiven' } });
    expect(pathless.body[ENTERPRISE]).toMatchObject({
      department: 'Oncology',
      manager: { value: 'boss-id' },
    });
    const noManager = await patch(id, { op: 'Remove', path: `${ENTERPRISE}:manager` });
    expect(noManager.body[ENTERPRISE]).not.toHaveProperty('manager');

    // Disable with a string boolean: the user stays readable and findable, inactive.
    const disabled = await patch(id, { op: 'Replace', path: 'active', value: 'False' });
    expect(disabled.status).toBe(200);
    expect(disabled.body.active).toBe(false);
    const afterDisable = await byUserName(renamed);
    expect(afterDisable.body.Resources[0].active).toBe(false);
    expect((await storage.readUser('proj-a', id)).active).toBe(false);
    const enabled = await patch(id, { op: 'Replace', value: { active: 'True' } });
    expect(enabled.body.active).toBe(true);

    // Hard delete, then the same names are free again.
    expect((await agent.delete(`${MOUNT}/Users/${id}`).set('Authorization', admin)).status).toBe(204);
    expect((await get(`/Users/${id}`)).status).toBe(404);
    expect((await byUserName(renamed)).body.totalResults).toBe(0);
    const again = await agent
      .post(`${MOUNT}/Users`)
      .set('Authorization', admin)
      .set('Content-Type', 'application/json')
      .send(JSON.stringify({ ...createBody, userName: renamed }));
    expect(again.status).toBe(201);
    // The profile of the deleted user is still there.
    expect((await storage.readResource('proj-a', 'Practitioner', profileId)).id).toBe(profileId);
  });
});
