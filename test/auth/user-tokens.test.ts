import request from 'supertest';
import { beforeEach, describe, expect, it } from 'vitest';
import { issueAccessToken } from '../../src/auth/access/access-token.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import type { ClientRecord, Storage } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';
import { BASE_URL, authApp } from './auth-app.js';

// A token issued to a signed-in user (SMART App Launch) names the user in `sub` and the app in
// `client_id`; it counts only while the user exists and is active.
describe('user access tokens', () => {
  let storage: Storage;
  let app: ReturnType<typeof authApp>;
  let client: ClientRecord;

  beforeEach(async () => {
    storage = memoryStorage();
    await storage.createProject({ id: 'p1', name: 'p1', strictMode: false });
    client = await storage.createClient({
      id: 'app1',
      projectId: 'p1',
      name: 'app',
      scope: 'user/*.rs launch/patient openid fhirUser',
      admin: false,
      superAdmin: false,
    });
    await storage.createUser('p1', {
      id: 'u1',
      projectId: 'p1',
      userName: 'ann',
      userType: 'Patient',
      profileId: 'pat1',
      active: true,
      data: {},
    });
    app = authApp(storage);
  });

  async function token(
    user: { id: string; fhirUser: string; patient?: string; family?: string },
    scopes = ['user/*.rs'],
  ) {
    // authApp signs with signingKeys(storage): keys live in the store, so this instance verifies too.
    const issued = await issueAccessToken(signingKeys(storage), {
      client,
      scopes,
      issuer: BASE_URL,
      audience: BASE_URL,
      lifetime: 300,
      user,
    });
    return issued;
  }

  it('carries the user, the app and the launch patient into the principal', async () => {
    const issued = await token({ id: 'u1', fhirUser: 'Patient/pat1', patient: 'pat1' });
    expect(issued.claims).toMatchObject({
      sub: 'u1',
      client_id: 'app1',
      principal_kind: 'user',
      fhirUser: 'Patient/pat1',
      patient: 'pat1',
      admin: false,
    });
    const res = await request(app).get('/fhir/R4/Observation').set('Authorization', `Bearer ${issued.token}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      kind: 'user',
      id: 'u1',
      projectId: 'p1',
      clientId: 'app1',
      fhirUser: 'Patient/pat1',
      patientId: 'pat1',
      scopes: ['user/*.rs'],
      admin: false,
    });
  });

  it('stops working at once when the user is deactivated or deleted', async () => {
    const { token: t } = await token({ id: 'u1', fhirUser: 'Patient/pat1' });
    const get = () => request(app).get('/fhir/R4/Observation').set('Authorization', `Bearer ${t}`);
    expect((await get()).status).toBe(200);
    await storage.updateUser('p1', 'u1', { active: false });
    const inactive = await get();
    expect(inactive.status).toBe(401);
    expect(inactive.headers['www-authenticate']).toContain('invalid_token');
    await storage.updateUser('p1', 'u1', { active: true });
    expect((await get()).status).toBe(200);
    await storage.deleteUser('p1', 'u1');
    expect((await get()).status).toBe(401);
  });

  it('counts a token naming its authorization only while that authorization lives', async () => {
    const grants = storage.grants!;
    const authorization = {
      kind: 'family' as const,
      key: 'fam1',
      projectId: 'p1',
      clientId: 'app1',
      userId: 'u1',
      family: 'fam1',
      expiresAt: Date.now() + 60_000,
      data: {},
    };
    await grants.put(authorization);
    // Another project's authorization of the same id does not count for this one's tokens.
    await grants.put({ ...authorization, key: 'fam2', family: 'fam2', projectId: 'p2' });
    const status = async (family: string) => {
      const { token: t } = await token({ id: 'u1', fhirUser: 'Patient/pat1', family });
      return (await request(app).get('/fhir/R4/Observation').set('Authorization', `Bearer ${t}`)).status;
    };
    expect(await status('fam1')).toBe(200);
    expect(await status('fam2')).toBe(401);
    expect(await status('unknown')).toBe(401);
    expect(await grants.revoke({ projectId: 'p1', family: 'fam1' })).toBe(1);
    expect(await status('fam1')).toBe(401);
  });

  it('refuses a token whose profile no longer matches the user', async () => {
    const { token: t } = await token({ id: 'u1', fhirUser: 'Patient/other' });
    expect((await request(app).get('/fhir/R4/Observation').set('Authorization', `Bearer ${t}`)).status).toBe(
      401,
    );
  });

  it('never gives a user token admin rights', async () => {
    await storage.updateClient('app1', { admin: true, scope: 'project:admin user/*.rs' });
    client = await storage.readClient('app1');
    const { token: t } = await token({ id: 'u1', fhirUser: 'Patient/pat1' }, ['user/*.rs']);
    const res = await request(app).get('/fhir/R4/Observation').set('Authorization', `Bearer ${t}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ admin: false, superAdmin: false, kind: 'user' });
    const withAdmin = await token({ id: 'u1', fhirUser: 'Patient/pat1' }, ['project:admin']);
    const refused = await request(app)
      .get('/fhir/R4/Observation')
      .set('Authorization', `Bearer ${withAdmin.token}`);
    expect(refused.status).toBe(401);
  });
});
