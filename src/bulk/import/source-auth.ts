/**
 * How `$import` signs in to a source: a bearer token given for the job, or as a SMART Backend
 * Services client of the source (client credentials with a signed JWT assertion, SMART App Launch
 * 2.x "Backend Services"), with the credentials the project registered for that server.
 */
import { randomUUID } from 'node:crypto';
import { importJWK, SignJWT, type JWK } from 'jose';
import { SourceFetchError, type SourceFetcher } from './source-fetch.js';

/** A SMART Backend Services client registration at a source. */
export interface SmartClientCredentials {
  tokenUrl: string;
  clientId: string;
  /** The private JWK that signs the client assertions. */
  privateKey: Record<string, unknown>;
  /** Scopes asked for, space-separated. @default 'system/*.read' */
  scope?: string;
}

/** How one job authenticates at its source. */
export type SourceCredentials =
  { kind: 'none' } | { kind: 'bearer'; token: string } | { kind: 'smart'; client: SmartClientCredentials };

/** Gives the `Authorization` header of the next request to the source (fetching a token when needed). */
export interface SourceAuthorizer {
  header(signal?: AbortSignal): Promise<string | undefined>;
  /** Forgets a cached token (the source answered 401 with it). */
  reset(): void;
}

/** The JWS algorithm of a private JWK: its own `alg`, else the usual one of its key type. */
function keyAlgorithm(jwk: Record<string, unknown>): string {
  if (typeof jwk.alg === 'string') return jwk.alg;
  if (jwk.kty === 'RSA') return 'RS384';
  if (jwk.kty === 'OKP') return 'EdDSA';
  const byCurve: Record<string, string> = { 'P-256': 'ES256', 'P-384': 'ES384', 'P-521': 'ES512' };
  return byCurve[String(jwk.crv)] ?? 'ES384';
}

/** Seconds before a token's expiry at which a new one is fetched. */
const EXPIRY_MARGIN = 30;

/** The authorizer of one job's credentials; a SMART token is kept until shortly before it expires. */
export function sourceAuthorizer(credentials: SourceCredentials, fetcher: SourceFetcher): SourceAuthorizer {
  let cached: { header: string; until: number } | undefined;
  return {
    reset() {
      cached = undefined;
    },
    async header(signal) {
      if (credentials.kind === 'none') return undefined;
      if (credentials.kind === 'bearer') return `Bearer ${credentials.token}`;
      if (cached && Date.now() < cached.until) return cached.header;
      const { token, expiresIn } = await smartToken(credentials.client, fetcher, signal);
      cached = {
        header: `Bearer ${token}`,
        until: Date.now() + Math.max(0, expiresIn - EXPIRY_MARGIN) * 1000,
      };
      return cached.header;
    },
  };
}

/** Client credentials with a JWT assertion (RFC 7523) at the source's token endpoint. */
async function smartToken(
  client: SmartClientCredentials,
  fetcher: SourceFetcher,
  signal: AbortSignal | undefined,
): Promise<{ token: string; expiresIn: number }> {
  const alg = keyAlgorithm(client.privateKey);
  const key = await importJWK(client.privateKey as JWK, alg);
  const kid = typeof client.privateKey.kid === 'string' ? client.privateKey.kid : undefined;
  const assertion = await new SignJWT({})
    .setProtectedHeader({ alg, typ: 'JWT', ...(kid !== undefined ? { kid } : {}) })
    .setIssuer(client.clientId)
    .setSubject(client.clientId)
    .setAudience(client.tokenUrl)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime('4m')
    .sign(key);
  const { status, body } = await fetcher.postForm(
    new URL(client.tokenUrl),
    {
      grant_type: 'client_credentials',
      scope: client.scope ?? 'system/*.read',
      client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
      client_assertion: assertion,
    },
    signal,
  );
  const answer = (body ?? {}) as { access_token?: unknown; expires_in?: unknown; error?: unknown };
  if (status !== 200 || typeof answer.access_token !== 'string') {
    const error = typeof answer.error === 'string' ? ` (${answer.error})` : '';
    throw new SourceFetchError('status', `The source's token endpoint answered ${status}${error}`, {
      status,
    });
  }
  const expiresIn = typeof answer.expires_in === 'number' && answer.expires_in > 0 ? answer.expires_in : 300;
  return { token: answer.access_token, expiresIn };
}
