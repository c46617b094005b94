import request from 'supertest';
import { describe, expect, it, vi } from 'vitest';
import {
  ensureSuperAdminClient,
  provisionSuperAdminClient,
  rotateSuperAdminSecret,
} from '../../src/auth/client/super-admin.js';
import { verifyClientSecret } from '../../src/auth/client/client-secret.js';
import { memoryStorage } from '../../src/stores.js';
import { authApp } from './auth-app.js';

describe('super-admin client', () => {
  it('creates, then updates only what changed', async () => {
    const storage = memoryStorage();
    const updateClient = vi.spyOn(storage, 'updateClient');
    const created = await ensureSuperAdminClient(storage, { clientId: 'root', clientSecret: 's3cret' });
    expect(created).toMatchObject({ id: 'root', projectId: null, superAdmin: true, revoked: false });
    expect(created.secretHash).not.toContain('s3cret');
    const again = await ensureSuperAdminClient(storage, { clientId: 'root', clientSecret: 's3cret' });
    expect(again.secretHash).toBe(created.secretHash);
    expect(updateClient).not.toHaveBeenCalled();
    const changed = await ensureSuperAdminClient(storage, { clientId: 'root', clientSecret: 'other' });
    expect(await verifyClientSecret('other', changed.secretHash!)).toBe(true);
  });

  it('refuses to turn a project client into the super admin', async () => {
    const storage = memoryStorage();
    await storage.createClient({
      id: 'c',
      projectId: 'p',
      name: 'c',
      scope: '',
      admin: false,
      superAdmin: false,
    });
    await expect(ensureSuperAdminClient(storage, { clientId: 'c', clientSecret: 'x' })).rejects.toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });

  it('rotates the secret of an existing super-admin client only', async () => {
    const storage = memoryStorage();
    const { clientSecret: first } = await provisionSuperAdminClient(storage);
    const rotated = await rotateSuperAdminSecret(storage);
    expect(rotated.clientId).toBe('super-admin');
    expect(rotated.clientSecret).not.toBe(first);
    const { secretHash } = await storage.readClient('super-admin');
    expect(await verifyClientSecret(rotated.clientSecret, secretHash!)).toBe(true);
    expect(await verifyClientSecret(first!, secretHash!)).toBe(false);
    // A revoked super admin is usable again with its new secret.
    await storage.updateClient('super-admin', { revoked: true });
    await rotateSuperAdminSecret(storage);
    expect((await storage.readClient('super-admin')).revoked).toBe(false);

    await expect(rotateSuperAdminSecret(storage, { clientId: 'nobody' })).rejects.toMatchObject({
      code: 'ERR_STORAGE_NOT_FOUND',
    });
    await storage.createClient({
      id: 'c',
      projectId: 'p',
      name: 'c',
      scope: '',
      admin: true,
      superAdmin: false,
    });
    await expect(rotateSuperAdminSecret(storage, { clientId: 'c' })).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
    });
  });

  it('generates credentials once, and they get a super-admin token', async () => {
    const storage = memoryStorage();
    const first = await provisionSuperAdminClient(storage);
    expect(first.created).toBe(true);
    expect(first.clientSecret).toBeTruthy();
    const second = await provisionSuperAdminClient(storage);
    expect(second).toEqual({ clientId: first.clientId, clientSecret: undefined, created: false });

    const app = authApp(storage);
    const token = await request(app)
      .post('/oauth2/token')
      .auth(first.clientId, first.clientSecret!)
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(token.status).toBe(200);
    expect(token.body.scope).toBe('system/*.* platform:admin');
    // A generic SMART client asking for a narrower scope gets it.
    const narrow = await request(app)
      .post('/oauth2/token')
      .auth(first.clientId, first.clientSecret!)
      .type('form')
      .send({ grant_type: 'client_credentials', scope: 'system/*.read' });
    expect(narrow.body.scope).toBe('system/*.read');
    const me = await request(app)
      .get('/fhir/R4/Patient')
      .set('Authorization', `Bearer ${token.body.access_token}`);
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ kind: 'super-admin', projectId: null, superAdmin: true });
  });
});
