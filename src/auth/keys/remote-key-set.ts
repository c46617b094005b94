/**
 * One remote JWK Set (RFC 7517 §5) as a jose key resolver: fetched through a bounded
 * {@link JwksFetcher}, cached, and fetched again for a `kid` it does not hold. Clients' `jwks_uri`s
 * (client-jwks.ts) and identity providers' `jwks_uri`s (identity-provider-keys.ts) both use it.
 */
import { createLocalJWKSet, errors, type JWTVerifyGetKey } from 'jose';
import { JwksFetchError, type JwksFetcher } from './jwks-fetch.js';

const SIGNING_KEY_TYPES = new Set(['RSA', 'EC', 'OKP']);

/** How long a fetched set is used, and how many of its keys. */
export interface RemoteKeySetLimits {
  /** Milliseconds a fetched set is reused before it is fetched again. */
  cacheMaxAge: number;
  /** Milliseconds after a fetch during which an unknown `kid` does not cause another fetch. */
  cooldown: number;
  /** Keys kept from a fetched set (the first signing keys); `Infinity` keeps all. */
  maxKeys: number;
}

/**
 * A key set fetched from `url` and cached as jose's `createRemoteJWKSet` does (reused for
 * `cacheMaxAge`; an unknown `kid` refetches unless the last fetch is under `cooldown` old;
 * concurrent callers share one fetch), through our bounded fetcher, keeping `maxKeys` keys.
 */
export function remoteKeySet(url: URL, fetcher: JwksFetcher, limits: RemoteKeySetLimits): JWTVerifyGetKey {
  let local: JWTVerifyGetKey | undefined;
  let fetchedAt = Number.NEGATIVE_INFINITY;
  let pending: Promise<JWTVerifyGetKey> | undefined;
  const reload = (): Promise<JWTVerifyGetKey> =>
    (pending ??= fetcher
      .fetch(url)
      .then((json) => {
        local = createLocalJWKSet({ keys: keptKeys(json, limits.maxKeys) });
        fetchedAt = Date.now();
        return local;
      })
      .finally(() => {
        pending = undefined;
      }));
  return async (header, token) => {
    const fresh = local && Date.now() < fetchedAt + limits.cacheMaxAge;
    const keys = fresh && local ? local : await reload();
    try {
      return await keys(header, token);
    } catch (error) {
      if (error instanceof errors.JWKSNoMatchingKey && Date.now() >= fetchedAt + limits.cooldown) {
        return (await reload())(header, token);
      }
      throw error;
    }
  };
}

/** The first `max` signing keys of a fetched JWK Set (RFC 7517 §5). */
function keptKeys(json: unknown, max: number): Record<string, unknown>[] {
  const keys = (json as { keys?: unknown } | null)?.keys;
  if (typeof json !== 'object' || json === null || !Array.isArray(keys))
    throw new JwksFetchError('invalid', 'The JWKS has no keys array');
  const kept: Record<string, unknown>[] = [];
  for (const key of keys as unknown[]) {
    if (kept.length === max) break;
    if (typeof key !== 'object' || key === null || Array.isArray(key)) continue;
    const jwk = key as Record<string, unknown>;
    if (typeof jwk.kty === 'string' && SIGNING_KEY_TYPES.has(jwk.kty) && jwk.use !== 'enc') kept.push(jwk);
  }
  return kept;
}
