import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import request from 'supertest';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { hashClientSecret } from '../../src/auth/client/client-secret.js';
import type { GrantStore, NewClient, Storage } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';
import { authApp, TOKEN_URL } from './auth-app.js';
import { storageWithProjects } from './auth-storage.js';
import { clientKey, signAssertion, unsecuredAssertion, type ClientKey } from './client-keys.js';
import { eventually } from '../helpers/eventually.js';

const SECRET = 'correct horse battery staple';
let secretHash: string;
let es384: ClientKey;
let rs384: ClientKey;

function newClient(id: string, extra: Partial<NewClient> = {}): NewClient {
  return { id, projectId: 'p1', name: id, scope: 'system/*.rs', admin: false, superAdmin: false, ...extra };
}

function assertionForm(assertion: string, extra: Record<string, string> = {}) {
  return {
    grant_type: 'client_credentials',
    client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
    client_assertion: assertion,
    ...extra,
  };
}

function basic(id: string, secret: string): string {
  return `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`;
}

beforeAll(async () => {
  [es384, rs384] = await Promise.all([clientKey('ES384'), clientKey('RS384')]);
  secretHash = await hashClientSecret(SECRET);
});

describe('token endpoint and bearerAuth', () => {
  let storage: Storage;
  let app: ReturnType<typeof authApp>;
  beforeEach(async () => {
    storage = await storageWithProjects('p1', 'p2');
    await storage.createClient(newClient('jwt-client', { jwks: { keys: [{ ...es384.publicJwk }] } }));
    await storage.createClient(
      newClient('rs-client', { jwks: { keys: [{ ...rs384.publicJwk }] }, scope: 'system/*.*' }),
    );
    await storage.createClient(newClient('secret-client', { secretHash, scope: 'system/Observation.read' }));
    app = authApp(storage);
  });

  async function tokenFor(clientId = 'jwt-client', key = es384, extra: Record<string, string> = {}) {
    const res = await request(app)
      .post('/oauth2/token')
      .type('form')
      .send(assertionForm(await signAssertion(key, { clientId, aud: TOKEN_URL }), extra));
    return res;
  }

  it('gives a client holding only an ES384 private JWK a token that reads data', async () => {
    const res = await tokenFor('jwt-client', es384, { scope: 'system/Patient.read' });
    expect(res.status).toBe(200);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toMatchObject({ token_type: 'bearer', expires_in: 300, scope: 'system/Patient.read' });
    const claims = decodeJwt(res.body.access_token);
    expect(claims).toMatchObject({ iss: 'https://fhir.example.org', sub: 'jwt-client', project_id: 'p1' });
    expect(decodeProtectedHeader(res.body.access_token).typ).toBe('at+jwt');

    const read = await request(app)
      .get('/fhir/R4/Patient')
      .set('Authorization', `Bearer ${res.body.access_token}`);
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({
      id: 'jwt-client',
      projectId: 'p1',
      kind: 'client',
      scopes: ['system/Patient.read'],
    });
    // A scope the token lacks: 403, not 401.
    const other = await request(app)
      .get('/fhir/R4/Observation')
      .set('Authorization', `Bearer ${res.body.access_token}`);
    expect(other.status).toBe(403);
    expect(other.body.issue[0].code).toBe('forbidden');
  });

  it('grants requested ∩ allowed, all allowed when no scope is asked, invalid_scope when nothing fits', async () => {
    expect(
      (await tokenFor('rs-client', rs384, { scope: 'system/Patient.rs system/*.write' })).body.scope,
    ).toBe('system/Patient.rs system/*.write');
    expect((await tokenFor('jwt-client', es384, { scope: 'system/*.*' })).body.scope).toBe('system/*.rs');
    expect((await tokenFor('jwt-client')).body.scope).toBe('system/*.rs');
    const none = await tokenFor('jwt-client', es384, { scope: 'system/Patient.write' });
    expect(none.status).toBe(400);
    expect(none.body.error).toBe('invalid_scope');
  });

  it('refuses an empty scope and scopes naming unknown resource types with invalid_scope', async () => {
    for (const scope of ['', '   ', 'system/Foo.read', 'system/Foo.rs', 'system/Patient.rs system/Foo.rs']) {
      const res = await tokenFor('jwt-client', es384, { scope });
      expect({ scope, status: res.status, error: res.body.error }).toEqual({
        scope,
        status: 400,
        error: 'invalid_scope',
      });
    }
    // Known types, `*`, and scopes that are no resource scopes stay as they were.
    expect((await tokenFor('jwt-client', es384, { scope: 'system/*.rs launch' })).status).toBe(200);
  });

  it('honours a client-specific token lifetime', async () => {
    await storage.updateClient('jwt-client', { accessTokenLifetime: 3600 });
    expect((await tokenFor()).body.expires_in).toBe(3600);
  });

  it('refuses client assertions that fail any check with 401 invalid_client', async () => {
    const cases = [
      await signAssertion(es384, { clientId: 'jwt-client', aud: 'https://fhir.example.org/other' }),
      await signAssertion(es384, { clientId: 'jwt-client', aud: TOKEN_URL, expiresIn: -120 }),
      await signAssertion(es384, { clientId: 'jwt-client', aud: TOKEN_URL, expiresIn: 600 }),
      await signAssertion(rs384, { clientId: 'jwt-client', aud: TOKEN_URL }),
      unsecuredAssertion({ clientId: 'jwt-client', aud: TOKEN_URL, kid: es384.kid }),
      await signAssertion(
        {
          alg: 'HS256',
          kid: es384.kid,
          privateKey: new TextEncoder().encode(JSON.stringify(es384.publicJwk)),
        },
        { clientId: 'jwt-client', aud: TOKEN_URL },
      ),
      await signAssertion(es384, { clientId: 'nobody', aud: TOKEN_URL }),
      await signAssertion(es384, {
        clientId: 'jwt-client',
        aud: TOKEN_URL,
        header: { jku: 'https://evil.example/jwks' },
      }),
    ];
    for (const assertion of cases) {
      const res = await request(app).post('/oauth2/token').type('form').send(assertionForm(assertion));
      expect(res.status).toBe(401);
      expect(res.body.error).toBe('invalid_client');
      expect(res.headers['www-authenticate']).toBeUndefined();
    }
  });

  it('refuses an assertion issued an hour in the future with 401 invalid_client', async () => {
    const iat = Math.floor(Date.now() / 1000) + 3600;
    const assertion = await signAssertion(es384, { clientId: 'jwt-client', aud: TOKEN_URL, claims: { iat } });
    const res = await request(app).post('/oauth2/token').type('form').send(assertionForm(assertion));
    expect([res.status, res.body.error]).toEqual([401, 'invalid_client']);
  });

  it('refuses a replayed jti', async () => {
    const assertion = await signAssertion(es384, { clientId: 'jwt-client', aud: TOKEN_URL });
    expect(
      (await request(app).post('/oauth2/token').type('form').send(assertionForm(assertion))).status,
    ).toBe(200);
    const replay = await request(app).post('/oauth2/token').type('form').send(assertionForm(assertion));
    expect(replay.status).toBe(401);
    expect(replay.body.error).toBe('invalid_client');
  });

  it('authenticates with client_secret_basic and client_secret_post', async () => {
    const viaBasic = await request(app)
      .post('/oauth2/token')
      .set('Authorization', basic('secret-client', SECRET))
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(viaBasic.status).toBe(200);
    expect(viaBasic.body.scope).toBe('system/Observation.read');
    const viaPost = await request(app)
      .post('/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'secret-client', client_secret: SECRET });
    expect(viaPost.status).toBe(200);
  });

  it('refuses a wrong secret: 401 with a Basic challenge when Basic was used', async () => {
    const viaBasic = await request(app)
      .post('/oauth2/token')
      .set('Authorization', basic('secret-client', 'wrong'))
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(viaBasic.status).toBe(401);
    expect(viaBasic.body.error).toBe('invalid_client');
    expect(viaBasic.headers['www-authenticate']).toMatch(/^Basic /);
    const viaPost = await request(app)
      .post('/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'secret-client', client_secret: 'wrong' });
    expect(viaPost.status).toBe(401);
    expect(viaPost.body.error).toBe('invalid_client');
    // A client without a secret cannot use one.
    const noSecret = await request(app)
      .post('/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'jwt-client', client_secret: '' + SECRET });
    expect(noSecret.status).toBe(401);
  });

  it('refuses revoked clients and clients whose project is gone, and their tokens stop at once', async () => {
    const token = (await tokenFor()).body.access_token as string;
    const read = () => request(app).get('/fhir/R4/Patient').set('Authorization', `Bearer ${token}`);
    expect((await read()).status).toBe(200);

    await storage.updateClient('jwt-client', { revoked: true });
    const refused = await tokenFor();
    expect(refused.status).toBe(401);
    expect(refused.body.error).toBe('invalid_client');
    const afterRevoke = await read();
    expect(afterRevoke.status).toBe(401);
    expect(afterRevoke.headers['www-authenticate']).toMatch(/^Bearer .*error="invalid_token"/);

    const secretToken = (
      await request(app)
        .post('/oauth2/token')
        .type('form')
        .send({ grant_type: 'client_credentials', client_id: 'secret-client', client_secret: SECRET })
    ).body.access_token as string;
    await storage.deleteProject('p1');
    const gone = await request(app)
      .post('/oauth2/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'secret-client', client_secret: SECRET });
    expect(gone.status).toBe(401);
    expect(gone.body.error).toBe('invalid_client');
    expect(
      (await request(app).get('/fhir/R4/Observation').set('Authorization', `Bearer ${secretToken}`)).status,
    ).toBe(401);
  });

  it('reads the revoked tokens beside the client (at once); a revoked token is refused as revoked', async () => {
    const token = (await tokenFor()).body.access_token as string;
    const { jti, exp } = decodeJwt(token) as { jti: string; exp: number };
    const grants = storage.grants!;
    const events: string[] = [];
    // The revocation lookup takes a while; the client read is seen starting before it ends.
    const slowGrants: GrantStore = {
      put: (grant) => grants.put(grant),
      take: (kind, key) => grants.take(kind, key),
      use: (kind, key) => grants.use(kind, key),
      extend: (kind, key, expiresAt) => grants.extend(kind, key, expiresAt),
      revoke: (filter) => grants.revoke(filter),
      async get(kind, key) {
        // The lookup ends only once the client read has started: they run side by side.
        await eventually('the client read', () => events.includes('client read'));
        events.push('revocation read');
        return grants.get(kind, key);
      },
    };
    const watched = new Proxy(storage, {
      get(target, property, receiver) {
        if (property === 'readClient')
          return (id: string) => {
            events.push('client read');
            return target.readClient(id);
          };
        return Reflect.get(target, property, receiver) as unknown;
      },
    });
    const probe = authApp(storage, { bearer: { storage: watched, grants: slowGrants } });
    const read = () => request(probe).get('/fhir/R4/Patient').set('Authorization', `Bearer ${token}`);
    expect((await read()).status).toBe(200);
    expect(events).toEqual(['client read', 'revocation read']);

    // Revoked, of a revoked client too: the answer says revoked, as when the lookup came first.
    await grants.put({
      kind: 'revoked-token',
      key: jti,
      projectId: 'p1',
      clientId: 'jwt-client',
      expiresAt: exp * 1000,
      data: {},
    });
    await storage.updateClient('jwt-client', { revoked: true });
    const refused = await read();
    expect(refused.status).toBe(401);
    expect(refused.headers['www-authenticate']).toMatch(/error="invalid_token"/);
    expect(JSON.stringify(refused.body)).toContain('The access token is revoked');
  });

  it('answers malformed requests with RFC 6749 errors', async () => {
    const post = () => request(app).post('/oauth2/token');
    const noGrant = await post().type('form').send({ client_id: 'secret-client', client_secret: SECRET });
    expect([noGrant.status, noGrant.body.error]).toEqual([400, 'invalid_request']);
    const badGrant = await post()
      .type('form')
      .send({ grant_type: 'password', client_id: 'x', client_secret: 'y' });
    expect([badGrant.status, badGrant.body.error]).toEqual([400, 'unsupported_grant_type']);
    const json = await post().send({ grant_type: 'client_credentials' });
    expect([json.status, json.body.error]).toEqual([400, 'invalid_request']);
    const twoMethods = await post()
      .set('Authorization', basic('secret-client', SECRET))
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: 'secret-client', client_secret: SECRET });
    expect([twoMethods.status, twoMethods.body.error]).toEqual([400, 'invalid_request']);
    const repeated = await post()
      .type('form')
      .send('grant_type=client_credentials&grant_type=client_credentials');
    expect([repeated.status, repeated.body.error]).toEqual([400, 'invalid_request']);
    const noAuth = await post().type('form').send({ grant_type: 'client_credentials' });
    expect([noAuth.status, noAuth.body.error]).toEqual([401, 'invalid_client']);
    const badType = await post().type('form').send({
      grant_type: 'client_credentials',
      client_assertion_type: 'urn:other',
      client_assertion: 'x.y.z',
    });
    expect([badType.status, badType.body.error]).toEqual([400, 'invalid_request']);
    const garbage = await post().type('form').send(assertionForm('garbage'));
    expect([garbage.status, garbage.body.error]).toEqual([401, 'invalid_client']);
    const get = await request(app).get('/oauth2/token');
    expect([get.status, get.body.error]).toEqual([405, 'invalid_request']);
    for (const res of [noGrant, badGrant, json, get]) expect(res.headers['cache-control']).toBe('no-store');
  });

  it('refuses bad access tokens with 401 invalid_token', async () => {
    const token = (await tokenFor()).body.access_token as string;
    const [header, payload, signature] = token.split('.') as [string, string, string];
    const claims = decodeJwt(token);
    const enc = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const forgedPayload = `${header}.${enc({ ...claims, project_id: 'p2' })}.${signature}`;
    const none = `${enc({ ...decodeProtectedHeader(token), alg: 'none' })}.${payload}.`;
    const tampered = `${header}.${payload}.${signature.slice(0, -4)}AAAA`;
    for (const bad of [forgedPayload, none, tampered, 'not-a-jwt', `${header}.${payload}`]) {
      const res = await request(app).get('/fhir/R4/Patient').set('Authorization', `Bearer ${bad}`);
      expect(res.status).toBe(401);
      expect(res.body.resourceType).toBe('OperationOutcome');
      expect(res.headers['www-authenticate']).toMatch(/^Bearer /);
    }
    const anonymous = await request(app).get('/fhir/R4/Patient');
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers['www-authenticate']).toMatch(/^Bearer /);
  });

  it('refuses an expired access token and one issued for another audience', async () => {
    const token = (await tokenFor()).body.access_token as string;
    const later = authApp(storage, { bearer: { now: () => Date.now() + 400_000 } });
    expect(
      (await request(later).get('/fhir/R4/Patient').set('Authorization', `Bearer ${token}`)).status,
    ).toBe(401);
    const elsewhere = authApp(storage, { baseUrl: 'https://other.example.org' });
    expect(
      (await request(elsewhere).get('/fhir/R4/Patient').set('Authorization', `Bearer ${token}`)).status,
    ).toBe(401);
  });

  it('derives the token URL and issuer from the request when no baseUrl is set', async () => {
    const local = authApp(storage, { baseUrl: null });
    const host = 'api.example.test:8443';
    const assertion = await signAssertion(es384, {
      clientId: 'jwt-client',
      aud: `http://${host}/oauth2/token`,
    });
    const res = await request(local)
      .post('/oauth2/token')
      .set('Host', host)
      .type('form')
      .send(assertionForm(assertion));
    expect(res.status).toBe(200);
    const token = res.body.access_token as string;
    expect(decodeJwt(token).iss).toBe(`http://${host}`);
    const ok = await request(local)
      .get('/fhir/R4/Patient')
      .set('Host', host)
      .set('Authorization', `Bearer ${token}`);
    expect(ok.status).toBe(200);
    const otherHost = await request(local)
      .get('/fhir/R4/Patient')
      .set('Host', 'evil.example.test')
      .set('Authorization', `Bearer ${token}`);
    expect(otherHost.status).toBe(401);
  });
});

describe('token endpoint with a jwks_uri', () => {
  let server: Server;
  let jwksUrl: string;
  let fetches = 0;
  let served: ClientKey;
  beforeAll(async () => {
    served = await clientKey('ES384');
    const jwksApp = express();
    jwksApp.get('/jwks.json', (_req, res) => {
      fetches += 1;
      res.json({ keys: [served.publicJwk] });
    });
    jwksApp.get('/slow.json', () => {
      // Never answers: the token endpoint must time out.
    });
    server = jwksApp.listen(0, '127.0.0.1');
    await once(server, 'listening');
    jwksUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  });

  it('fetches the client JWKS once, honours a matching jku, and times out on a dead server', async () => {
    const storage = await storageWithProjects('p1');
    await storage.createClient(newClient('remote', { jwksUri: `${jwksUrl}/jwks.json` }));
    await storage.createClient(newClient('slow', { jwksUri: `${jwksUrl}/slow.json` }));
    const app = authApp(storage, { token: { jwks: { timeout: 300 } } });
    for (let i = 0; i < 3; i += 1) {
      const assertion = await signAssertion(served, {
        clientId: 'remote',
        aud: TOKEN_URL,
        header: i === 0 ? { jku: `${jwksUrl}/jwks.json` } : {},
      });
      const res = await request(app).post('/oauth2/token').type('form').send(assertionForm(assertion));
      expect(res.status).toBe(200);
    }
    expect(fetches).toBe(1);
    const slow = await request(app)
      .post('/oauth2/token')
      .type('form')
      .send(assertionForm(await signAssertion(served, { clientId: 'slow', aud: TOKEN_URL })));
    expect([slow.status, slow.body.error]).toEqual([401, 'invalid_client']);
  });
});

describe('failed authentication limits', () => {
  it('blocks a client id from an address after repeated failures, without blocking others or successful clients', async () => {
    const storage = await storageWithProjects('p1');
    await storage.createClient(newClient('secret-client', { secretHash }));
    await storage.createClient(newClient('jwt-client', { jwks: { keys: [{ ...es384.publicJwk }] } }));
    const app = authApp(storage, {
      token: { rateLimit: { maxFailuresPerClientAddress: 3, maxFailuresPerAddress: 100, windowSeconds: 60 } },
    });
    const attempt = (secret: string) =>
      request(app)
        .post('/oauth2/token')
        .type('form')
        .send({ grant_type: 'client_credentials', client_id: 'secret-client', client_secret: secret });
    for (let i = 0; i < 3; i += 1) expect((await attempt('wrong')).status).toBe(401);
    const blocked = await attempt(SECRET);
    expect(blocked.status).toBe(429);
    expect(blocked.body.error).toBe('slow_down');
    expect(Number(blocked.headers['retry-after'])).toBeGreaterThan(0);

    // A legitimate client fetching many tokens quickly is never limited.
    for (let i = 0; i < 25; i += 1) {
      const assertion = await signAssertion(es384, { clientId: 'jwt-client', aud: TOKEN_URL });
      expect(
        (await request(app).post('/oauth2/token').type('form').send(assertionForm(assertion))).status,
      ).toBe(200);
    }
  });

  it('blocks an address after repeated failures', async () => {
    const storage = memoryStorage();
    const app = authApp(storage, {
      token: { rateLimit: { maxFailuresPerClientAddress: 100, maxFailuresPerAddress: 3, windowSeconds: 60 } },
    });
    const statuses: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      const res = await request(app)
        .post('/oauth2/token')
        .type('form')
        .send({ grant_type: 'client_credentials', client_id: `guess-${i}`, client_secret: 'x' });
      statuses.push(res.status);
    }
    expect(statuses).toEqual([401, 401, 401, 429, 429]);
  });
});
