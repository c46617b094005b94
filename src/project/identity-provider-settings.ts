/**
 * A project's OpenID Connect identity provider as `Project/{id}/$settings` sets it (`idp*`
 * parameters) and as the `Project` resource shows it (secrets never shown). See docs/login.md.
 */
import type { ProjectIdentityProvider, UserMatchAttribute } from '../storage/types.js';
import { invalidParameter, type ParameterValue } from '../http/fhir-parameters.js';
import { readPrivateJwk, remoteUrlProblem } from './remote-server-checks.js';

/** The `$settings` parameters of the identity provider. */
export const IDENTITY_PROVIDER_PARAMETERS = {
  idpIssuer: { type: ['uri', 'url', 'string'] },
  idpClientId: { type: ['string', 'id'] },
  idpClientSecret: { type: 'string' },
  idpPrivateKey: { type: 'string' },
  idpScope: { type: 'string' },
  idpClaim: { type: ['string', 'code'] },
  idpMatch: { type: ['code', 'string'] },
} as const;

/** The `reset` value that removes the project's identity provider. */
export const IDENTITY_PROVIDER_RESET = 'identityProvider';

/** The SCIM attributes a claim may be compared with. */
export const MATCH_ATTRIBUTES: readonly UserMatchAttribute[] = ['userName', 'externalId', 'email'];

type Read = {
  [K in keyof typeof IDENTITY_PROVIDER_PARAMETERS]?: ParameterValue<string> | undefined;
};

/** What a `$settings` call changes of the identity provider (each field given replaces the stored one). */
export type IdentityProviderChange = Partial<ProjectIdentityProvider>;

/** The identity provider fields among read `$settings` parameters (400 at the bad value). */
export function readIdentityProviderChange(read: Read): IdentityProviderChange {
  const change: IdentityProviderChange = {};
  if (read.idpIssuer) {
    const problem = remoteUrlProblem(read.idpIssuer.value);
    if (problem) throw invalidParameter(read.idpIssuer.expression, `'idpIssuer' ${problem}`);
    change.issuer = read.idpIssuer.value.replace(/\/+$/, '');
  }
  if (read.idpClientId) change.clientId = read.idpClientId.value;
  if (read.idpClientSecret && read.idpPrivateKey) {
    throw invalidParameter(
      read.idpPrivateKey.expression,
      "Give 'idpClientSecret' or 'idpPrivateKey', not both",
    );
  }
  if (read.idpClientSecret) change.clientSecret = read.idpClientSecret.value;
  if (read.idpPrivateKey) change.privateKey = readPrivateJwk(read.idpPrivateKey, 'idpPrivateKey');
  if (read.idpScope) {
    const scopes = read.idpScope.value.split(/\s+/).filter(Boolean);
    if (!scopes.includes('openid'))
      throw invalidParameter(read.idpScope.expression, "'idpScope' must hold 'openid'");
    change.scope = scopes.join(' ');
  }
  if (read.idpClaim) change.claim = read.idpClaim.value;
  if (read.idpMatch) {
    const found = MATCH_ATTRIBUTES.find((a) => a === read.idpMatch?.value);
    if (!found) {
      throw invalidParameter(
        read.idpMatch.expression,
        `'idpMatch' must be one of ${MATCH_ATTRIBUTES.join(', ')}`,
      );
    }
    change.matchAttribute = found;
  }
  return change;
}

/**
 * The stored provider with `change` applied: a new secret replaces a key and a new key a secret
 * (the client authenticates one way). Undefined when neither holds anything. Throws `problem`
 * when the result lacks its issuer or client id.
 */
export function applyIdentityProviderChange(
  current: ProjectIdentityProvider | undefined,
  change: IdentityProviderChange,
  problem: (text: string) => Error,
): ProjectIdentityProvider | undefined {
  if (Object.keys(change).length === 0) return current;
  const next: Partial<ProjectIdentityProvider> = { ...current, ...change };
  if (change.clientSecret !== undefined) delete next.privateKey;
  if (change.privateKey !== undefined) delete next.clientSecret;
  if (!next.issuer || !next.clientId) {
    throw problem("An identity provider needs both 'idpIssuer' and 'idpClientId'");
  }
  return next as ProjectIdentityProvider;
}

/** How the platform authenticates to the provider. */
export type IdentityProviderClientAuth = 'client_secret_basic' | 'private_key_jwt' | 'none';

/** The identity provider as the `Project` resource shows it: no secret, no private key. */
export interface IdentityProviderView {
  issuer: string;
  clientId: string;
  clientAuthentication: IdentityProviderClientAuth;
  /** The `kid` of the private key, when it has one. */
  keyId?: string;
  scope?: string;
  claim?: string;
  matchAttribute?: UserMatchAttribute;
}

/** How a provider's client authenticates. */
export function identityProviderClientAuth(provider: ProjectIdentityProvider): IdentityProviderClientAuth {
  if (provider.privateKey) return 'private_key_jwt';
  return provider.clientSecret ? 'client_secret_basic' : 'none';
}

/** The provider without its secrets. */
export function identityProviderView(provider: ProjectIdentityProvider): IdentityProviderView {
  const kid = provider.privateKey?.kid;
  return {
    issuer: provider.issuer,
    clientId: provider.clientId,
    clientAuthentication: identityProviderClientAuth(provider),
    ...(typeof kid === 'string' ? { keyId: kid } : {}),
    ...(provider.scope !== undefined ? { scope: provider.scope } : {}),
    ...(provider.claim !== undefined ? { claim: provider.claim } : {}),
    ...(provider.matchAttribute !== undefined ? { matchAttribute: provider.matchAttribute } : {}),
  };
}
