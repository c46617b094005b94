/**
 * The platform as an OpenID Connect relying party of a project's identity provider, through
 * `openid-client`: provider metadata discovered once per issuer (and kept `discoveryTtl` seconds by
 * this instance), the client authentication the project configured (`client_secret_basic`,
 * `private_key_jwt` or none).
 */
import { importJWK, type JWK } from 'jose';
import * as oidc from 'openid-client';
import type { ProjectIdentityProvider } from '../storage/types.js';

/** Resolves a provider into an `openid-client` configuration. */
export interface IdentityProviderClients {
  configuration(provider: ProjectIdentityProvider): Promise<oidc.Configuration>;
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

/** One cache of discovered metadata; `discoveryTtl` in seconds. */
export function identityProviderClients(discoveryTtl: number): IdentityProviderClients {
  const metadata = new Map<string, { at: number; value: Promise<oidc.ServerMetadata> }>();

  function serverMetadata(issuer: string): Promise<oidc.ServerMetadata> {
    const cached = metadata.get(issuer);
    if (cached && Date.now() - cached.at < discoveryTtl * 1000) return cached.value;
    const value = oidc
      .discovery(new URL(issuer), 'discovery', undefined, oidc.None(), {
        ...(insecure(issuer) ? { execute: [oidc.allowInsecureRequests] } : {}),
      })
      .then((config) => config.serverMetadata());
    // A failed discovery is not kept: the next sign-in tries again.
    value.catch(() => metadata.delete(issuer));
    metadata.set(issuer, { at: Date.now(), value });
    return value;
  }

  return {
    async configuration(provider) {
      const server = await serverMetadata(provider.issuer);
      const config = new oidc.Configuration(
        server,
        provider.clientId,
        undefined,
        await clientAuthentication(provider),
      );
      if (insecure(provider.issuer)) oidc.allowInsecureRequests(config);
      return config;
    },
  };
}
