/**
 * The keys an identity provider publishes at its `jwks_uri` (OpenID Connect Discovery 1.0 §3),
 * which verify the signatures of its ID tokens: fetched with the same bounds as clients' `jwks_uri`s
 * (time, size, no redirect, public addresses only unless allowed), cached, and fetched again for an
 * unknown `kid` (a rotated key).
 */
import type { JWTVerifyGetKey } from 'jose';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { booleanOption, nonNegativeNumber, positiveInteger } from '../../common/options.js';
import { isFetchableJwksUri, MAX_JWKS_SIZE } from '../client/client-jwks.js';
import { jwksFetcher, type JwksFetcher } from '../keys/jwks-fetch.js';
import { privateAddressesAllowedByDefault } from '../keys/public-address.js';
import { remoteKeySet } from '../keys/remote-key-set.js';

/** How the federated sign-in fetches and keeps identity providers' keys (`federation.jwks`). */
export interface IdentityProviderJwksOptions {
  /**
   * Milliseconds a provider's `jwks_uri` has to answer, body included; a slower one fails the
   * sign-in (`idp-unavailable`).
   * @default 5000
   */
  timeout?: number;
  /**
   * Most bytes read from a provider's `jwks_uri`: the download is aborted as soon as it passes
   * them, and the sign-in fails (`idp-unavailable`).
   * @default 65536
   */
  maxBytes?: number;
  /**
   * Milliseconds a fetched key set is reused before it is fetched again (it is fetched again too
   * when the provider's metadata is, every `discoveryTtl`).
   * @default 600000 (10 minutes)
   */
  cacheMaxAge?: number;
  /**
   * Milliseconds after a fetch during which an ID token whose `kid` the set lacks does not cause
   * another fetch (it is refused): a provider that rotated its key is followed at the first
   * sign-in past it.
   * @default 30000
   */
  cooldown?: number;
  /**
   * Fetch `jwks_uri`s on loopback, private (RFC 1918, unique local), link-local (cloud metadata
   * services), CGNAT and other non-public addresses, whether the URL names the address or a name
   * resolves to it when connecting. A provider inside your own network needs it in production.
   * @default true unless `NODE_ENV` is `production` (read when the sign-in is created)
   */
  allowPrivateAddresses?: boolean;
}

/** Makes the key resolver of one provider's `jwks_uri`; the caller keeps it as long as it likes. */
export interface IdentityProviderJwks {
  /**
   * A resolver of the keys at `jwksUri`, with its own cache; undefined when there is no
   * `jwks_uri`, or one that may not be fetched (credentials in it, or `http:` off this machine).
   */
  keySet(jwksUri: unknown): JWTVerifyGetKey | undefined;
}

const KEYS: OptionKeys<IdentityProviderJwksOptions> = {
  timeout: true,
  maxBytes: true,
  cacheMaxAge: true,
  cooldown: true,
  allowPrivateAddresses: true,
};

/** The options with every default filled in; throws an option error naming `<owner>: jwks.<name>`. */
export function resolveIdentityProviderJwksOptions(
  owner: string,
  options: IdentityProviderJwksOptions = {},
): Required<IdentityProviderJwksOptions> {
  checkOptionKeys(owner, options, KEYS, 'jwks.');
  return {
    timeout: positiveInteger(owner, 'jwks.timeout', options.timeout, 5000),
    maxBytes: positiveInteger(owner, 'jwks.maxBytes', options.maxBytes, MAX_JWKS_SIZE),
    cacheMaxAge: nonNegativeNumber(owner, 'jwks.cacheMaxAge', options.cacheMaxAge, 600_000),
    cooldown: nonNegativeNumber(owner, 'jwks.cooldown', options.cooldown, 30_000),
    allowPrivateAddresses: booleanOption(
      owner,
      'jwks.allowPrivateAddresses',
      options.allowPrivateAddresses,
      privateAddressesAllowedByDefault(),
    ),
  };
}

/** One fetcher (its own sockets) for every provider of a sign-in; options validated now. */
export function identityProviderJwks(
  owner: string,
  options?: IdentityProviderJwksOptions,
): IdentityProviderJwks {
  const { timeout, maxBytes, cacheMaxAge, cooldown, allowPrivateAddresses } =
    resolveIdentityProviderJwksOptions(owner, options);
  const fetcher: JwksFetcher = jwksFetcher({ timeout, maxBytes, allowPrivateAddresses });
  return {
    keySet(jwksUri) {
      // `http:` only on loopback, as the issuer itself (`idpIssuer`).
      if (typeof jwksUri !== 'string' || !isFetchableJwksUri(jwksUri)) return undefined;
      // Every key is kept: `maxBytes` bounds them, and an ID token names its key by `kid` when the
      // set holds several (OpenID Connect Core §10.1.1), so none is ever tried in turn.
      return remoteKeySet(new URL(jwksUri), fetcher, { cacheMaxAge, cooldown, maxKeys: Infinity });
    },
  };
}
