import { createLocalJWKSet } from 'jose';
import { describe, expect, it } from 'vitest';
import {
  IdTokenSignatureError,
  idTokenAlgorithms,
  verifyIdTokenSignature,
  type IdTokenSignatureFailure,
} from '../../src/auth/federation/id-token-signature.js';
import { JwksFetchError } from '../../src/auth/keys/jwks-fetch.js';
import { hmacWith, idpKey, signedWith, unsigned } from './fixtures/hand-made-idp.js';

const CLAIMS = { iss: 'https://idp.example', sub: 'alice', aud: 'platform' };

/** The reason `verifyIdTokenSignature` refuses with, or 'verified'. */
async function outcome(
  token: string,
  keys: Parameters<typeof verifyIdTokenSignature>[1],
  algorithms = ['RS256'],
): Promise<IdTokenSignatureFailure | 'verified'> {
  try {
    await verifyIdTokenSignature(token, keys, algorithms);
    return 'verified';
  } catch (error) {
    expect(error).toBeInstanceOf(IdTokenSignatureError);
    return (error as IdTokenSignatureError).reason;
  }
}

describe('idTokenAlgorithms', () => {
  it('keeps the asymmetric algorithms the provider lists, RS256 when it lists none', () => {
    expect(idTokenAlgorithms(['RS256', 'HS256', 'none', 'ES256', 'EdDSA', 7])).toEqual([
      'RS256',
      'ES256',
      'EdDSA',
    ]);
    expect(idTokenAlgorithms(undefined)).toEqual(['RS256']);
    expect(idTokenAlgorithms(['HS256'])).toEqual([]);
  });
});

describe('verifyIdTokenSignature', () => {
  it('verifies a token signed by a published key, and refuses one by another key with its kid', async () => {
    const key = await idpKey('k1');
    const forger = await idpKey('k1');
    const keys = createLocalJWKSet({ keys: [key.publicJwk] });
    expect(await outcome(await signedWith(key)(CLAIMS), keys)).toBe('verified');
    expect(await outcome(await signedWith(forger)(CLAIMS), keys)).toBe('signature');
  });

  it('refuses alg none and HS256 before looking for a key, even when listed', async () => {
    const key = await idpKey('k1');
    const keys = createLocalJWKSet({ keys: [key.publicJwk] });
    expect(await outcome(unsigned(CLAIMS), keys, ['RS256', 'none'])).toBe('algorithm');
    expect(await outcome(await hmacWith('secret')(CLAIMS), keys, ['RS256', 'HS256'])).toBe('algorithm');
    expect(await outcome(await signedWith(key)(CLAIMS), keys, ['ES256'])).toBe('algorithm');
  });

  it('refuses an unknown kid, and a token without kid that several keys match', async () => {
    const [one, two] = [await idpKey('k1'), await idpKey('k2')];
    const keys = createLocalJWKSet({ keys: [one.publicJwk, two.publicJwk] });
    expect(await outcome(await signedWith(await idpKey('k3'))(CLAIMS), keys)).toBe('key');
    const withoutKid = signedWith(one, { kid: undefined });
    expect(await outcome(await withoutKid(CLAIMS), keys)).toBe('key');
    // One key of the type: no kid needed.
    const single = createLocalJWKSet({ keys: [one.publicJwk] });
    expect(await outcome(await withoutKid(CLAIMS), single)).toBe('verified');
  });

  it('says the keys are unavailable when there is no key set or its fetch failed', async () => {
    const token = await signedWith(await idpKey('k1'))(CLAIMS);
    expect(await outcome(token, undefined)).toBe('keys-unavailable');
    const failing = () => Promise.reject(new JwksFetchError('too-large', 'too large'));
    expect(await outcome(token, failing)).toBe('keys-unavailable');
  });

  it('refuses what is not a JWS', async () => {
    const keys = createLocalJWKSet({ keys: [(await idpKey('k1')).publicJwk] });
    expect(await outcome('not.a.jws', keys)).toBe('signature');
    expect(await outcome('', keys)).toBe('signature');
  });
});
