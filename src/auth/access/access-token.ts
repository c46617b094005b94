import { randomUUID } from 'node:crypto';
import { SignJWT, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import { PlatformError } from '../../errors.js';
import type { ClientRecord } from '../../storage/types.js';
import { PLATFORM_ADMIN_SCOPE, PROJECT_ADMIN_SCOPE, adminRights } from './admin-scopes.js';
import { jwtNestingExceeds } from '../keys/jwt-nesting.js';
import type { Principal } from '../../http/principal.js';
import { splitScopes } from './scopes.js';
import type { SigningKeys } from '../keys/signing-keys.js';

/** JWT `typ` of access tokens (RFC 9068 §2.1). */
export const ACCESS_TOKEN_TYPE = 'at+jwt';

/** The claims of an access token issued by this server (RFC 9068 §2.2 plus the principal's rights). */
export interface AccessTokenClaims extends JWTPayload {
  iss: string;
  /** The client id; for a token issued to a signed-in user (`principal_kind` `user`), the user's id. */
  sub: string;
  aud: string | string[];
  exp: number;
  iat: number;
  jti: string;
  client_id: string;
  /** Granted scopes, space-separated. */
  scope: string;
  /** The client's project (null for a super admin). */
  project_id: string | null;
  principal_kind: Principal['kind'];
  /** Project-admin rights: true exactly when `scope` holds `project:admin`. */
  admin: boolean;
  /** Super-admin rights: true exactly when `scope` holds `platform:admin`. */
  super_admin: boolean;
  /** User tokens only: the user's profile resource as a relative reference (`Patient/123`). */
  fhirUser?: string;
  /** User tokens only: the launch context patient's id (SMART `launch/patient`), when one was chosen. */
  patient?: string;
  /**
   * User tokens only: the authorization (the refresh family of one consent) the token was issued
   * from. The token counts only while that authorization lives: a reused code or refresh token, or
   * the revocation of one of its refresh tokens, ends it.
   */
  family?: string;
}

/** The signed-in user a token is issued to (SMART App Launch); absent for a client's own token. */
export interface AccessTokenUser {
  /** The user's id in the client's project (the SCIM user id). */
  id: string;
  /** The user's profile resource as a relative reference (`Patient/123`, `Practitioner/abc`). */
  fhirUser: string;
  /** The launch context patient's id, when the app asked for `launch/patient` and one was chosen. */
  patient?: string;
  /** The authorization (refresh family) the token is issued from (the `family` claim). */
  family?: string;
}

export interface IssueAccessTokenInput {
  client: ClientRecord;
  /** Granted scopes. */
  scopes: readonly string[];
  issuer: string;
  audience: string;
  /** Seconds. */
  lifetime: number;
  /** Clock (epoch ms). @default Date.now() */
  now?: number;
  /** The signed-in user the app acts for (SMART App Launch). Such a token carries no admin rights. */
  user?: AccessTokenUser;
}

export interface IssuedAccessToken {
  token: string;
  expiresIn: number;
  claims: AccessTokenClaims;
}

/** The principal kind of a client. */
export function clientPrincipalKind(client: ClientRecord): Principal['kind'] {
  return client.superAdmin ? 'super-admin' : 'client';
}

/** Signs an access token for `client` with the current server key. */
export async function issueAccessToken(
  keys: SigningKeys,
  input: IssueAccessTokenInput,
): Promise<IssuedAccessToken> {
  const key = await keys.current();
  const iat = Math.floor((input.now ?? Date.now()) / 1000);
  const lifetime = Math.floor(input.lifetime);
  // A role counts only with its administration scope, so a narrowed token is no admin token.
  const user = input.user;
  const rights = user ? { admin: false, superAdmin: false } : adminRights(input.client, input.scopes);
  const claims: AccessTokenClaims = {
    iss: input.issuer,
    sub: user ? user.id : input.client.id,
    aud: input.audience,
    exp: iat + lifetime,
    iat,
    jti: randomUUID(),
    client_id: input.client.id,
    scope: input.scopes.join(' '),
    project_id: input.client.projectId,
    principal_kind: user ? 'user' : clientPrincipalKind(input.client),
    admin: rights.admin,
    super_admin: rights.superAdmin,
    ...(user ? { fhirUser: user.fhirUser } : {}),
    ...(user?.patient === undefined ? {} : { patient: user.patient }),
    ...(user?.family === undefined ? {} : { family: user.family }),
  };
  const token = await new SignJWT(claims)
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: ACCESS_TOKEN_TYPE })
    .sign(key.privateKey);
  return { token, expiresIn: lifetime, claims };
}

export interface VerifyAccessTokenOptions {
  issuer: string;
  audience: string;
  /** Accepted `alg` values. */
  algorithms: readonly string[];
  /** Seconds of clock skew tolerated on `exp`/`iat`. */
  clockTolerance: number;
  /** Clock (epoch ms), for tests. */
  now?: number;
}

/**
 * Thrown by `verifyAccessToken`: code `ERR_ACCESS_TOKEN_INVALID`; `reason` (stable) says why, the
 * message is for logs.
 */
export class AccessTokenError extends PlatformError {
  declare readonly code: 'ERR_ACCESS_TOKEN_INVALID';
  readonly reason: 'malformed' | 'unknown-key' | 'invalid';
  constructor(reason: AccessTokenError['reason'], message: string, options?: { cause?: unknown }) {
    super('ERR_ACCESS_TOKEN_INVALID', message, options);
    this.reason = reason;
  }
}

/**
 * Verifies an access token of this server: signature by a known server key (picked by `kid`), `alg`
 * in the allow-list and equal to the key's, `typ`, `iss`, `aud`, `exp`, and the claims this server
 * writes. The `admin` and `super_admin` claims must agree with the administration scopes in `scope`
 * (a claim no scope backs is refused, as is a token issued before the scopes existed). Throws
 * `AccessTokenError`.
 */
export async function verifyAccessToken(
  keys: SigningKeys,
  token: string,
  options: VerifyAccessTokenOptions,
): Promise<AccessTokenClaims> {
  if (jwtNestingExceeds(token)) throw new AccessTokenError('malformed', 'The token nests JSON too deeply');
  let kid: string | undefined;
  let alg: string | undefined;
  try {
    ({ kid, alg } = decodeProtectedHeader(token));
  } catch (cause) {
    throw new AccessTokenError('malformed', 'The token is not a JWS', { cause });
  }
  if (typeof kid !== 'string' || typeof alg !== 'string' || !options.algorithms.includes(alg)) {
    throw new AccessTokenError('invalid', 'The token header is not acceptable');
  }
  const key = await keys.resolve(kid);
  if (!key) throw new AccessTokenError('unknown-key', 'The token was not signed by a current server key');
  if (key.alg !== alg) throw new AccessTokenError('invalid', 'The token alg does not match its key');
  try {
    const { payload } = await jwtVerify(token, key.publicKey, {
      algorithms: [key.alg],
      issuer: options.issuer,
      audience: options.audience,
      typ: ACCESS_TOKEN_TYPE,
      clockTolerance: options.clockTolerance,
      requiredClaims: ['exp', 'iat', 'jti', 'sub', 'client_id'],
      ...(options.now === undefined ? {} : { currentDate: new Date(options.now) }),
    });
    const isUser = payload.principal_kind === 'user';
    if (
      typeof payload.sub !== 'string' ||
      typeof payload.client_id !== 'string' ||
      (isUser
        ? typeof payload.fhirUser !== 'string' ||
          !(payload.patient === undefined || typeof payload.patient === 'string') ||
          !(payload.family === undefined || typeof payload.family === 'string') ||
          payload.project_id === null ||
          payload.admin !== false ||
          payload.super_admin !== false
        : payload.client_id !== payload.sub) ||
      typeof payload.scope !== 'string' ||
      !(payload.project_id === null || typeof payload.project_id === 'string') ||
      typeof payload.admin !== 'boolean' ||
      typeof payload.super_admin !== 'boolean'
    ) {
      throw new AccessTokenError('invalid', 'The token claims are malformed');
    }
    const scopes = splitScopes(payload.scope);
    if (
      payload.admin !== scopes.includes(PROJECT_ADMIN_SCOPE) ||
      payload.super_admin !== scopes.includes(PLATFORM_ADMIN_SCOPE)
    ) {
      throw new AccessTokenError('invalid', 'The token role claims do not match its scope');
    }
    return payload as AccessTokenClaims;
  } catch (error) {
    if (error instanceof AccessTokenError) throw error;
    throw new AccessTokenError('invalid', error instanceof Error ? error.message : 'Invalid token', {
      cause: error,
    });
  }
}
