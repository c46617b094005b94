import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { hashClientSecret } from '../../src/auth/client/client-secret.js';
import type { Storage } from '../../src/storage/types.js';
import { authApp } from './auth-app.js';
import { storageWithProjects } from './auth-storage.js';

describe('bearerAuth with HTTP Basic (SCIM provisioning clients)', () => {
  let storage: Storage;
  beforeAll(async () => {
    storage = await storageWithProjects('p1');
    await storage.createClient({
      id: 'okta',
      projectId: 'p1',
      name: 'okta',
      scope: 'system/Patient.cruds',
      admin: true,
      superAdmin: false,
      secretHash: await hashClientSecret('okta-secret'),
    });
  });

  it('is refused unless enabled', async () => {
    const res = await request(authApp(storage)).get('/fhir/R4/Patient').auth('okta', 'okta-secret');
    expect(res.status).toBe(401);
  });

  it('accepts the right secret, refuses a wrong one, and follows revocation at once', async () => {
    const app = authApp(storage, { bearer: { allowBasic: true } });
    const ok = await request(app).get('/fhir/R4/Patient').auth('okta', 'okta-secret');
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ id: 'okta', projectId: 'p1', admin: true });
    expect((await request(app).get('/fhir/R4/Patient').auth('okta', 'okta-secret')).status).toBe(200);
    const wrong = await request(app).get('/fhir/R4/Patient').auth('okta', 'nope');
    expect(wrong.status).toBe(401);
    expect(wrong.headers['www-authenticate']).toMatch(/Basic/);
    const unknown = await request(app).get('/fhir/R4/Patient').auth('nobody', 'nope');
    expect(unknown.status).toBe(401);

    await storage.updateClient('okta', { revoked: true });
    expect((await request(app).get('/fhir/R4/Patient').auth('okta', 'okta-secret')).status).toBe(401);
    await storage.updateClient('okta', { revoked: false });
  });

  it('limits failed attempts', async () => {
    const app = authApp(storage, {
      bearer: {
        allowBasic: true,
        rateLimit: { maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 50, windowSeconds: 60 },
      },
    });
    expect((await request(app).get('/fhir/R4/Patient').auth('okta', 'bad')).status).toBe(401);
    expect((await request(app).get('/fhir/R4/Patient').auth('okta', 'bad')).status).toBe(401);
    const blocked = await request(app).get('/fhir/R4/Patient').auth('okta', 'okta-secret');
    expect(blocked.status).toBe(429);
    expect(blocked.headers['retry-after']).toBeDefined();
  });
});
