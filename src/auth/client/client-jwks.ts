import { createLocalJWKSet, errors, type CryptoKey, type JWTVerifyGetKey } from 'jose';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { booleanOption, nonNegativeNumber, positiveInteger } from '../../common/options.js';
import type { ClientRecord } from '../../storage/types.js';
import { jwksFetcher } from '../keys/jwks-fetch.js';
import { privateAddressesAllowedByDefault } from '../keys/public-address.js';
import { remoteKeySet } from '../keys/remote-key-set.js';

/**
 * Largest JWKS: characters of a `jwks` registered inline, bytes of a `jwks_uri`'s answer. Real
 * ones hold a few keys of under 1 KiB each.
 */
export const MAX_JWKS_SIZE = 64 * 1024;

export interface ClientJwksOptions {
  /**
   * Milliseconds a client's `jwks_uri` has to answer, body included; a slower one fails the
   * assertion (`401 invalid_client`).
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
  /**
   * Most bytes read from a `jwks_uri`: the download is aborted as soon as it passes them, and the
   * assertion fails (`401 invalid_client`). The same 64 KiB as an inline `jwks`.
   * @default 65536
   */
  maxBytes?: number;
  /**
   * Keys kept from a fetched JWKS (the first ones that are RSA, EC or OKP keys not marked for
   * encryption); the rest are ignored, so a `kid` among them is unknown.
   * @default 100
   */
  maxKeys?: number;
  /**
   * Keys tried for one assertion when several of the client's keys match it (no `kid`, or a
   * `kid` shared by several keys of the assertion's key type), inline or fetched; if none of
   * these verifies it, it is refused. Real key sets hold one or two keys per key type (two while
   * a key is rotated).
   * @default 5
   */
  maxKeysTried?: number;
  /**
   * Connect to `jwks_uri`s on loopback, private (RFC 1918, unique local), link-local (cloud
   * metadata services), CGNAT and other non-public addresses, whether the URL names the address
   * or a name resolves to it when connecting. Refusing them keeps a URL a project admin
   * registered from reaching the server's own network.
   * @default true unless `NODE_ENV` is `production` (read when the router is created)
   */
  allowPrivateAddresses?: boolean;
}

/** Resolves the verification keys of clients: inline JWKS, or `jwks_uri` fetched and cached. */
export interface ClientJwks {
  /** The key resolver for `client`, or undefined when it registered no public keys. */
  keysFor(client: ClientRecord): JWTVerifyGetKey | undefined;
}

const CLIENT_JWKS_KEYS: OptionKeys<ClientJwksOptions> = {
  timeout: true,
  cacheMaxAge: true,
  cooldown: true,
  maxEntries: true,
  allowHttp: true,
  maxBytes: true,
  maxKeys: true,
  maxKeysTried: true,
  allowPrivateAddresses: true,
};

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

/**
 * Creates the per-mount cache of client key sets; `owner` names the factory in option errors
 * (whose `jwks` option this is).
 */
export function clientJwks(options: ClientJwksOptions = {}, owner = 'tokenRouter'): ClientJwks {
  checkOptionKeys(owner, options, CLIENT_JWKS_KEYS, 'jwks.');
  const timeout = positiveInteger(owner, 'jwks.timeout', options.timeout, 5000);
  const cacheMaxAge = nonNegativeNumber(owner, 'jwks.cacheMaxAge', options.cacheMaxAge, 600_000);
  const cooldown = nonNegativeNumber(owner, 'jwks.cooldown', options.cooldown, 30_000);
  const maxEntries = positiveInteger(owner, 'jwks.maxEntries', options.maxEntries, 1000);
  const allowHttp = booleanOption(owner, 'jwks.allowHttp', options.allowHttp, false);
  const maxBytes = positiveInteger(owner, 'jwks.maxBytes', options.maxBytes, MAX_JWKS_SIZE);
  const maxKeys = positiveInteger(owner, 'jwks.maxKeys', options.maxKeys, 100);
  const maxKeysTried = positiveInteger(owner, 'jwks.maxKeysTried', options.maxKeysTried, 5);
  const allowPrivateAddresses = booleanOption(
    owner,
    'jwks.allowPrivateAddresses',
    options.allowPrivateAddresses,
    privateAddressesAllowedByDefault(),
  );
  const fetcher = jwksFetcher({ timeout, maxBytes, allowPrivateAddresses });
  // Map keeps insertion order: re-inserting on use makes the first entry the least recently used.
  const remote = new Map<string, JWTVerifyGetKey>();

  return {
    keysFor(client) {
      if (client.jwks) {
        // Storage hands out fresh copies, so there is nothing to cache by identity; building the
        // set is cheap next to the signature check.
        try {
          return triesAtMost(createLocalJWKSet(client.jwks), maxKeysTried);
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
        set = triesAtMost(
          remoteKeySet(new URL(uri), fetcher, { cacheMaxAge, cooldown, maxKeys }),
          maxKeysTried,
        );
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

/**
 * `keys`, with at most `max` of the candidates tried when several match an assertion: jose then
 * throws `JWKSMultipleMatchingKeys`, iterable over every match, and the verifier tries each, so a
 * JWKS of thousands of keys of one type would cost seconds of CPU per assertion without a `kid`.
 */
function triesAtMost(keys: JWTVerifyGetKey, max: number): JWTVerifyGetKey {
  return async (header, token) => {
    try {
      return await keys(header, token);
    } catch (error) {
      if (error instanceof errors.JWKSMultipleMatchingKeys) {
        // Each key is imported as it is pulled: none past the `max`th is even imported.
        const all = error[Symbol.asyncIterator]();
        error[Symbol.asyncIterator] = async function* (): AsyncIterableIterator<CryptoKey> {
          try {
            for (let tried = 0; tried < max; tried += 1) {
              const next = await all.next();
              if (next.done) return;
              yield next.value;
            }
          } finally {
            await all.return?.();
          }
        };
      }
      throw error;
    }
  };
}
