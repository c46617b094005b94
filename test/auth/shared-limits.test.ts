import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { createInterface } from 'node:readline';
import type { Express } from 'express';
import pg from 'pg';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { hashClientSecret } from '../../src/auth/client/client-secret.js';
import type { TokenRouterOptions } from '../../src/auth/token/token-router.js';
import { postgresStorage } from '../../src/postgres.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { expectOAuthError } from '../helpers/protocol-errors.js';
import { authApp, TOKEN_URL } from './auth-app.js';
import { clientKey, signAssertion, type ClientKey } from './client-keys.js';
import { postgresTestUrl } from '../helpers/postgres.js';

// Several instances of the platform on one PostgreSQL database: each with its own store object
// and pool over the same schema, as separate processes would be. Failed-authentication limits
// and client-assertion replay records must hold across them.

const SECRET = 'correct horse battery staple';
const ATTACKER = '203.0.113.66';
const CLIENT_HOST = '198.51.100.7';

if (postgresTestUrl('shared authentication limits on PostgreSQL')) {
  const connectionString = POSTGRES_URL!;
  const freshSchema = schemaFactory(connectionString);
  let secretHash: string;
  let es256: ClientKey;

  beforeAll(async () => {
    [es256, secretHash] = await Promise.all([clientKey('ES256'), hashClientSecret(SECRET)]);
  });

  /** `count` stores over one fresh schema, each with its own pool, holding project p1 and two clients. */
  async function instancesStorage(count: number, schema = freshSchema()): Promise<Storage[]> {
    const stores = Array.from({ length: count }, () =>
      postgresStorage({ connectionString, schema, maxConnections: 4 }),
    );
    for (const store of stores) afterTest(() => store.close());
    const [first] = stores as [Storage];
    await first.createProject({ id: 'p1', name: 'p1', strictMode: false });
    const client = { projectId: 'p1', scope: 'system/*.rs', admin: false, superAdmin: false };
    await first.createClient({ ...client, id: 'secret-client', name: 'secret', secretHash });
    await first.createClient({ ...client, id: 'jwt-client', name: 'jwt', jwks: { keys: [es256.publicJwk] } });
    return stores;
  }

  /** Ends every failure window of `schema` now (their end is epoch ms on the database clock). */
  async function endFailureWindows(schema: string): Promise<void> {
    const client = new pg.Client({ connectionString });
    await client.connect();
    try {
      await client.query(`UPDATE "${schema}".auth_failures SET reset_at = 0`);
    } finally {
      await client.end();
    }
  }

  function serve(app: Express): Server {
    app.set('trust proxy', true);
    const server = createServer(app).listen(0, '127.0.0.1');
    afterTest(() => new Promise((resolve) => server.close(resolve)));
    return server;
  }

  /** One listening platform instance per store (the token router and bearerAuth). */
  async function instances(count: number, token: Partial<TokenRouterOptions> = {}): Promise<Server[]> {
    return (await instancesStorage(count)).map((storage) => serve(authApp(storage, { token })));
  }

  function token(target: Server, from: string, form: Record<string, string>) {
    return request(target).post('/oauth2/token').set('X-Forwarded-For', from).type('form').send(form);
  }

  const secretForm = (secret: string) => ({
    grant_type: 'client_credentials',
    client_id: 'secret-client',
    client_secret: secret,
  });

  async function assertionForm() {
    return {
      grant_type: 'client_credentials',
      client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
      client_assertion: await signAssertion(es256, { clientId: 'jwt-client', aud: TOKEN_URL }),
    };
  }

  describe('failed-authentication limits across instances', () => {
    it('counts wrong secrets sent to two instances together (per client id and address)', async () => {
      const [a, b] = (await instances(2)) as [Server, Server];
      // 10 wrong secrets (the default limit), alternating between the instances.
      for (let i = 0; i < 10; i += 1) {
        const res = await token(i % 2 === 0 ? a : b, ATTACKER, secretForm('wrong'));
        expectOAuthError(res, 401, 'invalid_client');
      }
      for (const target of [a, b]) {
        const res = await token(target, ATTACKER, secretForm(SECRET));
        expectOAuthError(res, 429, 'slow_down');
        expect(Number(res.headers['retry-after'])).toBeGreaterThan(290);
      }
      // The client itself is not locked out: from its own address it gets tokens on both.
      for (const target of [a, b])
        expect((await token(target, CLIENT_HOST, secretForm(SECRET))).status).toBe(200);
    });

    it('counts failures of any kind per address over three instances', async () => {
      const servers = await instances(3, { rateLimit: { maxFailuresPerAddress: 5 } });
      const forms: Record<string, string>[] = [
        { grant_type: 'client_credentials' }, // no credentials at all
        secretForm('wrong'),
        { ...(await assertionForm()), client_assertion: 'not-a-jwt' },
        { grant_type: 'client_credentials', client_id: 'nobody', client_secret: 'x' },
        secretForm('also wrong'),
      ];
      for (const [i, form] of forms.entries()) {
        expectOAuthError(await token(servers[i % 3]!, ATTACKER, form), 401, 'invalid_client');
      }
      // Now every instance refuses that address, whatever it sends, even a valid assertion.
      for (const target of servers) {
        expectOAuthError(await token(target, ATTACKER, await assertionForm()), 429, 'slow_down');
        expectOAuthError(
          await token(target, ATTACKER, { grant_type: 'client_credentials' }),
          429,
          'slow_down',
        );
      }
      expect((await token(servers[0]!, CLIENT_HOST, await assertionForm())).status).toBe(200);
    });

    it('keeps the limits of the token endpoint and of Basic authentication apart', async () => {
      const stores = await instancesStorage(2);
      const [a, b] = stores.map((storage) =>
        serve(
          authApp(storage, {
            token: { rateLimit: { maxFailuresPerClientAddress: 2 } },
            bearer: { allowBasic: true, rateLimit: { maxFailuresPerClientAddress: 2 } },
          }),
        ),
      ) as [Server, Server];
      const basic = (target: Server, secret: string) =>
        request(target)
          .get('/fhir/R4/Patient')
          .set('X-Forwarded-For', ATTACKER)
          .auth('secret-client', secret);
      expect((await basic(a, 'wrong')).status).toBe(401);
      expect((await basic(b, 'wrong')).status).toBe(401);
      const refused = await basic(a, SECRET);
      expect(refused.status).toBe(429);
      expect(refused.body).toMatchObject({ resourceType: 'OperationOutcome' });
      // The token endpoint counts apart: its first wrong secret is checked.
      expectOAuthError(await token(b, ATTACKER, secretForm('wrong')), 401, 'invalid_client');
      expect((await token(a, ATTACKER, secretForm(SECRET))).status).toBe(200);
    });
  });

  /** A platform instance in a child process (`fixtures/token-host.ts`) on `schema`: its origin. */
  async function processInstance(schema: string): Promise<string> {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/auth/fixtures/token-host.ts', connectionString, schema],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    afterTest(() => {
      child.kill('SIGKILL');
    });
    for await (const line of createInterface({ input: child.stdout })) {
      if (line.startsWith('http://')) return line;
    }
    throw new Error('the instance exited before listening');
  }

  describe('failed-authentication limits across processes', () => {
    it('two server processes on one database count failures together', async () => {
      const [storage] = (await instancesStorage(1)) as [Storage];
      const schema = (storage.descriptor!.options as { schema: string }).schema;
      const origins = await Promise.all([processInstance(schema), processInstance(schema)]);
      const post = (origin: string, form: Record<string, string>) =>
        request(origin).post('/oauth2/token').set('X-Forwarded-For', ATTACKER).type('form').send(form);
      for (let i = 0; i < 10; i += 1) {
        expectOAuthError(await post(origins[i % 2]!, secretForm('wrong')), 401, 'invalid_client');
      }
      for (const origin of origins)
        expectOAuthError(await post(origin, secretForm(SECRET)), 429, 'slow_down');
    });
  });

  describe('client assertion replay across instances', () => {
    it('accepts an assertion once, whichever instance sees it first', async () => {
      const [a, b] = (await instances(2)) as [Server, Server];
      const form = await assertionForm();
      expect((await token(a, CLIENT_HOST, form)).status).toBe(200);
      const replay = await token(b, CLIENT_HOST, form);
      expectOAuthError(replay, 401, 'invalid_client');
    });

    it('accepts one of the same assertion sent to three instances at once', async () => {
      const servers = await instances(3);
      for (let round = 0; round < 5; round += 1) {
        const form = await assertionForm();
        const answers = await Promise.all(
          servers.flatMap((target) => [token(target, CLIENT_HOST, form), token(target, CLIENT_HOST, form)]),
        );
        expect(answers.map((r) => r.status).sort()).toEqual([200, 401, 401, 401, 401, 401]);
      }
    });

    it('useOnce on two stores over one schema: one winner per key, even all at once', async () => {
      const [a, b] = (await instancesStorage(2)) as [Storage, Storage];
      const expiresAt = Date.now() + 60_000;
      for (let key = 0; key < 20; key += 1) {
        const results = await Promise.all(
          Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? a : b).useOnce(`jti-${key}`, expiresAt)),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
      }
      // An expired value may be used again, once.
      expect(await a.useOnce('short', Date.now() - 1)).toBe(true);
      const again = await Promise.all([a.useOnce('short', expiresAt), b.useOnce('short', expiresAt)]);
      expect(again.filter(Boolean)).toHaveLength(1);
    });
  });

  describe('PostgreSQL failure counters', () => {
    it('count per key in windows on the database clock, and forget them when the window ends', async () => {
      const schema = freshSchema();
      const [a, b] = (await instancesStorage(2, schema)) as [Storage, Storage];
      const counts = a.failureCounts!;
      const long = 'k'.repeat(10_000) + '\u0000'; // any key: length and NULs do not matter
      expect(await counts.get(['x', long])).toEqual([undefined, undefined]);
      await counts.add(['x', long, long], 60_000);
      await b.failureCounts!.add(['x'], 60_000);
      const [x, l] = await b.failureCounts!.get(['x', long]);
      expect(x).toMatchObject({ failures: 2 });
      expect(l).toMatchObject({ failures: 1 });
      expect(x!.msLeft).toBeGreaterThan(55_000);
      expect(x!.msLeft).toBeLessThanOrEqual(60_000);
      // A window that ends: moved to its end on the database clock rather than slept past (a short
      // window could also end, on a loaded machine, before the first look).
      await counts.add(['short'], 60_000);
      expect((await counts.get(['short']))[0]).toMatchObject({ failures: 1 });
      await endFailureWindows(schema);
      expect(await counts.get(['short'])).toEqual([undefined]);
      await counts.add(['short'], 60_000);
      expect((await counts.get(['short']))[0]).toMatchObject({ failures: 1 });
    });
  });
}
