import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { CompactSign } from 'jose';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AccessTokenError, verifyAccessToken } from '../../src/auth/access/access-token.js';
import {
  ClientAssertionError,
  JWT_BEARER_ASSERTION_TYPE,
  claimedClientId,
} from '../../src/auth/client/client-assertion.js';
import { jwtNestingExceeds } from '../../src/auth/keys/jwt-nesting.js';
import type { SigningKeys } from '../../src/auth/keys/signing-keys.js';
import type { Storage } from '../../src/storage/types.js';
import { authApp, TOKEN_URL } from './auth-app.js';
import { clientKey, type ClientKey } from './client-keys.js';
import { storageWithProjects } from './auth-storage.js';

const deep = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
const b64 = (text: string) => Buffer.from(text).toString('base64url');

/** A client assertion validly signed by `key` whose payload carries `extra` (raw JSON) as claim `x`. */
async function assertionWith(key: ClientKey, clientId: string, extra: string): Promise<string> {
  const exp = Math.floor(Date.now() / 1000) + 120;
  const payload =
    `{"iss":"${clientId}","sub":"${clientId}","aud":"${TOKEN_URL}","exp":${exp},` +
    `"jti":"${randomUUID()}","x":${extra}}`;
  return new CompactSign(new TextEncoder().encode(payload))
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' })
    .sign(key.privateKey);
}

let es384: ClientKey;
beforeAll(async () => {
  es384 = await clientKey('ES384');
});

describe('jwtNestingExceeds', () => {
  it('looks at the decoded header and payload only', () => {
    const header = b64('{"alg":"ES384"}');
    expect(jwtNestingExceeds(`${header}.${b64(`{"x":${deep(99)}}`)}.sig`)).toBe(false);
    expect(jwtNestingExceeds(`${header}.${b64(`{"x":${deep(100)}}`)}.sig`)).toBe(true);
    expect(jwtNestingExceeds(`${b64(`{"x":${deep(5000)}}`)}.${b64('{}')}.sig`)).toBe(true);
    expect(jwtNestingExceeds(`${header}.${b64(`{"x":${deep(5)}}`)}.sig`, 3)).toBe(true);
    expect(jwtNestingExceeds('not-a-jwt')).toBe(false);
  });
});

describe('deeply nested JWTs', () => {
  let storage: Storage;
  let app: ReturnType<typeof authApp>;
  beforeEach(async () => {
    storage = await storageWithProjects('p1');
    await storage.createClient({
      id: 'jwt-client',
      projectId: 'p1',
      name: 'jwt-client',
      scope: 'system/*.rs',
      admin: false,
      superAdmin: false,
      jwks: { keys: [{ ...es384.publicJwk }] },
    });
    app = authApp(storage);
  });

  const token = (assertion: string) =>
    request(app).post('/oauth2/token').type('form').send({
      grant_type: 'client_credentials',
      client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
      client_assertion: assertion,
    });

  it('refuses a signed client assertion nested 5,000 deep with 401 invalid_client', async () => {
    const res = await token(await assertionWith(es384, 'jwt-client', deep(5000)));
    expect(res.status).toBe(401);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body.error).toBe('invalid_client');
    // The same client at an ordinary depth gets its token.
    const ok = await token(await assertionWith(es384, 'jwt-client', deep(3)));
    expect(ok.status).toBe(200);
    expect(typeof ok.body.access_token).toBe('string');
  });

  it('reads no claims out of a deep assertion', async () => {
    const jwt = await assertionWith(es384, 'jwt-client', deep(5000));
    let reason: string | undefined;
    try {
      claimedClientId(jwt);
    } catch (error) {
      if (error instanceof ClientAssertionError) reason = error.reason;
    }
    expect(reason).toBe('malformed');
  });

  it('refuses a deep bearer token as malformed, with 401 invalid_token', async () => {
    // 1,000 levels: deep enough, and the header still fits Node's 16 KiB header limit.
    const bearer = `${b64(`{"alg":"ES384","kid":"k","x":${deep(1000)}}`)}.${b64(`{"x":${deep(1000)}}`)}.c2ln`;
    const keys = { resolve: () => Promise.resolve(undefined) } as unknown as SigningKeys;
    let reason: string | undefined;
    try {
      await verifyAccessToken(keys, bearer, {
        issuer: 'https://fhir.example.org',
        audience: 'https://fhir.example.org',
        algorithms: ['ES384'],
        clockTolerance: 5,
      });
    } catch (error) {
      if (error instanceof AccessTokenError) reason = error.reason;
    }
    expect(reason).toBe('malformed');
    const res = await request(app).get('/fhir/R4/Patient').set('Authorization', `Bearer ${bearer}`);
    expect(res.status).toBe(401);
    expect(res.body.resourceType).toBe('OperationOutcome');
    expect(res.headers['www-authenticate']).toMatch(/invalid_token/);
  });
});
