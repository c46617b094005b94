import type { JWTVerifyGetKey } from 'jose';
import { OAuthError } from '../../http/http-error.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, Storage } from '../../storage/types.js';
import {
  ClientAssertionError,
  JWT_BEARER_ASSERTION_TYPE,
  claimedClientId,
  verifyClientAssertion,
} from './client-assertion.js';
import { verifyClientSecret } from './client-secret.js';

/** Client authentication methods of the token endpoint (RFC 7591 §2 names). */
export type ClientAuthMethod = 'private_key_jwt' | 'client_secret_basic' | 'client_secret_post';

export const CLIENT_AUTH_METHODS: readonly ClientAuthMethod[] = [
  'private_key_jwt',
  'client_secret_basic',
  'client_secret_post',
];

/** What a token request presents to authenticate its client, before any check. */
export type ClientCredentials =
  | { method: 'private_key_jwt'; clientId: string; assertion: string }
  | { method: 'client_secret_basic' | 'client_secret_post'; clientId: string; secret: string };

/** Form parameters after parsing: a repeated parameter is an array. */
export type FormParams = Record<string, string | string[] | undefined>;

const BASIC_CHALLENGE = 'Basic realm="fhir-platform-kit", charset="UTF-8"';

/** `invalid_client` (RFC 6749 §5.2): 401, with a Basic challenge when Basic was used. */
export function invalidClient(message: string, basic: boolean, cause?: unknown): OAuthError {
  return new OAuthError(401, 'invalid_client', message, {
    ...(basic ? { headers: { 'WWW-Authenticate': BASIC_CHALLENGE } } : {}),
    ...(cause === undefined ? {} : { cause }),
  });
}

/** A single-valued form parameter; a repeated one is `invalid_request` (RFC 6749 §3.2). */
export function formParam(params: FormParams, name: string): string | undefined {
  const value = params[name];
  if (Array.isArray(value)) throw new OAuthError(400, 'invalid_request', `Parameter ${name} is repeated`);
  return value === '' ? undefined : value;
}

// Client id and secret are form-urlencoded before Base64 in Basic credentials (RFC 6749 §2.3.1).
function formDecode(text: string): string {
  return decodeURIComponent(text.replace(/\+/g, ' '));
}

/** Parses `Authorization: Basic` credentials; undefined for another scheme. Throws `invalid_client` when malformed. */
export function parseBasicAuthorization(
  authorization: string | undefined,
): { id: string; secret: string } | undefined {
  if (!authorization) return undefined;
  const match = /^Basic\s+([A-Za-z0-9+/=._~-]*)\s*$/i.exec(authorization);
  if (!match) {
    if (/^Basic(\s|$)/i.test(authorization)) throw invalidClient('Malformed Basic credentials', true);
    return undefined;
  }
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw invalidClient('Malformed Basic credentials', true);
  try {
    return { id: formDecode(decoded.slice(0, colon)), secret: formDecode(decoded.slice(colon + 1)) };
  } catch (cause) {
    throw invalidClient('Malformed Basic credentials', true, cause);
  }
}

/**
 * Finds which client authentication method a token request uses. Exactly one is allowed (RFC 6749
 * §2.3); none or a malformed one answers `invalid_client`, two answers `invalid_request`.
 */
export function parseClientCredentials(
  params: FormParams,
  authorization: string | undefined,
): ClientCredentials {
  const basic = parseBasicAuthorization(authorization);
  const assertionType = formParam(params, 'client_assertion_type');
  const assertion = formParam(params, 'client_assertion');
  const clientId = formParam(params, 'client_id');
  const secret = formParam(params, 'client_secret');
  const used = [basic, assertionType ?? assertion, secret].filter((x) => x !== undefined).length;
  if (used > 1) throw new OAuthError(400, 'invalid_request', 'Use exactly one client authentication method');

  if (basic) {
    if (clientId !== undefined && clientId !== basic.id) {
      throw new OAuthError(400, 'invalid_request', 'client_id does not match the Basic credentials');
    }
    return { method: 'client_secret_basic', clientId: basic.id, secret: basic.secret };
  }
  if (assertionType !== undefined || assertion !== undefined) {
    if (assertionType !== JWT_BEARER_ASSERTION_TYPE) {
      throw new OAuthError(
        400,
        'invalid_request',
        `client_assertion_type must be ${JWT_BEARER_ASSERTION_TYPE}`,
      );
    }
    if (!assertion) throw new OAuthError(400, 'invalid_request', 'client_assertion is missing');
    let claimed: string;
    try {
      claimed = claimedClientId(assertion);
    } catch (cause) {
      throw invalidClient('Invalid client_assertion', false, cause);
    }
    if (clientId !== undefined && clientId !== claimed) {
      throw new OAuthError(400, 'invalid_request', 'client_id does not match the client_assertion');
    }
    return { method: 'private_key_jwt', clientId: claimed, assertion };
  }
  if (secret !== undefined) {
    if (!clientId) throw new OAuthError(400, 'invalid_request', 'client_id is missing');
    return { method: 'client_secret_post', clientId, secret };
  }
  throw invalidClient('Client authentication is required', false);
}

export interface AuthenticateClientContext {
  storage: Storage;
  /** The key resolver for a client (see `clientJwks`). */
  keysFor: (client: ClientRecord) => JWTVerifyGetKey | undefined;
  tokenUrl: string;
  algorithms: readonly string[];
  maxAssertionLifetime: number;
  clockTolerance: number;
  /** Authentication methods enabled. */
  methods: readonly ClientAuthMethod[];
  /** Checks a secret against a stored hash (the token endpoint caps how many run at once). @default verifyClientSecret */
  verifySecret?: (secret: string, hash: string) => Promise<boolean>;
  /** Clock (epoch ms). @default Date.now() */
  now?: number;
}

// Compared against when the client is unknown, so the answer takes as long as for a wrong secret.
const DUMMY_HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

/**
 * Authenticates the client of a token request and checks it may still act: not revoked, and its
 * project (when it has one) still exists. Every failure is `invalid_client` (401).
 */
export async function authenticateClient(
  credentials: ClientCredentials,
  context: AuthenticateClientContext,
): Promise<ClientRecord> {
  const basic = credentials.method === 'client_secret_basic';
  if (!context.methods.includes(credentials.method)) {
    throw invalidClient(`Client authentication method ${credentials.method} is not enabled`, basic);
  }
  let client: ClientRecord | undefined;
  try {
    client = await context.storage.readClient(credentials.clientId);
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
  }

  if (credentials.method === 'private_key_jwt') {
    if (!client) throw invalidClient('Unknown client', false);
    try {
      await verifyClientAssertion(credentials.assertion, {
        client,
        keys: context.keysFor(client),
        tokenUrl: context.tokenUrl,
        algorithms: context.algorithms,
        maxLifetime: context.maxAssertionLifetime,
        clockTolerance: context.clockTolerance,
        useOnce: (key, expiresAt) => context.storage.useOnce(key, expiresAt),
        ...(context.now === undefined ? {} : { now: context.now }),
      });
    } catch (error) {
      if (error instanceof ClientAssertionError) throw invalidClient(error.message, false, error);
      throw error;
    }
  } else {
    const verify = context.verifySecret ?? verifyClientSecret;
    const ok = await verify(credentials.secret, client?.secretHash ?? DUMMY_HASH);
    if (!client || !client.secretHash || !ok) throw invalidClient('Invalid client credentials', basic);
  }

  if (client.revoked) throw invalidClient('The client is revoked', basic);
  if (client.projectId === null) {
    if (!client.superAdmin) throw invalidClient('The client belongs to no project', basic);
  } else {
    try {
      await context.storage.readProject(client.projectId);
    } catch (error) {
      if (error instanceof NotFoundError)
        throw invalidClient('The client project no longer exists', basic, error);
      throw error;
    }
  }
  return client;
}
