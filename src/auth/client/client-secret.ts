import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

// scrypt parameters: N=2^14, r=8, p=1 (the node default, ~16 MiB, a few ms per hash).
const KEY_LENGTH = 32;
const PARAMS: ScryptOptions = { N: 16384, r: 8, p: 1 };

function scryptAsync(secret: string, salt: Buffer, length: number, params: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(secret, salt, length, params, (error, key) => (error ? reject(error) : resolve(key)));
  });
}

/** A new random client secret (256 bits, base64url). */
export function generateClientSecret(): string {
  return randomBytes(32).toString('base64url');
}

/** Hashes a client secret for storage: `scrypt$N$r$p$<salt b64url>$<hash b64url>`. */
export async function hashClientSecret(secret: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(secret, salt, KEY_LENGTH, PARAMS);
  return ['scrypt', PARAMS.N, PARAMS.r, PARAMS.p, salt.toString('base64url'), key.toString('base64url')].join(
    '$',
  );
}

/** Checks a presented secret against a stored hash in constant time. */
export async function verifyClientSecret(secret: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, n, r, p, saltText, hashText] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hashText, 'base64url');
  if (expected.length === 0) return false;
  const key = await scryptAsync(secret, Buffer.from(saltText, 'base64url'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
  });
  return timingSafeEqual(key, expected);
}
