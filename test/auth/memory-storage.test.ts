import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { authApp, TOKEN_URL } from './auth-app.js';
import { clientKey, signAssertion } from './client-keys.js';

describe('auth over memoryStorage', () => {
  let storage: Storage;
  beforeEach(() => {
    storage = memoryStorage();
  });
  afterEach(async () => {
    await storage.close();
  });

  it('issues a token to an ES384 client, refuses a replay, and survives key rotation', async () => {
    const project = await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
    const key = await clientKey('ES384');
    await storage.createClient({
      id: 'c1',
      projectId: project.id,
      name: 'c1',
      jwks: { keys: [{ ...key.publicJwk }] },
      scope: 'system/*.rs',
      admin: false,
      superAdmin: false,
    });
    const app = authApp(storage);
    const assertion = await signAssertion(key, { clientId: 'c1', aud: TOKEN_URL });
    const form = {
      grant_type: 'client_credentials',
      client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
      client_assertion: assertion,
    };
    const res = await request(app).post('/oauth2/token').type('form').send(form);
    expect(res.status).toBe(200);
    const replay = await request(app).post('/oauth2/token').type('form').send(form);
    expect([replay.status, replay.body.error]).toEqual([401, 'invalid_client']);

    // Rotation by another instance sharing the store: the old token still verifies.
    await signingKeys(storage).rotate();
    const read = await request(app)
      .get('/fhir/R4/Patient')
      .set('Authorization', `Bearer ${res.body.access_token}`);
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ id: 'c1', projectId: 'p1' });

    await storage.updateClient('c1', { revoked: true });
    expect(
      (await request(app).get('/fhir/R4/Patient').set('Authorization', `Bearer ${res.body.access_token}`))
        .status,
    ).toBe(401);
  });
});
