/**
 * The platform as an OpenID Connect relying party of a project's identity provider, through
 * `openid-client`: provider metadata discovered once per issuer (and kept `discoveryTtl` seconds by
 * this instance) with the provider's published keys, the client authentication the project
 * configured (`client_secret_basic`, `private_key_jwt` or none).
 */
import { importJWK, type JWK, type JWTVerifyGetKey } from 'jose';
import * as oidc from 'openid-client';
import type { ProjectIdentityProvider } from '../../storage/types.js';
import { idTokenAlgorithms, verifyIdTokenSignature } from './id-token-signature.js';
import type { IdentityProviderJwks } from './identity-provider-keys.js';

/** Resolves a provider into an `openid-client` configuration, and verifies its ID tokens' signatures. */
export interface IdentityProviderClients {
  configuration(provider: ProjectIdentityProvider): Promise<oidc.Configuration>;
  /**
   * Verifies that `idToken` is signed by a key `provider` publishes at its `jwks_uri`, with an
   * asymmetric algorithm it lists. Throws `IdTokenSignatureError`.
   */
  verifyIdTokenSignature(provider: ProjectIdentityProvider, idToken: string): Promise<void>;
}

/** What is kept of a provider: its metadata and the resolver (and cache) of its published keys. */
interface Discovered {
  server: oidc.ServerMetadata;
  keys: JWTVerifyGetKey | undefined;
}

/** The JWS algorithm of a private JWK: its own `alg`, else the usual one of its key type. */
function keyAlgorithm(jwk: Record<string, unknown>): string {
  if (typeof jwk.alg === 'string') return jwk.alg;
  if (jwk.kty === 'RSA') return 'RS256';
  if (jwk.kty === 'OKP') return 'EdDSA';
  return (
    ({ 'P-256': 'ES256', 'P-384': 'ES384', 'P-521': 'ES512' } as Record<string, string>)[String(jwk.crv)] ??
    'ES256'
  );
}

async function clientAuthentication(provider: ProjectIdentityProvider): Promise<oidc.ClientAuth> {
  if (provider.privateKey) {
    const alg = keyAlgorithm(provider.privateKey);
    const key = await importJWK(provider.privateKey as JWK, alg);
    if (key instanceof Uint8Array) throw new TypeError('idpPrivateKey is not an asymmetric key');
    const kid = typeof provider.privateKey.kid === 'string' ? provider.privateKey.kid : undefined;
    return oidc.PrivateKeyJwt({ key, ...(kid !== undefined ? { kid } : {}) });
  }
  return provider.clientSecret ? oidc.ClientSecretBasic(provider.clientSecret) : oidc.None();
}

/** `http:` issuers are accepted only on this machine (the settings refuse others). */
const insecure = (issuer: string) => new URL(issuer).protocol === 'http:';

/**
 * One cache of discovered providers, each with its keys' cache (both as long as this instance
 * lives); `discoveryTtl` in seconds, `jwks` fetches the keys.
 */
export function identityProviderClients(
  discoveryTtl: number,
  jwks: IdentityProviderJwks,
): IdentityProviderClients {
  const metadata = new Map<string, { at: number; value: Promise<Discovered> }>();

  function discovered(issuer: string): Promise<Discovered> {
    const cached = metadata.get(issuer);
    if (cached && Date.now() - cached.at < discoveryTtl * 1000) return cached.value;
    const value = oidc
      .discovery(new URL(issuer), 'discovery', undefined, oidc.None(), {
        ...(insecure(issuer) ? { execute: [oidc.allowInsecureRequests] } : {}),
      })
      .then((config) => {
        const server = config.serverMetadata();
        return { server, keys: jwks.keySet(server.jwks_uri) };
      });
    // A failed discovery is not kept: the next sign-in tries again.
    value.catch(() => metadata.delete(issuer));
    metadata.set(issuer, { at: Date.now(), value });
    return value;
  }

  return {
    async configuration(provider) {
      const { server } = await discovered(provider.issuer);
      const config = new oidc.Configuration(
        server,
        provider.clientId,
        undefined,
        await clientAuthentication(provider),
      );
      if (insecure(provider.issuer)) oidc.allowInsecureRequests(config);
      return config;
    },
    async verifyIdTokenSignature(provider, idToken) {
      const { server, keys } = await discovered(provider.issuer);
      await verifyIdTokenSignature(
        idToken,
        keys,
        idTokenAlgorithms(server.id_token_signing_alg_values_supported),
      );
    },
  };
}
