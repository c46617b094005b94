/**
 * Two instances over one PostgreSQL schema (each its own pool and its own `federatedSignIn`, as two
 * processes would be): the sign-in starts on one and its callback and resume land on the other.
 * Nothing of a sign-in in progress lives in an instance; the project's identity provider is read
 * from the database.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { federatedSignIn } from '../../src/auth/federation/federated-sign-in.js';
import { asyncHandler } from '../../src/http/async-handler.js';
import { postgresStorage } from '../../src/postgres.js';
import type { Storage } from '../../src/storage/types.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { TestBrowser } from './federation-browser.js';
import { postgresTestUrl } from '../helpers/postgres.js';

if (postgresTestUrl('federatedSignIn across instances on PostgreSQL')) {
  const freshSchema = schemaFactory(POSTGRES_URL!);
  let stores: Storage[] = [];
  let idp: DevIdp;
  let server: Server;
  let origin: string;
  /** Requests alternate between the instances: every other one goes to the other instance. */
  let turn = 0;

  function instance(storage: Storage): express.Express {
    const fed = federatedSignIn({ storage, onError: () => undefined });
    const app = express();
    app.use('/oauth2/federation', fed.router);
    app.get(
      '/authorize',
      asyncHandler(async (req, res) => {
        const ticket = new URL(req.originalUrl, origin).searchParams.get('ticket') ?? '';
        const resumeUrl = `${origin}/authorize?ticket=${ticket}`;
        const user = await fed.authenticateUser(req, res, {
          projectId: 'p1',
          clientId: 'app',
          ticket,
          resumeUrl,
        });
        if (user) res.json({ ...user, instance: stores.indexOf(storage) });
      }),
    );
    return app;
  }

  beforeAll(async () => {
    const schema = freshSchema();
    stores = [0, 1].map(() =>
      postgresStorage({ connectionString: POSTGRES_URL!, schema, maxConnections: 3 }),
    );
    const apps = stores.map(instance);
    server = createServer((req, res) => apps[turn++ % 2]!(req, res)).listen(0, '127.0.0.1');
    await once(server, 'listening');
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    idp = await startDevIdp({ redirectUris: [`${origin}/oauth2/federation/callback`] });
    await stores[0]!.createProject({
      id: 'p1',
      name: 'P1',
      strictMode: false,
      identityProvider: { issuer: idp.issuer, clientId: idp.jwtClientId, privateKey: { ...idp.privateKey } },
    });
    await stores[0]!.createUser('p1', {
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
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    for (const store of stores) await store.close();
  });

  describe('federatedSignIn across instances on PostgreSQL', () => {
    it('starts on one instance and finishes on the other', async () => {
      // The provider read back from the database, private key included.
      expect((await stores[1]!.readProject('p1')).identityProvider?.privateKey).toEqual(idp.privateKey);
      turn = 0;
      const browser = new TestBrowser();
      const atIdp = await browser.follow(`${origin}/authorize?ticket=t1`); // instance 0 starts it
      const page = await browser.signInAtIdp(atIdp, 'alice');
      expect(JSON.parse(page.body)).toMatchObject({ userId: 'u1' });
      // Both instances took part: the start on 0, and the callback or the resume on 1.
      expect(turn).toBeGreaterThanOrEqual(2);
    });
  });
}
