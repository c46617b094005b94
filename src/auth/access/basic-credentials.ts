/**
 * `Authorization: Basic` with a client id and secret (RFC 7617), which `bearerAuth` accepts with
 * `allowBasic` for SCIM provisioning clients that offer nothing else (Okta). Failures are limited
 * as at the token endpoint (`FailureLimiter`); a successful check is remembered for a while,
 * since hashing the secret is slow by design, but the client is still read on every request.
 */
import { createHash } from 'node:crypto';
import { HttpError } from '../../http/http-error.js';
import type { Principal } from '../../http/principal.js';
import type { ClientRecord, Storage } from '../../storage/types.js';
import { parseBasicAuthorization } from '../client/client-authentication.js';
import { verifyClientSecret } from '../client/client-secret.js';
import {
  FailureLimitError,
  type FailureLimitAttempt,
  type FailureLimiter,
} from '../client/failure-limiter.js';
import { activeClient, clientPrincipal } from './client-principal.js';
import { allowedScopes } from './client-scopes.js';

/** Most successful checks remembered; the oldest goes first. */
const BASIC_CACHE_MAX = 1000;

const BASIC_CHALLENGE = 'Basic realm="fhir-platform-kit"';

/** Checks Basic credentials into the client's principal (with every scope it may have). */
export interface BasicCredentialsCheck {
  /** The principal of the credentials in `header`, from `address`; 401 when they do not hold. */
  principal(header: string, address: string): Promise<Principal>;
}

/** The id and secret of a Basic header; 401 when it is malformed or names no id. */
function credentialsOf(header: string): { id: string; secret: string } {
  let credentials: { id: string; secret: string } | undefined;
  try {
    credentials = parseBasicAuthorization(header);
  } catch {
    credentials = undefined;
  }
  if (!credentials || credentials.id === '')
    throw new HttpError(401, 'ERR_UNAUTHORIZED', 'Malformed Basic credentials', {
      headers: { 'WWW-Authenticate': BASIC_CHALLENGE },
    });
  return credentials;
}

/** The limiter's refusals: 429 over a failure limit, 503 when too many secret checks are queued. */
function limitError(error: FailureLimitError): HttpError {
  const headers = { 'Retry-After': String(error.retryAfterSeconds) };
  return error.reason === 'busy'
    ? new HttpError(503, 'ERR_SECRET_CHECKS_BUSY', error.message, { headers, cause: error })
    : new HttpError(429, 'ERR_TOO_MANY_FAILURES', error.message, { headers, cause: error });
}

function refuse(message: string): HttpError {
  return new HttpError(401, 'ERR_UNAUTHORIZED', message, {
    headers: { 'WWW-Authenticate': `${BASIC_CHALLENGE}, Bearer realm="fhir-platform-kit"` },
  });
}

/**
 * The Basic check of one `bearerAuth`: `cacheMs` how long a success is remembered (keyed by the
 * SHA-256 of the id, the secret and the stored hash, so a changed secret misses), `limiter` its
 * failure limits and secret-check cap.
 */
export function basicCredentials(
  storage: Storage,
  limiter: FailureLimiter,
  cacheMs: number,
  now: () => number,
): BasicCredentialsCheck {
  const cache = new Map<string, number>();

  function remember(key: string): void {
    cache.delete(key);
    if (cache.size >= BASIC_CACHE_MAX) {
      const oldest = cache.keys().next();
      if (!oldest.done) cache.delete(oldest.value);
    }
    cache.set(key, now() + cacheMs);
  }

  async function clientOf(id: string): Promise<ClientRecord> {
    try {
      return await activeClient(storage, id, (message) => new HttpError(401, 'ERR_UNAUTHORIZED', message));
    } catch (error) {
      if (error instanceof HttpError) throw refuse('Invalid client credentials');
      throw error;
    }
  }

  async function check(id: string, secret: string): Promise<Principal> {
    const client = await clientOf(id);
    const secretHash = client.secretHash;
    if (!secretHash) throw refuse('Invalid client credentials');
    const key = createHash('sha256').update(`${id}\0${secret}\0${secretHash}`).digest('base64url');
    const cachedUntil = cache.get(key);
    if (cachedUntil === undefined || cachedUntil <= now()) {
      if (!(await limiter.checkSecret(() => verifyClientSecret(secret, secretHash))))
        throw refuse('Invalid client credentials');
      remember(key);
    }
    return clientPrincipal(client, allowedScopes(client));
  }

  return {
    async principal(header, address) {
      const { id, secret } = credentialsOf(header);
      let attempt: FailureLimitAttempt;
      try {
        attempt = await limiter.begin(address, id);
      } catch (error) {
        throw error instanceof FailureLimitError ? limitError(error) : error;
      }
      let failed = false;
      try {
        return await check(id, secret);
      } catch (error) {
        if (error instanceof FailureLimitError) throw limitError(error);
        failed = error instanceof HttpError && error.status === 401;
        throw error;
      } finally {
        await attempt.end(failed);
      }
    },
  };
}
