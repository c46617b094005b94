/**
 * The grants of SMART App Launch (authorization code flow, RFC 6749 §4.1 with PKCE, RFC 7636):
 * authorization codes, refresh tokens (rotated, RFC 9700 §4.14.2) and the id_token of OpenID
 * Connect. Codes and refresh tokens are random values; the store keeps only their SHA-256.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { SignJWT } from 'jose';
import { OAuthError } from '../../http/http-error.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, GrantRecord, GrantStore, Storage, UserRecord } from '../../storage/types.js';
import { issueAccessToken, type IssuedAccessToken } from '../access/access-token.js';
import type { SigningKeys } from '../keys/signing-keys.js';
import type { TokenResponse } from './token-response.js';

/** Seconds an authorization code lives (RFC 6749 §4.1.2: at most 10 minutes; one is plenty). */
export const CODE_LIFETIME = 60;

/** A new random secret value (a code, a refresh token, a ticket): 256 bits, base64url. */
export function randomSecret(): string {
  return randomBytes(32).toString('base64url');
}

/** The key a secret value is stored under: its SHA-256, base64url. */
export function secretKey(value: string): string {
  return createHash('sha256').update(value).digest('base64url');
}

/** Compares two strings in time independent of where they differ. */
export function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** RFC 7636 §4.1: 43 to 128 unreserved characters. */
const VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/;
/** An S256 challenge: base64url of a SHA-256, 43 characters. */
export const S256_CHALLENGE = /^[A-Za-z0-9_-]{43}$/;

/** RFC 7636 §4.6: `BASE64URL(SHA256(code_verifier)) == code_challenge`. */
export function pkceMatches(verifier: string | undefined, challenge: string): boolean {
  if (verifier === undefined || !VERIFIER.test(verifier)) return false;
  return sameSecret(createHash('sha256').update(verifier).digest('base64url'), challenge);
}

/** What an authorization code stands for (kept in its grant's `data`). */
export interface CodeGrantData extends Record<string, unknown> {
  redirectUri: string;
  scopes: string[];
  codeChallenge: string;
  nonce?: string;
  patient?: string;
}

/** What a refresh token stands for (kept in its grant's `data`). */
export interface RefreshGrantData extends Record<string, unknown> {
  scopes: string[];
  patient?: string;
}

/**
 * Stores a new authorization code for a user's consent, and the authorization it starts (a `family`
 * record, which every token issued from the code extends); resolves the code.
 */
export async function issueCode(
  grants: GrantStore,
  input: { client: ClientRecord; userId: string; data: CodeGrantData; now: number },
): Promise<string> {
  const code = randomSecret();
  const family = randomSecret();
  const owner = {
    projectId: input.client.projectId!,
    clientId: input.client.id,
    userId: input.userId,
    family,
    expiresAt: input.now + CODE_LIFETIME * 1000,
  };
  await grants.put({ kind: 'family', key: family, ...owner, data: {} });
  await grants.put({ kind: 'code', key: secretKey(code), ...owner, data: input.data });
  return code;
}

/** Lifetimes and keys the token endpoint's user grants need. */
export interface UserGrantConfig {
  storage: Storage;
  grants: GrantStore;
  keys: SigningKeys;
  /** Seconds, for `offline_access`. */
  refreshTokenLifetime: number;
  /** Seconds, for `online_access`. */
  onlineRefreshTokenLifetime: number;
  now: () => number;
}

const invalidGrant = (message: string) => new OAuthError(400, 'invalid_grant', message);

/**
 * The user a grant was issued to, while they exist, are active and keep the profile. Otherwise
 * `invalid_grant`, and their grants go (a deactivation that SCIM did not report reaches them here).
 */
export async function grantUser(config: UserGrantConfig, grant: GrantRecord): Promise<UserRecord> {
  let user: UserRecord | undefined;
  try {
    user = await config.storage.readUser(grant.projectId, grant.userId ?? '');
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
  }
  if (!user || !user.active) {
    await config.grants.revoke({ projectId: grant.projectId, userId: grant.userId ?? '' });
    throw invalidGrant('The user is no longer active');
  }
  return user;
}

/** Everything one user token response needs. */
export interface UserTokenInput {
  client: ClientRecord;
  user: UserRecord;
  /** The access token's scopes (with `offline_access` or `online_access`, a refresh token too). */
  scopes: string[];
  /**
   * What a refresh token issued now stands for: the grant's scopes (RFC 6749 §6: a new refresh
   * token keeps the scope of the one it replaces, whatever this refresh narrowed).
   * @default scopes
   */
  grantScopes?: string[];
  patient?: string;
  /** The authorization (refresh family) the tokens are issued from: the code's. */
  family: string;
  nonce?: string;
  issuer: string;
  audience: string;
  /** The FHIR base URL, for the id_token's absolute `fhirUser`. */
  fhirBase: string;
  /** Access token lifetime, seconds. */
  lifetime: number;
}

/** What `userTokens` issued: the response, its access token and its refresh token's key, if any. */
export interface IssuedUserTokens {
  response: TokenResponse;
  access: IssuedAccessToken;
  refreshKey?: string;
}

/**
 * Signs the access token, and the id_token and a new refresh token when the scopes ask for them, then
 * extends the authorization (`family`) to outlive them all. The last step fails when the authorization
 * was revoked meanwhile (`invalid_grant`): tokens are never handed out for a revoked authorization,
 * and those handed out die with it (`bearerAuth` and the refresh grant read it).
 */
export async function userTokens(config: UserGrantConfig, input: UserTokenInput): Promise<IssuedUserTokens> {
  const now = config.now();
  const fhirUser = `${input.user.userType}/${input.user.profileId}`;
  const access = await issueAccessToken(config.keys, {
    client: input.client,
    scopes: input.scopes,
    issuer: input.issuer,
    audience: input.audience,
    lifetime: input.lifetime,
    now,
    user: {
      id: input.user.id,
      fhirUser,
      family: input.family,
      ...(input.patient ? { patient: input.patient } : {}),
    },
  });
  const response: TokenResponse = {
    access_token: access.token,
    token_type: 'bearer',
    expires_in: access.expiresIn,
    scope: access.claims.scope,
    ...(input.patient ? { patient: input.patient } : {}),
  };
  if (input.scopes.includes('openid')) {
    response.id_token = await signIdToken(config.keys, {
      issuer: input.issuer,
      subject: input.user.id,
      clientId: input.client.id,
      fhirUser: `${input.fhirBase.replace(/\/+$/, '')}/${fhirUser}`,
      now,
      ...(input.nonce ? { nonce: input.nonce } : {}),
    });
  }
  const refresh = await storeRefreshToken(config, input, now);
  if (refresh) response.refresh_token = refresh.token;
  await extendAuthorization(config, input.family, access, refresh);
  return { response, access, ...(refresh ? { refreshKey: refresh.key } : {}) };
}

/**
 * Extends the authorization to outlive the tokens just issued, so that a check of it stands for
 * theirs; `invalid_grant` (and the new refresh token dropped) when it was revoked meanwhile.
 */
async function extendAuthorization(
  config: UserGrantConfig,
  family: string,
  access: IssuedAccessToken,
  refresh: { key: string; expiresAt: number } | undefined,
): Promise<void> {
  const until = Math.max(access.claims.exp * 1000, refresh?.expiresAt ?? 0);
  if (await config.grants.extend('family', family, until)) return;
  if (refresh) await config.grants.take('refresh', refresh.key);
  throw invalidGrant('The authorization was revoked');
}

/** Stores a new refresh token when the scopes hold `offline_access` or `online_access`. */
async function storeRefreshToken(
  config: UserGrantConfig,
  input: UserTokenInput,
  now: number,
): Promise<{ token: string; key: string; expiresAt: number } | undefined> {
  const offline = input.scopes.includes('offline_access');
  if (!offline && !input.scopes.includes('online_access')) return undefined;
  const token = randomSecret();
  const key = secretKey(token);
  const lifetime = offline ? config.refreshTokenLifetime : config.onlineRefreshTokenLifetime;
  const expiresAt = now + lifetime * 1000;
  const data: RefreshGrantData = {
    scopes: input.grantScopes ?? input.scopes,
    ...(input.patient ? { patient: input.patient } : {}),
  };
  await config.grants.put({
    kind: 'refresh',
    key,
    projectId: input.user.projectId,
    clientId: input.client.id,
    userId: input.user.id,
    family: input.family,
    expiresAt,
    data,
  });
  return { token, key, expiresAt };
}

/**
 * The OpenID Connect id_token (OpenID Connect Core §2; SMART App Launch "fhirUser"): `iss`, `sub` (the
 * user id), `aud` (the client id), `fhirUser` as an absolute URL, `nonce` when the request had one.
 * Signed with the server's current signing key: its public key is in the JWKS.
 */
export async function signIdToken(
  keys: SigningKeys,
  input: { issuer: string; subject: string; clientId: string; fhirUser: string; nonce?: string; now: number },
): Promise<string> {
  const key = await keys.current();
  const iat = Math.floor(input.now / 1000);
  return new SignJWT({ fhirUser: input.fhirUser, ...(input.nonce ? { nonce: input.nonce } : {}) })
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' })
    .setIssuer(input.issuer)
    .setSubject(input.subject)
    .setAudience(input.clientId)
    .setIssuedAt(iat)
    .setExpirationTime(iat + 300)
    .sign(key.privateKey);
}
