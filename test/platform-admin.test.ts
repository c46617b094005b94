import fs from 'node:fs';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { fhirPlatform } from '../src/platform.js';
import { memoryStorage } from '../src/stores.js';
import { parameters, SCIM_JSON } from './helpers/platform-app.js';
import { tempDir } from './helpers/temp-dir.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

function platformUnder(prefix: string) {
  const dir = tempDir('fpk-admin-');
  const storage = memoryStorage();
  // A host with its own authentication that admits nobody: administration goes through `admin`.
  const platform = fhirPlatform({
    storage,
    exportDir: path.join(dir, 'exports'),
    authenticate: () => undefined,
    token: { rateLimit: false },
  });
  const app = express();
  app.use(prefix, platform.router);
  closers.push(async () => {
    await platform.close();
    await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { app, storage, platform };
}

describe('platform.admin', () => {
  it('inits a project, registers a client whose token works, creates a SCIM user, revokes the client', async () => {
    const { app, storage, platform } = platformUnder('/api');
    const project = await platform.admin.initProject(
      parameters({ name: 'Seeded', ownerEmail: 'o@example.org' }),
    );
    expect(project.resourceType).toBe('Project');
    expect((await storage.listUsers(project.id)).map((u) => u.userName)).toEqual(['o@example.org']);

    const client = await platform.admin.newClient(project.id, parameters({ name: 'etl', admin: true }));
    const secret = (client as { secret?: string }).secret!;
    const token = await request(app)
      .post('/api/oauth2/token')
      .auth(client.id, secret)
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(token.status).toBe(200);

    const user = await platform.admin.createUser(
      project.id,
      { userName: 'pat@example.org', userType: 'Patient' },
      'https://fhir.example.org/api/scim/v2',
    );
    expect((user.meta as { location: string }).location).toMatch(
      /^https:\/\/fhir\.example\.org\/api\/scim\/v2\/Users\//,
    );
    expect((await storage.findUsers(project.id, { userName: 'pat@example.org' })).length).toBe(1);

    await platform.admin.revokeClient(project.id, client.id);
    const refused = await request(app)
      .post('/api/oauth2/token')
      .auth(client.id, secret)
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(refused.status).toBe(401);
    // The host's authenticate admits nobody over HTTP.
    expect((await request(app).get('/api/scim/v2/Users').type(SCIM_JSON)).status).toBe(401);
  });

  it('refuses a jwksUri on a private address under NODE_ENV=production, as $new-client does', async () => {
    vi.stubEnv('NODE_ENV', 'production');
    try {
      const { platform } = platformUnder('/');
      const project = await platform.admin.initProject(parameters({ name: 'P' }));
      await expect(
        platform.admin.newClient(
          project.id,
          parameters({ name: 'x', jwksUri: 'https://169.254.169.254/keys' }),
        ),
      ).rejects.toMatchObject({ status: 400 });
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('validates like the HTTP operations and answers the same errors', async () => {
    const { platform } = platformUnder('/');
    await expect(platform.admin.initProject(parameters({}))).rejects.toMatchObject({ status: 400 });
    await expect(
      platform.admin.newClient('no-such-project', parameters({ name: 'x' })),
    ).rejects.toMatchObject({
      status: 404,
    });
    await expect(
      platform.admin.createUser('no-such-project', { userName: 'a', userType: 'Patient' }),
    ).rejects.toMatchObject({ status: 404 });
    const project = await platform.admin.initProject(parameters({ name: 'P' }));
    await expect(platform.admin.createUser(project.id, { userName: 'a' })).rejects.toMatchObject({
      status: 400,
      scimType: 'invalidValue',
    });
  });
});
