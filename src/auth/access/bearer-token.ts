/**
 * `Authorization: Bearer` (RFC 6750) for `bearerAuth`: an access token of this server, checked
 * (signature by a current server key, `alg`, `typ`, `iss`, `aud`, `exp`), then its revocation and
 * its client (and, for a user's token, its user) read again, so that what was revoked, deleted or
 * deactivated since the token was issued stops at its next use.
 */
import type { Request } from 'express';
import { unauthorized } from '../../http/authenticate.js';
import type { HttpError } from '../../http/http-error.js';
import type { Principal } from '../../http/principal.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, GrantStore, Storage, UserRecord } from '../../storage/types.js';
import type { SigningKeys } from '../keys/signing-keys.js';
import { tokenIdentity, type PerRequest } from '../token/issuer.js';
import { AccessTokenError, verifyAccessToken, type AccessTokenClaims } from './access-token.js';
import { accessTokenRevoked } from './access-token-revocation.js';
import { activeClient, clientPrincipal } from './client-principal.js';
import { allowedScopes } from './client-scopes.js';
import { intersectScopes, splitScopes } from './scopes.js';

/** What checking a bearer token needs (`bearerAuth`'s options, resolved). */
export interface BearerTokenCheck {
  storage: Storage;
  keys: SigningKeys;
  /** Where revoked token ids and user authorizations are; without it, no revocation is read. */
  grants: GrantStore | undefined;
  algorithms: readonly string[];
  clockTolerance: number;
  now: () => number;
  /** The expected `iss` and `aud` (see `tokenIdentity`). */
  identity: {
    baseUrl?: string | undefined;
    issuer?: PerRequest | undefined;
    audience?: PerRequest | undefined;
  };
}

type Refuse = (message: string) => HttpError;

const invalid: Refuse = (message) => unauthorized(message, 'invalid_token');

/** The token's claims when it is a valid access token for this request's issuer and audience. */
async function verifiedClaims(
  check: BearerTokenCheck,
  req: Request,
  token: string,
): Promise<AccessTokenClaims> {
  const { issuer, audience } = tokenIdentity(req, check.identity);
  try {
    return await verifyAccessToken(check.keys, token, {
      issuer,
      audience,
      algorithms: check.algorithms,
      clockTolerance: check.clockTolerance,
      now: check.now(),
    });
  } catch (error) {
    if (error instanceof AccessTokenError) throw invalid('The access token is invalid or expired');
    throw error;
  }
}

/**
 * The token's client, when the token is not revoked and the client may still act. The revocation
 * lookups (keyed reads; round trips on PostgreSQL) run beside the client's reads rather than
 * before them; a revoked token is refused as revoked whatever the client check says, as when the
 * lookup came first.
 */
async function unrevokedClient(check: BearerTokenCheck, claims: AccessTokenClaims): Promise<ClientRecord> {
  const [revoked, checked] = await Promise.all([
    check.grants ? accessTokenRevoked(check.grants, claims) : false,
    activeClient(check.storage, claims.client_id, invalid).then(
      (client) => ({ client }),
      (error: unknown) => ({ error }),
    ),
  ]);
  if (revoked) throw invalid('The access token is revoked');
  if ('error' in checked) throw checked.error;
  return checked.client;
}

/**
 * A user's token counts only while the user exists and is active in the client's project: SCIM
 * deactivating or deleting the user ends every token of theirs at its next use.
 */
async function userPrincipal(
  storage: Storage,
  client: ClientRecord,
  claims: AccessTokenClaims,
  scopes: string[],
): Promise<Principal> {
  const projectId = client.projectId;
  if (projectId === null) throw invalid('The access token does not match its client');
  let user: UserRecord;
  try {
    user = await storage.readUser(projectId, claims.sub);
  } catch (e) {
    if (e instanceof NotFoundError) throw invalid('The user no longer exists');
    throw e;
  }
  if (!user.active) throw invalid('The user is not active');
  if (claims.fhirUser !== `${user.userType}/${user.profileId}`)
    throw invalid('The access token does not match its user');
  return {
    projectId,
    kind: 'user',
    id: user.id,
    scopes,
    admin: false,
    superAdmin: false,
    clientId: client.id,
    fhirUser: claims.fhirUser,
    ...(claims.patient === undefined ? {} : { patientId: claims.patient }),
  };
}

/**
 * The principal of a bearer token: its granted scopes re-intersected with what the client may
 * have now. Throws 401 `invalid_token` for any token that does not hold.
 */
export async function bearerPrincipal(
  check: BearerTokenCheck,
  req: Request,
  token: string,
): Promise<Principal> {
  const claims = await verifiedClaims(check, req, token);
  const client = await unrevokedClient(check, claims);
  if (client.projectId !== claims.project_id) throw invalid('The access token does not match its client');
  const scopes = intersectScopes(splitScopes(claims.scope), allowedScopes(client));
  if (claims.principal_kind === 'user') return userPrincipal(check.storage, client, claims, scopes);
  return clientPrincipal(client, scopes);
}
