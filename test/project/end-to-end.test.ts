import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { bearerAuth } from '../../src/auth/access/bearer-auth.js';
import { ensureSuperAdminClient } from '../../src/auth/client/super-admin.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import { tokenRouter } from '../../src/auth/token/token-router.js';
import { projectRouter } from '../../src/project/router.js';
import { memoryStorage } from '../../src/stores.js';

const FHIR = '/api/fhir/R4';
const TOKEN = '/api/oauth2/token';
// supertest listens on a new port per request: pin the issuer instead of deriving it from Host.
const ISSUER = 'https://fhir.example.test';

async function token(app: express.Express, clientId: string, secret: string) {
  const res = await request(app)
    .post(TOKEN)
    .auth(clientId, secret)
    .type('form')
    .send({ grant_type: 'client_credentials' });
  expect(res.status).toBe(200);
  return `Bearer ${res.body.access_token as string}`;
}

describe('project administration with real access tokens', () => {
  it('super admin creates a project, its admin client registers a client, revocation stops it at once', async () => {
    const storage = memoryStorage();
    await ensureSuperAdminClient(storage, { clientId: 'root', clientSecret: 'root-secret-0123456789' });
    const keys = signingKeys(storage);
    const app = express();
    app.use(
      TOKEN,
      tokenRouter({ storage, issuer: ISSUER, signingKeys: keys, rateLimit: false, onError: () => undefined }),
    );
    app.use(
      FHIR,
      projectRouter({ storage, authenticate: bearerAuth({ storage, issuer: ISSUER, signingKeys: keys }) }),
    );

    const root = await token(app, 'root', 'root-secret-0123456789');
    const init = await request(app)
      .post(`${FHIR}/Project/$init`)
      .set('Authorization', root)
      .type('application/fhir+json')
      .send(
        JSON.stringify({
          resourceType: 'Parameters',
          parameter: [
            { name: 'name', valueString: 'Acme' },
            { name: 'ownerEmail', valueString: 'ada@acme.example' },
          ],
        }),
      );
    expect(init.status).toBe(201);
    const projectId = init.body.id as string;

    const newClient = (auth: string, name: string, admin: boolean) =>
      request(app)
        .post(`${FHIR}/Project/${projectId}/$new-client`)
        .set('Authorization', auth)
        .type('application/fhir+json')
        .send(
          JSON.stringify({
            resourceType: 'Parameters',
            parameter: [
              { name: 'name', valueString: name },
              { name: 'admin', valueBoolean: admin },
              { name: 'scope', valueString: 'system/*.rs' },
            ],
          }),
        );

    const adminClient = await newClient(root, 'Project admin', true);
    expect(adminClient.status).toBe(201);
    const admin = await token(app, adminClient.body.id, adminClient.body.secret);
    expect((await request(app).get(`${FHIR}/Project/${projectId}`).set('Authorization', admin)).status).toBe(
      200,
    );

    const worker = await newClient(admin, 'Nightly export', false);
    expect(worker.status).toBe(201);
    const workerToken = await token(app, worker.body.id, worker.body.secret);
    // A non-admin client of the project may not administer it.
    expect((await newClient(workerToken, 'x', false)).status).toBe(403);

    const revoked = await request(app)
      .delete(`${FHIR}/Project/${projectId}/ClientApplication/${worker.body.id as string}`)
      .set('Authorization', admin);
    expect(revoked.status).toBe(204);
    // Its token stops working at once, and it gets no new one.
    const refused = await request(app).get(`${FHIR}/Project/${projectId}`).set('Authorization', workerToken);
    expect(refused.status).toBe(401);
    expect(refused.body.resourceType).toBe('OperationOutcome');
    const again = await request(app)
      .post(TOKEN)
      .auth(worker.body.id, worker.body.secret)
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(again.status).toBe(401);
  });
});
