import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asyncHandler } from '../../src/http/async-handler.js';
import { fhirPlatform, type FhirPlatform } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';
import { TestBrowser } from './federation-browser.js';

const storage = memoryStorage();
let platform: FhirPlatform;
let idp: DevIdp;
let server: Server;
let origin: string;

beforeAll(async () => {
  const app = express();
  platform = fhirPlatform({ storage, bulk: false, audit: { enabled: false } });
  app.use('/api', platform.router);
  // A stand-in of the authorization endpoint under the platform's mount (after its router, which
  // learns the mount path of every request it sees).
  app.get(
    '/api/authorize',
    asyncHandler(async (req, res) => {
      const ticket = new URL(req.originalUrl, origin).searchParams.get('ticket') ?? '';
      const resumeUrl = `${origin}/api/authorize?ticket=${ticket}`;
      const user = await platform.authenticateUser(req, res, {
        projectId: 'p1',
        clientId: 'app',
        ticket,
        resumeUrl,
      });
      if (user) res.json(user);
    }),
  );
  server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  idp = await startDevIdp({ redirectUris: [`${origin}/api/oauth2/federation/callback`] });
  await storage.createProject({
    id: 'p1',
    name: 'P1',
    strictMode: false,
    identityProvider: { issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret },
  });
  await storage.createUser('p1', {
    id: 'u1',
    projectId: 'p1',
    userName: 'alice',
    userType: 'Patient',
    profileId: 'pat1',
    active: true,
    data: { emails: [{ value: 'alice@example.org' }] },
  });
});

afterAll(async () => {
  await idp?.close();
  await platform?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
});

describe('fhirPlatform mounts the federated sign-in by default', () => {
  it('signs a SCIM user in through the callback under the mount path', async () => {
    const browser = new TestBrowser();
    const page = await browser.signInAtIdp(
      await browser.follow(`${origin}/api/authorize?ticket=t1`),
      'alice',
    );
    expect(JSON.parse(page.body)).toEqual({ userId: 'u1' });
    expect(browser.visited).toContain(
      browser.visited.find((u) => u.startsWith(`${origin}/api/oauth2/federation/callback?`)),
    );
  });

  it('answers a forged callback with the refusal page', async () => {
    const page = await new TestBrowser().request(`${origin}/api/oauth2/federation/callback?state=x`);
    expect(page.status).toBe(400);
    expect(page.body).toContain('data-reason="bad-state"');
  });

  it('refuses federation options next to a host authenticateUser', () => {
    expect(() =>
      fhirPlatform({
        storage,
        bulk: false,
        authorization: { authenticateUser: () => Promise.resolve(undefined) },
        federation: { lifetime: 60 },
      }),
    ).toThrow(/federation/);
  });
});
