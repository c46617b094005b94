import path from 'node:path';
import type { ProfileType } from '../index.js';
import type { ServeSetting } from './serve-setting.js';
import { boolean, integer, oneOf, optionalText, size } from './setting-readers.js';

const PROFILE_TYPES: readonly ProfileType[] = ['Patient', 'Practitioner', 'RelatedPerson'];

/** The settings of identity: SCIM users, the federated sign-in's provider and its keys, tokens (in `--help` order). */
export const IDENTITY_SETTINGS = {
  scimDefaultUserType: {
    env: 'SCIM_DEFAULT_USER_TYPE',
    flag: '--scim-default-user-type <type>',
    description:
      'SCIM profile type of users created without `userType`: `Patient`, `Practitioner` or `RelatedPerson`',
    read: oneOf(PROFILE_TYPES),
  },
  scimEchoUserName: {
    env: 'SCIM_ECHO_USER_NAME',
    flag: '--scim-echo-user-name',
    defaultText: 'false',
    description:
      '`true`: SCIM answers carry the `userName` the identity provider sent ([docs/scim.md](docs/scim.md))',
    read: boolean,
  },
  idpIssuer: {
    env: 'IDP_ISSUER',
    flag: '--idp-issuer <url>',
    description:
      'the OpenID Connect identity provider users sign in with, for projects that set none of their own: its issuer (`https://`, or `http://` on localhost) ([docs/login.md](docs/login.md)); register `<BASE_URL>/oauth2/federation/callback` there',
    read: (text, invalid) => {
      if (text === undefined) return undefined;
      const url = URL.canParse(text)
        ? new URL(text)
        : invalid('an absolute https URL (http only on localhost)');
      const local = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
      if (url.protocol !== 'https:' && !(url.protocol === 'http:' && local))
        invalid('an absolute https URL (http only on localhost)');
      return text.replace(/\/+$/, '');
    },
  },
  idpClientId: {
    env: 'IDP_CLIENT_ID',
    flag: '--idp-client-id <id>',
    description: "the platform's client id at that provider (with `IDP_ISSUER`)",
    read: optionalText,
  },
  idpClientSecret: {
    env: 'IDP_CLIENT_SECRET',
    flag: '--idp-client-secret <secret>',
    description: 'its client secret (`client_secret_basic`)',
    read: optionalText,
  },
  idpPrivateKeyFile: {
    env: 'IDP_PRIVATE_KEY_FILE',
    flag: '--idp-private-key-file <file>',
    description: 'or a file holding its private JWK (JSON), to authenticate with `private_key_jwt`',
    read: (text) => (text === undefined ? undefined : path.resolve(text)),
  },
  idpScope: {
    env: 'IDP_SCOPE',
    flag: '--idp-scope <scopes>',
    defaultText: 'openid email profile',
    description: 'scopes asked of the provider (with `openid`)',
    read: (text, invalid) => {
      const scope = (text ?? 'openid email profile').split(/\s+/).join(' ');
      if (!scope.split(' ').includes('openid')) invalid('scopes including openid');
      return scope;
    },
  },
  idpClaim: {
    env: 'IDP_CLAIM',
    flag: '--idp-claim <claim>',
    defaultText: 'email',
    description: "the provider's claim that names the user (`email`, `preferred_username`, `sub`, …)",
    read: (text) => text ?? 'email',
  },
  idpMatch: {
    env: 'IDP_MATCH',
    flag: '--idp-match <attribute>',
    defaultText: 'email',
    description: 'the SCIM user attribute the claim must equal: `email`, `userName` or `externalId`',
    read: (text, invalid) => oneOf(['email', 'userName', 'externalId'] as const)(text, invalid) ?? 'email',
  },
  idpJwksTimeoutMs: {
    env: 'IDP_JWKS_TIMEOUT_MS',
    flag: '--idp-jwks-timeout-ms <ms>',
    defaultText: '5000',
    description:
      "how long an identity provider's `jwks_uri` (the keys that verify its ID tokens' signatures) has to answer; a slower one fails the sign-in ([login](docs/login.md#the-providers-keys))",
    read: integer(5000, 1),
  },
  idpJwksMaxBytes: {
    env: 'IDP_JWKS_MAX_BYTES',
    flag: '--idp-jwks-max-bytes <bytes>',
    defaultText: '65536',
    description: "most bytes read from an identity provider's `jwks_uri`; a larger key set fails the sign-in",
    read: size(65536, { infinite: false }),
  },
  idpJwksCacheMaxAgeMs: {
    env: 'IDP_JWKS_CACHE_MAX_AGE_MS',
    flag: '--idp-jwks-cache-max-age-ms <ms>',
    defaultText: '600000',
    description: "how long an identity provider's fetched keys are reused before they are fetched again",
    read: integer(600_000, 0),
  },
  idpJwksCooldownMs: {
    env: 'IDP_JWKS_COOLDOWN_MS',
    flag: '--idp-jwks-cooldown-ms <ms>',
    defaultText: '30000',
    description:
      "after a fetch of an identity provider's keys, how long an ID token with a `kid` they lack is refused rather than cause another fetch (a rotated key)",
    read: integer(30_000, 0),
  },
  allowPrivateIdpJwksAddresses: {
    env: 'ALLOW_PRIVATE_IDP_JWKS_ADDRESSES',
    flag: '--allow-private-idp-jwks-addresses',
    description:
      "`true`/`false`: fetch identity providers' `jwks_uri`s on loopback, private and link-local addresses (a provider inside your network); unset: allowed unless `NODE_ENV=production`",
    read: (text, invalid) => (text === undefined ? undefined : boolean(text, invalid)),
  },
  allowPrivateJwksAddresses: {
    env: 'ALLOW_PRIVATE_JWKS_ADDRESSES',
    flag: '--allow-private-jwks-addresses',
    description:
      '`true`/`false`: register and fetch client `jwksUri`s on loopback, private and link-local addresses; unset: allowed unless `NODE_ENV=production` ([auth](docs/auth.md#client-keys-from-a-jwks_uri))',
    read: (text, invalid) => (text === undefined ? undefined : boolean(text, invalid)),
  },
  refreshTokenLifetime: {
    env: 'REFRESH_TOKEN_LIFETIME',
    flag: '--refresh-token-lifetime <seconds>',
    defaultText: '2592000',
    description:
      'seconds a refresh token granted with `offline_access` lasts (30 days; each refresh issues a new one) ([auth](docs/auth.md#token-request-authorization_code))',
    read: integer(30 * 24 * 3600, 1),
  },
  onlineRefreshTokenLifetime: {
    env: 'ONLINE_REFRESH_TOKEN_LIFETIME',
    flag: '--online-refresh-token-lifetime <seconds>',
    defaultText: '43200',
    description: 'seconds a refresh token granted with `online_access` lasts (12 hours)',
    read: integer(12 * 3600, 1),
  },
  authorizeTicketLifetime: {
    env: 'AUTHORIZE_TICKET_LIFETIME',
    flag: '--authorize-ticket-lifetime <seconds>',
    defaultText: '600',
    description:
      'seconds a pending SMART authorization (sign-in, patient choice, consent) may take before the user starts again',
    read: integer(600, 1),
  },
} satisfies Record<string, ServeSetting<unknown>>;
