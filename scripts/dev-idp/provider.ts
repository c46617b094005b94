/**
 * A local OpenID Connect provider for development and tests: panva's `oidc-provider` with its
 * development login and consent pages (any password), a few users, and the platform registered as
 * a client with a secret and another with a private key (`private_key_jwt`). Started by
 * `npm run dev-idp` (scripts/dev-idp.ts) and by the tests of `federatedSignIn`. Never for
 * production: it keeps everything in memory and accepts any password.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import Provider, { type ClientMetadata } from 'oidc-provider';

/** One user of the provider: its login (the `sub`) and the claims it asserts. */
export interface DevIdpUser {
  /** What is typed in the login field; the `sub`. */
  login: string;
  email?: string;
  email_verified?: boolean;
  preferred_username?: string;
  name?: string;
  [claim: string]: unknown;
}

/** The users `npm run dev-idp` starts with (provision them by SCIM with these e-mails). */
export const DEV_IDP_USERS: readonly DevIdpUser[] = [
  {
    login: 'alice',
    email: 'alice@example.org',
    email_verified: true,
    preferred_username: 'alice',
    name: 'Alice Patient',
  },
  {
    login: 'bob',
    email: 'bob@example.org',
    email_verified: true,
    preferred_username: 'bob',
    name: 'Bob Practitioner',
  },
  {
    login: 'carol',
    email: 'carol@example.org',
    email_verified: true,
    preferred_username: 'carol',
    name: 'Carol Relative',
  },
];

export interface DevIdpOptions {
  /** @default 0 (any free port) */
  port?: number;
  /** @default '127.0.0.1' */
  host?: string;
  /** The platform's federation callback(s), registered as the clients' redirect URIs. */
  redirectUris: string[];
  /** @default DEV_IDP_USERS */
  users?: readonly DevIdpUser[];
  /** @default 'fhir-platform' */
  clientId?: string;
  /** @default 'dev-secret-change-me' */
  clientSecret?: string;
}

/** A running provider. */
export interface DevIdp {
  issuer: string;
  /** The client authenticating with `clientSecret` (`client_secret_basic`). */
  clientId: string;
  clientSecret: string;
  /** The client authenticating with `privateKey` (`private_key_jwt`): `<clientId>-jwt`. */
  jwtClientId: string;
  privateKey: JWK;
  server: Server;
  close(): Promise<void>;
}

/** Starts the provider; resolves once it listens. */
export async function startDevIdp(options: DevIdpOptions): Promise<DevIdp> {
  const users = new Map((options.users ?? DEV_IDP_USERS).map((u) => [u.login, u]));
  const clientId = options.clientId ?? 'fhir-platform';
  const clientSecret = options.clientSecret ?? 'dev-secret-change-me';
  const signing = await generateKeyPair('RS256', { extractable: true });
  const client = await generateKeyPair('ES256', { extractable: true });
  const privateKey: JWK = { ...(await exportJWK(client.privateKey)), kid: 'platform-key', alg: 'ES256' };
  const publicKey: JWK = {
    ...(await exportJWK(client.publicKey)),
    kid: 'platform-key',
    alg: 'ES256',
    use: 'sig',
  };

  const server = createServer();
  server.listen(options.port ?? 0, options.host ?? '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const issuer = `http://${options.host ?? '127.0.0.1'}:${port}`;

  const common: Partial<ClientMetadata> = {
    redirect_uris: options.redirectUris,
    grant_types: ['authorization_code'],
    response_types: ['code'],
  };
  const provider = new Provider(issuer, {
    clients: [
      {
        ...common,
        client_id: clientId,
        client_secret: clientSecret,
        token_endpoint_auth_method: 'client_secret_basic',
      },
      {
        ...common,
        client_id: `${clientId}-jwt`,
        token_endpoint_auth_method: 'private_key_jwt',
        token_endpoint_auth_signing_alg: 'ES256',
        jwks: { keys: [publicKey] },
      },
    ],
    jwks: {
      keys: [{ ...(await exportJWK(signing.privateKey)), kid: 'idp-key', alg: 'RS256', use: 'sig' }],
    },
    cookies: { keys: ['dev-idp-cookie-key'] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username'] },
    pkce: { required: () => true },
    features: { devInteractions: { enabled: true } },
    findAccount: (_ctx, sub) => ({
      accountId: sub,
      claims: () => {
        const { login: _login, ...claims } = users.get(sub) ?? { login: sub };
        return { sub, ...claims };
      },
    }),
  });
  // Quiet: the development pages' warnings are expected here.
  provider.on('server_error', () => undefined);
  const handle = provider.callback();
  server.on('request', (req, res) => void handle(req, res));

  return {
    issuer,
    clientId,
    clientSecret,
    jwtClientId: `${clientId}-jwt`,
    privateKey,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
