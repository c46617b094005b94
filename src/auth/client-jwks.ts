import { createLocalJWKSet, createRemoteJWKSet, type JWTVerifyGetKey } from 'jose';
import type { ClientRecord } from '../storage/types.js';

export interface ClientJwksOptions {
  /**
   * Milliseconds to wait for a client's `jwks_uri`.
   * @default 5000
   */
  timeout?: number;
  /**
   * Milliseconds a fetched JWKS is reused before it is fetched again.
   * @default 600000 (10 minutes)
   */
  cacheMaxAge?: number;
  /**
   * Milliseconds after a fetch during which an unknown `kid` does not cause another fetch.
   * @default 30000
   */
  cooldown?: number;
  /**
   * Most `jwks_uri`s whose JWKS is cached at once (least recently used dropped first).
   * @default 1000
   */
  maxEntries?: number;
  /**
   * Accept `http:` `jwks_uri`s on any host. Without it, `http:` is accepted only for loopback
   * hosts (`localhost`, `127.0.0.1`, `[::1]`), for development; SMART requires TLS.
   * @default false
   */
  allowHttp?: boolean;
}

/** Resolves the verification keys of clients: inline JWKS, or `jwks_uri` fetched and cached. */
export interface ClientJwks {
  /** The key resolver for `client`, or undefined when it registered no public keys. */
  keysFor(client: ClientRecord): JWTVerifyGetKey | undefined;
}

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** Whether `uri` may be fetched as a client JWKS under `allowHttp`. */
export function isFetchableJwksUri(uri: string, allowHttp = false): boolean {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return false;
  }
  if (url.username || url.password) return false;
  if (url.protocol === 'https:') return true;
  return url.protocol === 'http:' && (allowHttp || LOOPBACK.has(url.hostname));
}

/** Creates the per-mount cache of client key sets. */
export function clientJwks(options: ClientJwksOptions = {}): ClientJwks {
  const timeout = options.timeout ?? 5000;
  const cacheMaxAge = options.cacheMaxAge ?? 600_000;
  const cooldown = options.cooldown ?? 30_000;
  const maxEntries = options.maxEntries ?? 1000;
  const allowHttp = options.allowHttp ?? false;
  // Map keeps insertion order: re-inserting on use makes the first entry the least recently used.
  const remote = new Map<string, JWTVerifyGetKey>();

  return {
    keysFor(client) {
      if (client.jwks) {
        // Storage hands out fresh copies, so there is nothing to cache by identity; building the
        // set is cheap next to the signature check.
        try {
          return createLocalJWKSet(client.jwks);
        } catch {
          return undefined;
        }
      }
      const uri = client.jwksUri;
      if (!uri || !isFetchableJwksUri(uri, allowHttp)) return undefined;
      let set = remote.get(uri);
      if (set) {
        remote.delete(uri);
      } else {
        set = createRemoteJWKSet(new URL(uri), {
          timeoutDuration: timeout,
          cacheMaxAge,
          cooldownDuration: cooldown,
        });
        if (remote.size >= maxEntries) {
          const oldest = remote.keys().next();
          if (!oldest.done) remote.delete(oldest.value);
        }
      }
      remote.set(uri, set);
      return set;
    },
  };
}
