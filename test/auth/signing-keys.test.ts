import { describe, expect, it } from 'vitest';
import { issueAccessToken, verifyAccessToken, AccessTokenError } from '../../src/auth/access/access-token.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import type { ClientRecord } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';

const client: ClientRecord = {
  id: 'c1',
  projectId: 'p1',
  name: 'c1',
  scope: 'system/*.rs',
  admin: false,
  superAdmin: false,
  revoked: false,
  createdAt: '',
  updatedAt: '',
};
const verifyOptions = {
  issuer: 'https://iss',
  audience: 'https://iss',
  algorithms: ['ES256', 'RS256'],
  clockTolerance: 0,
};

async function issue(keys: ReturnType<typeof signingKeys>, lifetime = 300) {
  return (
    await issueAccessToken(keys, {
      client,
      scopes: ['system/*.rs'],
      issuer: 'https://iss',
      audience: 'https://iss',
      lifetime,
    })
  ).token;
}

describe('signing keys', () => {
  it('generates one key on first use, saves it, and shares it with other instances', async () => {
    const storage = memoryStorage();
    const keys = signingKeys(storage);
    const [a, b] = await Promise.all([keys.current(), keys.current()]);
    expect(a.kid).toBe(b.kid);
    expect(a.alg).toBe('ES256');
    expect(await storage.listSigningKeys()).toHaveLength(1);
    const token = await issue(keys);
    const other = signingKeys(storage);
    expect((await verifyAccessToken(other, token, verifyOptions)).sub).toBe('c1');
    expect((await other.current()).kid).toBe(a.kid);
    expect((await other.jwks()).keys[0]).not.toHaveProperty('d');
  });

  it('signs RS256 when asked', async () => {
    const keys = signingKeys(memoryStorage(), { algorithm: 'RS256' });
    expect((await keys.current()).alg).toBe('RS256');
    expect(() => signingKeys(memoryStorage(), { algorithm: 'HS256' as never })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });

  it('keeps a rotated key verifying until its retention ends', async () => {
    const storage = memoryStorage();
    let now = Date.now();
    const keys = signingKeys(storage, { retention: 600, now: () => now });
    const before = await issue(keys);
    const oldKid = (await keys.current()).kid;
    const rotated = await keys.rotate();
    expect(rotated.kid).not.toBe(oldKid);
    expect((await keys.current()).kid).toBe(rotated.kid);
    // Another instance (another server sharing the store) agrees once it re-reads.
    expect((await signingKeys(storage).current()).kid).toBe(rotated.kid);
    expect((await verifyAccessToken(keys, before, { ...verifyOptions, now })).sub).toBe('c1');
    expect((await keys.jwks()).keys.map((k) => k.kid).sort()).toEqual([oldKid, rotated.kid].sort());

    now += 601_000;
    const long = await issue(keys, 3600);
    await expect(
      verifyAccessToken(keys, before, { ...verifyOptions, now, clockTolerance: 10_000 }),
    ).rejects.toThrow(AccessTokenError);
    expect((await verifyAccessToken(keys, long, { ...verifyOptions, now })).sub).toBe('c1');
    expect((await keys.jwks()).keys.map((k) => k.kid)).toEqual([rotated.kid]);
  });

  it('refuses tokens signed by an unknown key or with a disallowed alg', async () => {
    const token = await issue(signingKeys(memoryStorage()));
    const elsewhere = signingKeys(memoryStorage());
    await expect(verifyAccessToken(elsewhere, token, verifyOptions)).rejects.toMatchObject({
      reason: 'unknown-key',
    });
    const storage = memoryStorage();
    const keys = signingKeys(storage);
    const own = await issue(keys);
    await expect(
      verifyAccessToken(keys, own, { ...verifyOptions, algorithms: ['RS256'] }),
    ).rejects.toMatchObject({
      reason: 'invalid',
    });
    await expect(
      verifyAccessToken(keys, own, { ...verifyOptions, audience: 'https://other' }),
    ).rejects.toMatchObject({
      reason: 'invalid',
    });
  });
});
