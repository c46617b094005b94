import fs from 'node:fs';
import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { projectRouter } from '../../src/project/router.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { tempDir } from '../helpers/temp-dir.js';

const FHIR = '/api/fhir/R4';
const SUPER = testToken({ projectId: null, kind: 'super-admin', id: 'root', superAdmin: true });
const params = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });
const KEY = { kty: 'EC', crv: 'P-256', x: 'x', y: 'y', d: 'secret-d', kid: 'k1' };

async function setup() {
  const storage = memoryStorage();
  const app = express();
  app.use(FHIR, projectRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
  const settings = (auth: string, ...parameter: unknown[]) =>
    request(app)
      .post(`${FHIR}/Project/p1/$settings`)
      .set('Authorization', auth)
      .set('Content-Type', 'application/fhir+json')
      .send(JSON.stringify(params(...parameter)));
  return { storage, app, settings };
}

describe('the identity provider in Project/$settings', () => {
  it('a project admin sets it; the answer never holds the secret nor the key', async () => {
    const { storage, app, settings } = await setup();
    const admin = testToken({ projectId: 'p1', admin: true });
    const res = await settings(
      admin,
      { name: 'idpIssuer', valueUri: 'https://login.example.org/' },
      { name: 'idpClientId', valueString: 'fhir' },
      { name: 'idpClientSecret', valueString: 's3cret' },
      { name: 'idpClaim', valueString: 'preferred_username' },
      { name: 'idpMatch', valueCode: 'userName' },
      { name: 'idpScope', valueString: 'openid profile' },
    );
    expect(res.status).toBe(200);
    expect(res.body.identityProvider).toEqual({
      issuer: 'https://login.example.org',
      clientId: 'fhir',
      clientAuthentication: 'client_secret_basic',
      claim: 'preferred_username',
      matchAttribute: 'userName',
      scope: 'openid profile',
    });
    expect(JSON.stringify(res.body)).not.toContain('s3cret');
    expect((await storage.readProject('p1')).identityProvider?.clientSecret).toBe('s3cret');

    // A private key replaces the secret; the read answers its kid only.
    const key = await settings(SUPER, { name: 'idpPrivateKey', valueString: JSON.stringify(KEY) });
    expect(key.body.identityProvider.clientAuthentication).toBe('private_key_jwt');
    expect(key.body.identityProvider.keyId).toBe('k1');
    const stored = (await storage.readProject('p1')).identityProvider;
    expect(stored?.clientSecret).toBeUndefined();
    expect(stored?.privateKey).toEqual(KEY);
    const read = await request(app).get(`${FHIR}/Project/p1`).set('Authorization', admin);
    expect(JSON.stringify(read.body)).not.toContain('secret-d');
    expect(read.body.identityProvider.issuer).toBe('https://login.example.org');

    const reset = await settings(admin, { name: 'reset', valueCode: 'identityProvider' });
    expect(reset.status).toBe(200);
    expect(reset.body).not.toHaveProperty('identityProvider');
    expect((await storage.readProject('p1')).identityProvider).toBeUndefined();
  });

  it('refuses bad values at their expression, and members who are not admins', async () => {
    const { settings } = await setup();
    const bad = async (parameter: unknown, expression: string) => {
      const res = await settings(SUPER, parameter, { name: 'idpClientId', valueString: 'c' });
      expect(res.status).toBe(400);
      expect(res.body.issue[0].expression).toEqual([expression]);
    };
    await bad({ name: 'idpIssuer', valueUri: 'http://idp.example.org' }, 'Parameters.parameter[0].valueUri');
    await bad({ name: 'idpIssuer', valueUri: 'not a url' }, 'Parameters.parameter[0].valueUri');
    await bad(
      { name: 'idpIssuer', valueUri: 'https://user:pass@idp.example.org' },
      'Parameters.parameter[0].valueUri',
    );
    await bad({ name: 'idpMatch', valueCode: 'phone' }, 'Parameters.parameter[0].valueCode');
    await bad({ name: 'idpScope', valueString: 'email' }, 'Parameters.parameter[0].valueString');
    await bad({ name: 'idpPrivateKey', valueString: '{"kty":"EC"}' }, 'Parameters.parameter[0].valueString');
    // Without an issuer there is no provider.
    const noIssuer = await settings(SUPER, { name: 'idpClientId', valueString: 'c' });
    expect(noIssuer.status).toBe(400);
    // http is for a provider on this machine.
    const local = await settings(
      SUPER,
      { name: 'idpIssuer', valueUri: 'http://localhost:8104' },
      { name: 'idpClientId', valueString: 'c' },
    );
    expect(local.status).toBe(200);
    const member = await settings(testToken({ projectId: 'p1' }), { name: 'idpClientId', valueString: 'd' });
    expect(member.status).toBe(403);
  });
});

describe('the identity provider on the file store', () => {
  it('survives a restart, private key included', async () => {
    const dir = tempDir('idp-file-');
    try {
      const provider = { issuer: 'https://idp.example.org', clientId: 'c', privateKey: KEY, claim: 'sub' };
      const first = await fileStorage({ dir });
      await first.createProject({ id: 'p1', name: 'P1', strictMode: false });
      await first.updateProject('p1', { identityProvider: provider });
      await first.close();
      const second = await fileStorage({ dir });
      expect((await second.readProject('p1')).identityProvider).toEqual(provider);
      await second.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
