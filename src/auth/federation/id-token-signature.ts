/**
 * The signature of an identity provider's ID token, verified against the keys it publishes at its
 * `jwks_uri` (OpenID Connect Core 1.0 §3.1.3.7 step 6, §10.1). `openid-client` checks the ID
 * token's claims (issuer, audience, expiry, nonce, …) but, without its non-repudiation checks, not
 * its signature: a token from the token endpoint over TLS would do for the specification, but the
 * platform does not take the transport's word for it. Only asymmetric signatures count: `none`
 * and MAC algorithms (`HS256` with the client secret) are refused whatever the provider lists.
 */
import { compactVerify, decodeProtectedHeader, errors, type JWTVerifyGetKey } from 'jose';
import { JwksFetchError } from '../keys/jwks-fetch.js';

/** Why an ID token's signature was not accepted. */
export type IdTokenSignatureFailure =
  /** Its `alg` is not an asymmetric algorithm the provider lists. */
  | 'algorithm'
  /** No published key matches it (after fetching the set again), or several do and it has no `kid`. */
  | 'key'
  /** The key matched, the signature does not (a forged or altered token), or it is no JWS. */
  | 'signature'
  /** The provider's keys could not be read: no usable `jwks_uri`, or its fetch failed (`cause`). */
  | 'keys-unavailable';

/** An ID token whose signature was not verified; `reason` says why. */
export class IdTokenSignatureError extends Error {
  readonly reason: IdTokenSignatureFailure;
  constructor(reason: IdTokenSignatureFailure, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'IdTokenSignatureError';
    this.reason = reason;
  }
}

/** The asymmetric JWS algorithms (RFC 7518 §3.1, RFC 8037 §3.1) an ID token may be signed with. */
const ASYMMETRIC_ALGORITHMS: ReadonlySet<string> = new Set([
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
]);

/**
 * The algorithms accepted for a provider's ID tokens: the asymmetric ones of its
 * `id_token_signing_alg_values_supported`, or `RS256` when it lists none (the default of
 * OpenID Connect Core §3.1.3.7 step 7).
 */
export function idTokenAlgorithms(listed: unknown): string[] {
  if (!Array.isArray(listed)) return ['RS256'];
  return listed.filter((alg): alg is string => typeof alg === 'string' && ASYMMETRIC_ALGORITHMS.has(alg));
}

/**
 * Throws `IdTokenSignatureError` unless one of `keys` signed `idToken` with one of `algorithms`
 * that is asymmetric.
 */
export async function verifyIdTokenSignature(
  idToken: string,
  keys: JWTVerifyGetKey | undefined,
  algorithms: readonly string[],
): Promise<void> {
  let alg: unknown;
  try {
    alg = decodeProtectedHeader(idToken).alg;
  } catch (cause) {
    throw new IdTokenSignatureError('signature', 'The ID token is not a JWS', { cause });
  }
  // Checked before any key is looked for: `none` and HS* never reach the key set, whatever is listed.
  if (typeof alg !== 'string' || !ASYMMETRIC_ALGORITHMS.has(alg) || !algorithms.includes(alg)) {
    throw new IdTokenSignatureError('algorithm', 'The ID token alg is not accepted');
  }
  if (!keys) throw new IdTokenSignatureError('keys-unavailable', 'The provider publishes no usable jwks_uri');
  try {
    await compactVerify(idToken, keys, { algorithms: [...algorithms] });
  } catch (error) {
    throw signatureError(error);
  }
}

function signatureError(error: unknown): IdTokenSignatureError {
  if (error instanceof JwksFetchError) {
    return new IdTokenSignatureError('keys-unavailable', "The provider's keys could not be read", {
      cause: error,
    });
  }
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys) {
    return new IdTokenSignatureError('key', 'No published key of the provider matches the ID token', {
      cause: error,
    });
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return new IdTokenSignatureError('algorithm', 'The ID token alg is not accepted', { cause: error });
  }
  // A signature that does not verify, a malformed token, or a published key jose cannot use.
  return new IdTokenSignatureError('signature', 'ID token signature invalid', { cause: error });
}
