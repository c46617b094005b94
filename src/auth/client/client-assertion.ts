import {
  decodeJwt,
  decodeProtectedHeader,
  errors,
  jwtVerify,
  type CryptoKey,
  type JWTPayload,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
} from 'jose';
import { PlatformError } from '../../errors.js';
import type { ClientRecord } from '../../storage/types.js';
import { jwtNestingExceeds } from '../keys/jwt-nesting.js';

/** `client_assertion_type` of `private_key_jwt` (RFC 7523 §2.2). */
export const JWT_BEARER_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

/** Asymmetric algorithms accepted for client assertions (SMART Backend Services asks for RS384 and ES384). */
export const CLIENT_ASSERTION_ALGORITHMS: readonly string[] = [
  'RS256',
  'RS384',
  'RS512',
  'ES256',
  'ES384',
  'ES512',
];

/** Why an assertion was refused; stable, for logs and tests. */
export type ClientAssertionFailure =
  | 'malformed'
  | 'issuer-subject'
  | 'algorithm'
  | 'jku'
  | 'no-keys'
  | 'unknown-key'
  | 'signature'
  | 'audience'
  | 'expired'
  | 'not-yet-valid'
  | 'lifetime'
  | 'jti'
  | 'replay'
  | 'claims';

/**
 * A refused client assertion; code `ERR_CLIENT_ASSERTION_INVALID`, `reason` says why. The token
 * endpoint answers `invalid_client` for every reason.
 */
export class ClientAssertionError extends PlatformError {
  declare readonly code: 'ERR_CLIENT_ASSERTION_INVALID';
  readonly reason: ClientAssertionFailure;
  constructor(reason: ClientAssertionFailure, message: string, options?: { cause?: unknown }) {
    super('ERR_CLIENT_ASSERTION_INVALID', message, options);
    this.reason = reason;
  }
}

/**
 * The client id an assertion claims to be from (`sub`, which must equal `iss`), read without any
 * check, to look the client up. Throws `ClientAssertionError` for a malformed assertion.
 */
export function claimedClientId(assertion: string): string {
  if (jwtNestingExceeds(assertion))
    throw new ClientAssertionError('malformed', 'client_assertion nests too deeply');
  let payload: JWTPayload;
  try {
    payload = decodeJwt(assertion);
  } catch (cause) {
    throw new ClientAssertionError('malformed', 'client_assertion is not a JWT', { cause });
  }
  if (typeof payload.sub !== 'string' || payload.sub === '' || payload.iss !== payload.sub) {
    throw new ClientAssertionError(
      'issuer-subject',
      'client_assertion iss and sub must both be the client id',
    );
  }
  return payload.sub;
}

export interface VerifyClientAssertionOptions {
  client: ClientRecord;
  /** The client's keys (see `clientJwks`); undefined when it registered none. */
  keys: JWTVerifyGetKey | undefined;
  /** The absolute URL of this token endpoint: the only accepted `aud`. */
  tokenUrl: string;
  /** Accepted `alg` values (asymmetric only). */
  algorithms: readonly string[];
  /** Longest accepted `exp - now`, seconds (SMART: 5 minutes). */
  maxLifetime: number;
  /** Clock skew tolerated on `exp`/`nbf`/`iat`, seconds. */
  clockTolerance: number;
  /** Records a `jti` until `expiresAt` (epoch ms); false when already recorded (`Storage.useOnce`). */
  useOnce: (key: string, expiresAt: number) => Promise<boolean>;
  /** Clock (epoch ms). @default Date.now() */
  now?: number;
}

/** True for `none` and the HMAC algorithms, which a public key must never verify. */
export function isSymmetricOrNone(alg: string): boolean {
  return /^(hs\d+|none)$/i.test(alg);
}

function fail(reason: ClientAssertionFailure, message: string, cause?: unknown): never {
  throw new ClientAssertionError(reason, message, cause === undefined ? undefined : { cause });
}

function mapJoseError(error: unknown): never {
  if (error instanceof ClientAssertionError) throw error;
  if (error instanceof errors.JWTExpired) fail('expired', 'client_assertion has expired', error);
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === 'aud') fail('audience', 'client_assertion aud must be the token endpoint URL', error);
    if (error.claim === 'iss' || error.claim === 'sub')
      fail('issuer-subject', 'client_assertion iss/sub mismatch', error);
    if (error.claim === 'jti') fail('jti', 'client_assertion needs a jti', error);
    if (error.claim === 'nbf') fail('not-yet-valid', 'client_assertion nbf is in the future', error);
    fail('claims', `client_assertion claim "${error.claim}" is not acceptable`, error);
  }
  if (error instanceof errors.JOSEAlgNotAllowed || error instanceof errors.JOSENotSupported) {
    fail('algorithm', 'client_assertion alg is not accepted', error);
  }
  if (error instanceof errors.JWKSNoMatchingKey)
    fail('unknown-key', 'No registered key matches client_assertion', error);
  if (error instanceof errors.JWSSignatureVerificationFailed)
    fail('signature', 'client_assertion signature is invalid', error);
  if (error instanceof errors.JWSInvalid || error instanceof errors.JWTInvalid) {
    fail('malformed', 'client_assertion is malformed', error);
  }
  // JWKS fetch failures (timeout, bad JSON, HTTP error) and anything else: the keys are unavailable.
  fail('no-keys', 'The client keys could not be used', error);
}

/**
 * Verifies a `private_key_jwt` client assertion (RFC 7523 §3, SMART Backend Services
 * "Authenticating to the token endpoint"): `iss` = `sub` = client id, `aud` = the token URL, `exp`
 * present and at most `maxLifetime` ahead, `iat` and `nbf` (when present) not in the future beyond
 * `clockTolerance`, `jti` present and never seen before while unexpired, an
 * allowed asymmetric `alg`, a `jku` header only when equal to the registered `jwks_uri`, and a
 * valid signature by a registered key chosen by `kid` and key type. Throws `ClientAssertionError`.
 */
export async function verifyClientAssertion(
  assertion: string,
  options: VerifyClientAssertionOptions,
): Promise<JWTPayload> {
  const { client } = options;
  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(assertion);
  } catch (cause) {
    fail('malformed', 'client_assertion is not a JWS', cause);
  }
  // Checked here as well as by jose, so `none` and HS* never reach key selection.
  if (
    typeof header.alg !== 'string' ||
    !options.algorithms.includes(header.alg) ||
    isSymmetricOrNone(header.alg)
  ) {
    fail('algorithm', 'client_assertion alg is not accepted');
  }
  if (header.jku !== undefined && (typeof header.jku !== 'string' || header.jku !== client.jwksUri)) {
    fail('jku', 'client_assertion jku must equal the registered jwks_uri');
  }
  if (!options.keys) fail('no-keys', 'The client has no registered public keys');

  const now = options.now ?? Date.now();
  const verifyOptions: JWTVerifyOptions = {
    algorithms: [...options.algorithms],
    issuer: client.id,
    subject: client.id,
    audience: options.tokenUrl,
    clockTolerance: options.clockTolerance,
    requiredClaims: ['exp', 'jti'],
    currentDate: new Date(now),
  };

  let payload: JWTPayload;
  try {
    payload = (await jwtVerify(assertion, options.keys, verifyOptions)).payload;
  } catch (error) {
    // Several keys match when the header has no kid: try each (jose leaves this to the caller).
    if (error instanceof errors.JWKSMultipleMatchingKeys && Symbol.asyncIterator in error) {
      payload = await verifyWithEach(assertion, error, verifyOptions);
    } else {
      mapJoseError(error);
    }
  }

  // jose checks `iat` only against a maximum age: an assertion "issued" in the future is refused here.
  if (typeof payload.iat === 'number' && payload.iat > now / 1000 + options.clockTolerance) {
    fail('not-yet-valid', 'client_assertion iat is in the future');
  }
  const exp = payload.exp as number;
  if (exp - now / 1000 > options.maxLifetime + options.clockTolerance) {
    fail('lifetime', `client_assertion exp is more than ${options.maxLifetime} s ahead`);
  }
  if (typeof payload.jti !== 'string' || payload.jti === '' || payload.jti.length > 512) {
    fail('jti', 'client_assertion jti must be a non-empty string');
  }
  // Only after the signature check, so nobody can burn another client's jti values.
  const first = await options.useOnce(
    `client-assertion:${client.id}:${payload.jti}`,
    (exp + options.clockTolerance) * 1000,
  );
  if (!first) fail('replay', 'client_assertion jti was already used');
  return payload;
}

async function verifyWithEach(
  assertion: string,
  keys: AsyncIterable<CryptoKey>,
  options: JWTVerifyOptions,
): Promise<JWTPayload> {
  let last: unknown = new errors.JWKSNoMatchingKey();
  for await (const key of keys) {
    try {
      return (await jwtVerify(assertion, key, options)).payload;
    } catch (error) {
      last = error;
      if (!(error instanceof errors.JWSSignatureVerificationFailed)) break;
    }
  }
  mapJoseError(last);
}
