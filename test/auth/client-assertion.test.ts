/* eslint-disable @typescript-eslint/require-await -- in-memory fakes of async callbacks */
import { createLocalJWKSet } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CLIENT_ASSERTION_ALGORITHMS,
  ClientAssertionError,
  claimedClientId,
  verifyClientAssertion,
  type VerifyClientAssertionOptions,
} from '../../src/auth/client/client-assertion.js';
import type { ClientRecord } from '../../src/storage/types.js';
import { clientKey, signAssertion, unsecuredAssertion, type ClientKey } from './client-keys.js';

const TOKEN_URL = 'https://fhir.example.org/oauth2/token';
const CLIENT_ID = 'client-1';

function client(keys: ClientKey[], extra: Partial<ClientRecord> = {}): ClientRecord {
  return {
    id: CLIENT_ID,
    projectId: 'p1',
    name: 'c',
    jwks: { keys: keys.map((k) => ({ ...k.publicJwk })) },
    scope: 'system/*.rs',
    admin: false,
    superAdmin: false,
    revoked: false,
    createdAt: '',
    updatedAt: '',
    ...extra,
  };
}

function options(c: ClientRecord, seen = new Set<string>()): VerifyClientAssertionOptions {
  return {
    client: c,
    keys: c.jwks ? createLocalJWKSet(c.jwks) : undefined,
    tokenUrl: TOKEN_URL,
    algorithms: CLIENT_ASSERTION_ALGORITHMS,
    maxLifetime: 300,
    clockTolerance: 5,
    useOnce: async (key) => {
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    },
  };
}

async function reason(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ClientAssertionError) return error.reason;
    throw error;
  }
  return 'accepted';
}

describe('client assertion verification (private_key_jwt)', () => {
  let es384: ClientKey;
  let rs384: ClientKey;
  let other: ClientKey;
  beforeAll(async () => {
    [es384, rs384, other] = await Promise.all([clientKey('ES384'), clientKey('RS384'), clientKey('ES384')]);
  });

  it('accepts every required algorithm', async () => {
    for (const alg of CLIENT_ASSERTION_ALGORITHMS) {
      const key = await clientKey(alg);
      const jwt = await signAssertion(key, { clientId: CLIENT_ID, aud: TOKEN_URL });
      expect(await reason(verifyClientAssertion(jwt, options(client([key]))))).toBe('accepted');
    }
  });

  it('picks the key by kid among several', async () => {
    const jwt = await signAssertion(rs384, { clientId: CLIENT_ID, aud: TOKEN_URL });
    expect(await reason(verifyClientAssertion(jwt, options(client([es384, rs384, other]))))).toBe('accepted');
  });

  it('tries each key of the right type when there is no kid', async () => {
    const noKid = { ...other, kid: undefined as unknown as string };
    const jwt = await signAssertion(noKid, { clientId: CLIENT_ID, aud: TOKEN_URL });
    expect(await reason(verifyClientAssertion(jwt, options(client([es384, other]))))).toBe('accepted');
  });

  it('refuses a wrong aud', async () => {
    const jwt = await signAssertion(es384, {
      clientId: CLIENT_ID,
      aud: 'https://other.example.org/oauth2/token',
    });
    expect(await reason(verifyClientAssertion(jwt, options(client([es384]))))).toBe('audience');
  });

  it('refuses an expired, a far-future and a missing exp', async () => {
    const c = client([es384]);
    const expired = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL, expiresIn: -60 });
    expect(await reason(verifyClientAssertion(expired, options(c)))).toBe('expired');
    const far = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL, expiresIn: 3600 });
    expect(await reason(verifyClientAssertion(far, options(c)))).toBe('lifetime');
    const none = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL, expiresIn: null });
    expect(await reason(verifyClientAssertion(none, options(c)))).toBe('claims');
  });

  it('refuses iat or nbf in the future beyond the clock tolerance', async () => {
    const c = client([es384]);
    const now = Math.floor(Date.now() / 1000);
    const sign = (claims: Record<string, unknown>) =>
      signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL, claims });
    expect(await reason(verifyClientAssertion(await sign({ iat: now + 3600 }), options(c)))).toBe(
      'not-yet-valid',
    );
    expect(await reason(verifyClientAssertion(await sign({ iat: now + 60 }), options(c)))).toBe(
      'not-yet-valid',
    );
    expect(await reason(verifyClientAssertion(await sign({ nbf: now + 60 }), options(c)))).toBe(
      'not-yet-valid',
    );
    // Within the 5 s tolerance, and in the past: accepted.
    expect(await reason(verifyClientAssertion(await sign({ iat: now + 3, nbf: now + 3 }), options(c)))).toBe(
      'accepted',
    );
    expect(await reason(verifyClientAssertion(await sign({ iat: now - 30 }), options(c)))).toBe('accepted');
  });

  it('refuses a missing or replayed jti', async () => {
    const c = client([es384]);
    const noJti = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL, jti: null });
    expect(await reason(verifyClientAssertion(noJti, options(c)))).toMatch(/jti|claims/);
    const seen = new Set<string>();
    const jwt = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL });
    expect(await reason(verifyClientAssertion(jwt, options(c, seen)))).toBe('accepted');
    expect(await reason(verifyClientAssertion(jwt, options(c, seen)))).toBe('replay');
  });

  it('refuses an unknown kid and a signature by an unregistered key', async () => {
    const c = client([es384]);
    const unknownKid = await signAssertion(other, { clientId: CLIENT_ID, aud: TOKEN_URL });
    expect(await reason(verifyClientAssertion(unknownKid, options(c)))).toBe('unknown-key');
    const forged = await signAssertion({ ...other, kid: es384.kid }, { clientId: CLIENT_ID, aud: TOKEN_URL });
    expect(await reason(verifyClientAssertion(forged, options(c)))).toBe('signature');
  });

  it('refuses alg none and HS256 keyed with the public key', async () => {
    const c = client([es384, rs384]);
    const none = unsecuredAssertion({ clientId: CLIENT_ID, aud: TOKEN_URL, kid: es384.kid });
    expect(await reason(verifyClientAssertion(none, options(c)))).toBe('algorithm');
    for (const secret of [JSON.stringify(rs384.publicJwk), String(rs384.publicJwk.n)]) {
      const hs = await signAssertion(
        { alg: 'HS256', kid: rs384.kid, privateKey: new TextEncoder().encode(secret) },
        { clientId: CLIENT_ID, aud: TOKEN_URL },
      );
      expect(await reason(verifyClientAssertion(hs, options(c)))).toBe('algorithm');
      // Even when a host lists HS256 by mistake, a public key never verifies it.
      expect(await reason(verifyClientAssertion(hs, { ...options(c), algorithms: ['HS256', 'ES384'] }))).toBe(
        'algorithm',
      );
    }
  });

  it('refuses iss different from sub, and a malformed assertion', async () => {
    const c = client([es384]);
    const jwt = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL, iss: 'someone-else' });
    expect(await reason(verifyClientAssertion(jwt, options(c)))).toBe('issuer-subject');
    expect(() => claimedClientId(jwt)).toThrow(ClientAssertionError);
    expect(await reason(verifyClientAssertion('not.a.jwt', options(c)))).toBe('malformed');
  });

  it('accepts jku only when equal to the registered jwks_uri', async () => {
    const c = client([es384], { jwksUri: 'https://client.example.org/jwks.json' });
    const good = await signAssertion(es384, {
      clientId: CLIENT_ID,
      aud: TOKEN_URL,
      header: { jku: 'https://client.example.org/jwks.json' },
    });
    expect(await reason(verifyClientAssertion(good, options(c)))).toBe('accepted');
    const bad = await signAssertion(es384, {
      clientId: CLIENT_ID,
      aud: TOKEN_URL,
      header: { jku: 'https://attacker.example.org/jwks.json' },
    });
    expect(await reason(verifyClientAssertion(bad, options(c)))).toBe('jku');
  });

  it('refuses a client without registered keys', async () => {
    const jwt = await signAssertion(es384, { clientId: CLIENT_ID, aud: TOKEN_URL });
    expect(await reason(verifyClientAssertion(jwt, options(client([], { jwks: undefined }))))).toBe(
      'no-keys',
    );
  });
});
