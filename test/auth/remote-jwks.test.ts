import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, LookupFunction } from 'node:net';
import type { JWK } from 'jose';
import request from 'supertest';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { JwksFetchError, jwksFetcher } from '../../src/auth/keys/jwks-fetch.js';
import { tokenRouter } from '../../src/auth/token/token-router.js';
import { memoryStorage } from '../../src/stores.js';
import type { NewClient } from '../../src/storage/types.js';
import { authApp, TOKEN_URL } from './auth-app.js';
import { storageWithProjects } from './auth-storage.js';
import { clientKey, signAssertion, type ClientKey } from './client-keys.js';

// Remote JWKS limits (issue 28 items 5-7): bytes and time of a fetch, keys kept and tried, and
// the addresses a jwks_uri may lead to. The JWKS server is on loopback, as in every auth test.

type Route = (req: IncomingMessage, res: ServerResponse) => void;

let server: Server;
let origin: string;
const routes = new Map<string, Route>();
const hits = new Map<string, number>();
let signer: ClientKey;

beforeAll(async () => {
  signer = await clientKey('ES384');
  server = createServer((req, res) => {
    const path = req.url ?? '';
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const route = routes.get(path);
    if (route) route(req, res);
    else res.writeHead(404).end();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(() => {
  routes.clear();
  hits.clear();
  vi.unstubAllEnvs();
});
afterAll(async () => {
  server.closeAllConnections();
  server.close();
  await once(server, 'close');
});

function serveJson(path: string, body: unknown): string {
  routes.set(path, (_req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
  });
  return `${origin}${path}`;
}

function newClient(id: string, keys: string | NonNullable<NewClient['jwks']>): NewClient {
  return {
    id,
    projectId: 'p1',
    name: id,
    scope: 'system/*.rs',
    admin: false,
    superAdmin: false,
    ...(typeof keys === 'string' ? { jwksUri: keys } : { jwks: keys }),
  };
}

/** The token endpoint's answer to an assertion by `key` for `clientId`, as `[status, error]`. */
async function tokenAnswer(
  app: ReturnType<typeof authApp>,
  clientId: string,
  key: ClientKey = signer,
  header: Record<string, unknown> = {},
): Promise<[number, string | undefined]> {
  const assertion = await signAssertion(key, { clientId, aud: TOKEN_URL, header });
  const res = await request(app).post('/oauth2/token').type('form').send({
    grant_type: 'client_credentials',
    client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
    client_assertion: assertion,
  });
  return [res.status, res.body.error as string | undefined];
}

async function appWith(clients: NewClient[], jwks: Record<string, unknown> = {}) {
  const storage = await storageWithProjects('p1');
  for (const client of clients) await storage.createClient(client);
  return authApp(storage, { token: { jwks } });
}

describe('remote JWKS size and time', () => {
  it('refuses a JWKS over 64 KiB (the inline jwks limit) with 401 invalid_client; one under it works', async () => {
    const small = serveJson('/small.json', { keys: [signer.publicJwk] });
    const big = serveJson('/big.json', { keys: [signer.publicJwk], padding: 'x'.repeat(64 * 1024) });
    const app = await appWith([newClient('small', small), newClient('big', big)]);
    expect(await tokenAnswer(app, 'small')).toEqual([200, undefined]);
    expect(await tokenAnswer(app, 'big')).toEqual([401, 'invalid_client']);
  });

  it('aborts a JWKS that never ends as soon as it passes maxBytes', async () => {
    let closedEarly: Promise<unknown> | undefined;
    routes.set('/endless.json', (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('{"keys":[');
      const chunk = ' '.repeat(16 * 1024);
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
      };
      res.on('drain', pump);
      closedEarly = once(res, 'close');
      pump();
    });
    // A long timeout: only the byte cap can end this fetch within the test's time.
    const app = await appWith([newClient('endless', `${origin}/endless.json`)], {
      maxBytes: 4096,
      timeout: 60_000,
    });
    expect(await tokenAnswer(app, 'endless')).toEqual([401, 'invalid_client']);
    await closedEarly;
  });

  it('gives up on a JWKS whose body never ends after timeout', async () => {
    routes.set('/stalled.json', (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write('{"keys":[');
    });
    const app = await appWith([newClient('stalled', `${origin}/stalled.json`)], { timeout: 200 });
    expect(await tokenAnswer(app, 'stalled')).toEqual([401, 'invalid_client']);
  });

  it('follows no redirect', async () => {
    const target = serveJson('/target.json', { keys: [signer.publicJwk] });
    routes.set('/moved.json', (_req, res) => res.writeHead(302, { Location: target }).end());
    const app = await appWith([newClient('moved', `${origin}/moved.json`)]);
    expect(await tokenAnswer(app, 'moved')).toEqual([401, 'invalid_client']);
    expect(hits.get('/target.json')).toBeUndefined();
  });
});

describe('jwks options', () => {
  it('are checked when the token router is created', () => {
    const storage = memoryStorage();
    const make = (jwks: Record<string, unknown>) => () => tokenRouter({ storage, jwks });
    expect(make({ maxbytes: 1 })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'jwks.maxbytes' }),
    );
    for (const [name, value] of [
      ['maxBytes', 0],
      ['maxKeys', 1.5],
      ['maxKeysTried', -1],
      ['timeout', 'soon'],
      ['allowPrivateAddresses', 'no'],
    ] as const) {
      expect(make({ [name]: value })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: `jwks.${name}` }),
      );
    }
  });
});

describe('remote JWKS keys', () => {
  it('keeps the first maxKeys keys of a JWKS (100 by default)', async () => {
    const keys: JWK[] = Array.from({ length: 150 }, (_, i) => ({ ...signer.publicJwk, kid: `copy-${i}` }));
    keys[120] = { ...signer.publicJwk };
    const uri = serveJson('/many.json', { keys });
    const storage = await storageWithProjects('p1');
    await storage.createClient(newClient('many', uri));
    expect(await tokenAnswer(authApp(storage), 'many')).toEqual([401, 'invalid_client']);
    const roomy = authApp(storage, { token: { jwks: { maxKeys: 150 } } });
    expect(await tokenAnswer(roomy, 'many')).toEqual([200, undefined]);
  });

  it('tries at most maxKeysTried keys (5 by default) for an assertion without kid, remote or inline', async () => {
    const others = await Promise.all(Array.from({ length: 7 }, () => clientKey('ES384')));
    const keys = [...others.map((k) => k.publicJwk), signer.publicJwk].map(({ kid: _kid, ...jwk }) => jwk);
    const uri = serveJson('/unnamed.json', { keys });
    const storage = await storageWithProjects('p1');
    await storage.createClient(newClient('remote', uri));
    await storage.createClient(newClient('inline', { keys }));
    const noKid = { kid: undefined };
    for (const id of ['remote', 'inline']) {
      expect(await tokenAnswer(authApp(storage), id, signer, noKid)).toEqual([401, 'invalid_client']);
      const patient = authApp(storage, { token: { jwks: { maxKeysTried: 8 } } });
      expect(await tokenAnswer(patient, id, signer, noKid)).toEqual([200, undefined]);
    }
  });
});

describe('remote JWKS addresses', () => {
  it('refuses a jwks_uri on a loopback address when private addresses are not allowed, without connecting', async () => {
    const port = (server.address() as AddressInfo).port;
    const uris = {
      v4: serveJson('/keys.json', { keys: [signer.publicJwk] }),
      name: `http://localhost:${port}/keys.json`,
    };
    const clients = Object.entries(uris).map(([id, uri]) => newClient(id, uri));
    const strict = await appWith(clients, { allowPrivateAddresses: false });
    for (const id of Object.keys(uris))
      expect(await tokenAnswer(strict, id)).toEqual([401, 'invalid_client']);
    expect(hits.get('/keys.json')).toBeUndefined();
    const lenient = await appWith(clients, { allowPrivateAddresses: true });
    for (const id of Object.keys(uris)) expect(await tokenAnswer(lenient, id)).toEqual([200, undefined]);
  });

  it('refuses loopback addresses by default under NODE_ENV=production', async () => {
    const uri = serveJson('/keys.json', { keys: [signer.publicJwk] });
    vi.stubEnv('NODE_ENV', 'production');
    const app = await appWith([newClient('loopback', uri)]);
    expect(await tokenAnswer(app, 'loopback')).toEqual([401, 'invalid_client']);
    expect(hits.get('/keys.json')).toBeUndefined();
  });
});

describe('jwksFetcher: the address checked when connecting', () => {
  // Stands for a DNS answer the registered name did not have (rebinding): keys.test -> 127.0.0.1.
  const rebound: LookupFunction = (_hostname, options, callback) => {
    if (options.all) callback(null, [{ address: '127.0.0.1', family: 4 }]);
    else callback(null, '127.0.0.1', 4);
  };

  async function failure(promise: Promise<unknown>): Promise<string> {
    try {
      await promise;
    } catch (error) {
      if (error instanceof JwksFetchError) return error.reason;
      throw error;
    }
    return 'fetched';
  }

  it('refuses a name that resolves to a private address, without connecting; allowed, it is fetched', async () => {
    serveJson('/keys.json', { keys: [signer.publicJwk] });
    const url = new URL(`http://keys.test:${(server.address() as AddressInfo).port}/keys.json`);
    const limits = { timeout: 2000, maxBytes: 4096 };
    const strict = jwksFetcher({ ...limits, allowPrivateAddresses: false }, rebound);
    expect(await failure(strict.fetch(url))).toBe('address');
    expect(hits.get('/keys.json')).toBeUndefined();
    const lenient = jwksFetcher({ ...limits, allowPrivateAddresses: true }, rebound);
    expect(await lenient.fetch(url)).toEqual({ keys: [signer.publicJwk] });
  });

  it('names each failure', async () => {
    serveJson('/keys.json', { keys: [signer.publicJwk] });
    routes.set('/missing.json', (_req, res) => res.writeHead(404).end());
    routes.set('/text.json', (_req, res) => res.writeHead(200).end('not json'));
    routes.set('/deep.json', (_req, res) => res.writeHead(200).end('['.repeat(200) + ']'.repeat(200)));
    const fetcher = jwksFetcher({ timeout: 2000, maxBytes: 64, allowPrivateAddresses: true });
    const at = (path: string) => fetcher.fetch(new URL(`${origin}${path}`));
    expect(await failure(at('/keys.json'))).toBe('too-large');
    expect(await failure(at('/missing.json'))).toBe('status');
    expect(await failure(at('/text.json'))).toBe('invalid');
    const deep = jwksFetcher({ timeout: 2000, maxBytes: 4096, allowPrivateAddresses: true });
    expect(await failure(deep.fetch(new URL(`${origin}/deep.json`)))).toBe('invalid');
    expect(await failure(fetcher.fetch(new URL('http://127.0.0.1:1/keys.json')))).toBe('network');
  });
});
