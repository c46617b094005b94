import { decodeJwt, SignJWT } from 'jose';
import request from 'supertest';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ACCESS_TOKEN_TYPE } from '../../src/auth/access/access-token.js';
import { allowedScopes } from '../../src/auth/access/client-scopes.js';
import { hashClientSecret } from '../../src/auth/client/client-secret.js';
import { signingKeys, type SigningKeys } from '../../src/auth/keys/signing-keys.js';
import type { ClientRecord, NewClient, Storage } from '../../src/storage/types.js';
import { authApp } from './auth-app.js';
import { storageWithProjects } from './auth-storage.js';

const SECRET = 'admin-scope-secret';
let secretHash: string;

function client(id: string, extra: Partial<NewClient> = {}): NewClient {
  return {
    id,
    projectId: 'p1',
    name: id,
    scope: 'system/Patient.cruds',
    admin: false,
    superAdmin: false,
    secretHash,
    ...extra,
  };
}

beforeAll(async () => {
  secretHash = await hashClientSecret(SECRET);
});

describe('administration scopes on tokens and principals', () => {
  let storage: Storage;
  let keys: SigningKeys;
  let app: ReturnType<typeof authApp>;

  beforeEach(async () => {
    storage = await storageWithProjects('p1');
    await storage.createClient(client('admin', { admin: true }));
    await storage.createClient(client('plain'));
    // A host wrote admin scopes into a non-admin client's registration: they must not count.
    await storage.createClient(client('pretender', { scope: 'system/*.rs project:admin platform:admin' }));
    await storage.createClient(client('root', { projectId: null, scope: '', superAdmin: true }));
    keys = signingKeys(storage);
    app = authApp(storage, { token: { signingKeys: keys }, bearer: { signingKeys: keys } });
  });

  const token = (id: string, scope?: string) =>
    request(app)
      .post('/oauth2/token')
      .auth(id, SECRET)
      .type('form')
      .send({ grant_type: 'client_credentials', ...(scope === undefined ? {} : { scope }) });

  const principal = (accessToken: string, type = 'Patient') =>
    request(app).get(`/fhir/R4/${type}`).set('Authorization', `Bearer ${accessToken}`);

  it('gives an admin client project:admin only when the request leaves it in', async () => {
    const full = await token('admin');
    expect(full.status).toBe(200);
    expect(full.body.scope).toBe('system/Patient.cruds system/*.* project:admin');
    expect(decodeJwt(full.body.access_token as string)).toMatchObject({ admin: true, super_admin: false });
    const fullPrincipal = await principal(full.body.access_token as string, 'Observation');
    expect(fullPrincipal.status).toBe(200);
    expect(fullPrincipal.body).toMatchObject({ admin: true, superAdmin: false });

    const narrow = await token('admin', 'system/Patient.read');
    expect(narrow.status).toBe(200);
    expect(narrow.body.scope).toBe('system/Patient.read');
    expect(decodeJwt(narrow.body.access_token as string)).toMatchObject({ admin: false, super_admin: false });
    const narrowPrincipal = await principal(narrow.body.access_token as string);
    expect(narrowPrincipal.status).toBe(200);
    expect(narrowPrincipal.body).toMatchObject({ admin: false, scopes: ['system/Patient.read'] });
    // Data access follows the scopes, for admins too.
    expect((await principal(narrow.body.access_token as string, 'Observation')).status).toBe(403);

    const explicit = await token('admin', 'project:admin system/*.*');
    expect(explicit.body.scope).toBe('project:admin system/*.*');
    expect((await principal(explicit.body.access_token as string, 'Observation')).body).toMatchObject({
      admin: true,
    });

    // project:admin alone administers but reads no data.
    const adminOnly = await token('admin', 'project:admin');
    expect(adminOnly.body.scope).toBe('project:admin');
    expect(decodeJwt(adminOnly.body.access_token as string)).toMatchObject({ admin: true });
    expect((await principal(adminOnly.body.access_token as string)).status).toBe(403);

    // A project admin may not have the platform scope.
    const platform = await token('admin', 'platform:admin');
    expect(platform.status).toBe(400);
    expect(platform.body.error).toBe('invalid_scope');
  });

  it('gives the super admin platform:admin only when the request leaves it in', async () => {
    const full = await token('root');
    expect(full.body.scope).toBe('system/*.* platform:admin');
    expect(decodeJwt(full.body.access_token as string)).toMatchObject({ admin: false, super_admin: true });
    expect((await principal(full.body.access_token as string)).body).toMatchObject({ superAdmin: true });

    const narrow = await token('root', 'system/Patient.read');
    expect(narrow.body.scope).toBe('system/Patient.read');
    expect(decodeJwt(narrow.body.access_token as string)).toMatchObject({ super_admin: false });
    expect((await principal(narrow.body.access_token as string)).body).toMatchObject({
      admin: false,
      superAdmin: false,
    });
  });

  it('never grants an administration scope to a client without the role', async () => {
    for (const id of ['plain', 'pretender']) {
      const refused = await token(id, 'project:admin');
      expect(refused.status).toBe(400);
      expect(refused.body.error).toBe('invalid_scope');
      const mixed = await token(id, 'project:admin platform:admin system/Patient.rs');
      expect(mixed.status).toBe(200);
      expect(mixed.body.scope).toBe('system/Patient.rs');
      const all = await token(id);
      expect(all.body.scope).not.toMatch(/admin/);
      expect((await principal(all.body.access_token as string)).body).toMatchObject({
        admin: false,
        superAdmin: false,
      });
    }
  });

  it('drops the role at once when the client loses it, even with project:admin in the token', async () => {
    const full = await token('admin');
    await storage.updateClient('admin', { admin: false });
    const res = await principal(full.body.access_token as string);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ admin: false });
    expect(res.body.scopes).not.toContain('project:admin');
  });

  it('refuses a signed token whose admin claim its scope does not back', async () => {
    const narrow = await token('admin', 'system/*.*');
    const claims = decodeJwt(narrow.body.access_token as string);
    expect(claims.admin).toBe(false);
    const key = await keys.current();
    // What a token issued before the administration scopes looked like.
    const forged = await new SignJWT({ ...claims, admin: true })
      .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: ACCESS_TOKEN_TYPE })
      .sign(key.privateKey);
    const res = await principal(forged);
    expect(res.status).toBe(401);
    expect(res.headers['www-authenticate']).toMatch(/error="invalid_token"/);
  });

  it('lets HTTP Basic act with every scope the client may have, admin scope included', async () => {
    const basicApp = authApp(storage, { bearer: { allowBasic: true } });
    const res = await request(basicApp).get('/fhir/R4/Observation').auth('admin', SECRET);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ admin: true });
    expect(res.body.scopes).toContain('project:admin');
  });
});

describe('allowedScopes', () => {
  const record = (extra: Partial<ClientRecord>): ClientRecord => ({
    id: 'c',
    projectId: 'p1',
    name: 'c',
    scope: 'system/Patient.rs project:admin platform:admin',
    admin: false,
    superAdmin: false,
    revoked: false,
    createdAt: '',
    updatedAt: '',
    ...extra,
  });

  it('adds each role its administration scope and ignores registered ones', () => {
    expect(allowedScopes(record({}))).toEqual(['system/Patient.rs']);
    expect(allowedScopes(record({ admin: true }))).toEqual([
      'system/Patient.rs',
      'system/*.*',
      'project:admin',
    ]);
    expect(allowedScopes(record({ projectId: null, superAdmin: true, scope: '' }))).toEqual([
      'system/*.*',
      'platform:admin',
    ]);
  });
});
