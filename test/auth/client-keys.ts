import { randomUUID } from 'node:crypto';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';

export interface ClientKey {
  alg: string;
  kid: string;
  privateKey: CryptoKey;
  privateJwk: JWK;
  publicJwk: JWK;
}

/** A client key pair with its JWKs (`kid` and `alg` set on both). */
export async function clientKey(alg: string, kid: string = randomUUID()): Promise<ClientKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const meta = { kid, alg };
  return {
    alg,
    kid,
    privateKey,
    privateJwk: { ...(await exportJWK(privateKey)), ...meta },
    publicJwk: { ...(await exportJWK(publicKey)), ...meta },
  };
}

export interface AssertionOptions {
  clientId: string;
  aud: string;
  /** Seconds from now. @default 120 */
  expiresIn?: number | null;
  jti?: string | null;
  iss?: string;
  sub?: string;
  header?: Record<string, unknown>;
  /** Extra claims (`iat`, `nbf`, …), set last. */
  claims?: Record<string, unknown>;
}

/** A SMART Backend Services client assertion signed with `key`. */
export async function signAssertion(
  key: { alg: string; kid: string; privateKey: CryptoKey | Uint8Array },
  options: AssertionOptions,
): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const payload: Record<string, unknown> = {
    iss: options.iss ?? options.clientId,
    sub: options.sub ?? options.clientId,
    aud: options.aud,
  };
  if (options.expiresIn !== null) payload.exp = now + (options.expiresIn ?? 120);
  if (options.jti !== null) payload.jti = options.jti ?? randomUUID();
  Object.assign(payload, options.claims);
  return new SignJWT(payload)
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT', ...options.header })
    .sign(key.privateKey);
}

/** An unsecured JWT (`alg: none`). */
export function unsecuredAssertion(options: AssertionOptions & { kid?: string }): string {
  const now = Math.floor(Date.now() / 1000);
  const enc = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${enc({ alg: 'none', kid: options.kid, typ: 'JWT' })}.${enc({
    iss: options.clientId,
    sub: options.clientId,
    aud: options.aud,
    exp: now + 60,
    jti: randomUUID(),
  })}.`;
}
