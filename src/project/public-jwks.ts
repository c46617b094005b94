import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { DEFAULT_MAX_JSON_DEPTH, jsonNestingExceeds } from '../http/json-depth.js';

/** Most keys a registered JWKS may hold. */
export const MAX_JWKS_KEYS = 20;

// Members that carry private key material (RFC 7518 §6.2.2, §6.3.2, §6.4; RFC 8037 §2).
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'];
const ASYMMETRIC_KEY_TYPES = new Set(['RSA', 'EC', 'OKP']);
// Signature algorithms usable with asymmetric keys (RFC 7518 §3.1, RFC 8037 §3.1).
const ASYMMETRIC_ALGS = new Set([
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'ES256K',
  'EdDSA',
  'Ed25519',
]);

/** A JWK Set of public keys (RFC 7517 §5). */
export interface PublicJwks {
  keys: Record<string, unknown>[];
}

/** The result of `parsePublicJwks`: the key set, or why it was refused. */
export type PublicJwksResult = { ok: true; jwks: PublicJwks } | { ok: false; problem: string };

/**
 * Parses JWK Set JSON text and checks that it holds 1 to `MAX_JWKS_KEYS` valid asymmetric public
 * signing keys: no private or symmetric key material (RFC 7517 §5, SMART Backend Services "Registering
 * a SMART Backend Service").
 */
export function parsePublicJwks(text: string): PublicJwksResult {
  // Stored with the client and cloned by storage: a deep document would overflow the stack there.
  if (jsonNestingExceeds(text, DEFAULT_MAX_JSON_DEPTH)) return { ok: false, problem: 'is nested too deeply' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, problem: 'is not valid JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { ok: false, problem: 'is not a JWK Set object' };
  }
  const keys = (parsed as { keys?: unknown }).keys;
  if (!Array.isArray(keys) || keys.length === 0) return { ok: false, problem: "has no 'keys' array of keys" };
  if (keys.length > MAX_JWKS_KEYS) return { ok: false, problem: `has more than ${MAX_JWKS_KEYS} keys` };
  const checked: Record<string, unknown>[] = [];
  for (const [index, key] of (keys as unknown[]).entries()) {
    const at = `keys[${index}]`;
    if (typeof key !== 'object' || key === null || Array.isArray(key))
      return { ok: false, problem: `${at} is not a JWK` };
    const jwk = key as Record<string, unknown>;
    if (typeof jwk.kty !== 'string' || !ASYMMETRIC_KEY_TYPES.has(jwk.kty)) {
      return { ok: false, problem: `${at} is not an RSA, EC or OKP key` };
    }
    const secret = PRIVATE_MEMBERS.find((member) => Object.hasOwn(jwk, member));
    if (secret) return { ok: false, problem: `${at} holds private key material ('${secret}')` };
    if (jwk.alg !== undefined && (typeof jwk.alg !== 'string' || !ASYMMETRIC_ALGS.has(jwk.alg))) {
      return { ok: false, problem: `${at} has an unsupported 'alg'` };
    }
    if (jwk.use !== undefined && jwk.use !== 'sig')
      return { ok: false, problem: `${at} is not a signing key` };
    if (jwk.kid !== undefined && typeof jwk.kid !== 'string')
      return { ok: false, problem: `${at} has a non-string 'kid'` };
    try {
      createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' });
    } catch {
      return { ok: false, problem: `${at} is not a valid public key` };
    }
    checked.push(jwk);
  }
  return { ok: true, jwks: { keys: checked } };
}
