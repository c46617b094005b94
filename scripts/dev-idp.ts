/**
 * `npm run dev-idp`: a local OpenID Connect provider to sign SCIM users in with, for a newcomer's
 * first SMART App Launch on this machine (docs/login.md). It runs from a clone (oidc-provider is a
 * development dependency: a test provider has no place in a production install), on the Node.js
 * the package needs (20.19 or later). It prints the settings that point `npm start` at it.
 *
 * Environment: DEV_IDP_PORT (default 8104), BASE_URL of the platform (default
 * http://localhost:8103), whose federation callback is registered as the redirect URI.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';

// oidc-provider warns "Unsupported runtime" when it is loaded on a Node.js that is not an LTS
// release from 22 (codename Jod) on: its maintainers' support policy. What it uses of Node.js
// (URL.parse, crypto.hash) is in 20.18, and the sign-in tests run it on 20: say so before its
// warning, then load it.
const lts = process.release.lts;
if (!lts || lts < 'Jod') {
  process.stderr.write(
    `Note: oidc-provider warns "Unsupported runtime" on Node.js ${process.versions.node}: it supports Node.js 22 LTS and later. ` +
      'This development provider runs on Node.js 20.19 or later, as the package does: the warning does not stop it.\n',
  );
}
const { DEV_IDP_USERS, startDevIdp } = await import('./dev-idp/provider.js');

const port = Number(process.env.DEV_IDP_PORT ?? 8104);
const base = (process.env.BASE_URL ?? 'http://localhost:8103').replace(/\/+$/, '');
const callbacks = new Set([`${base}/oauth2/federation/callback`]);
// The same server under its other local name, so that either spelling of BASE_URL works.
for (const [a, b] of [
  ['//localhost:', '//127.0.0.1:'],
  ['//127.0.0.1:', '//localhost:'],
] as const) {
  if (base.includes(a)) callbacks.add(`${base.replace(a, b)}/oauth2/federation/callback`);
}

const idp = await startDevIdp({ port, redirectUris: [...callbacks] });
const keyFile = path.resolve('dev-idp-key.json');
writeFileSync(keyFile, `${JSON.stringify(idp.privateKey, null, 2)}\n`, { mode: 0o600 });

const lines = [
  `Development OpenID provider (any password) at ${idp.issuer}`,
  `  redirect URIs: ${[...callbacks].join(', ')}`,
  `  users (login / e-mail): ${DEV_IDP_USERS.map((u) => `${u.login} / ${u.email}`).join(', ')}`,
  '',
  'Start the platform signed in through it (client secret):',
  `  IDP_ISSUER=${idp.issuer} IDP_CLIENT_ID=${idp.clientId} IDP_CLIENT_SECRET=${idp.clientSecret} npm start`,
  `or with private_key_jwt (its key written to ${keyFile}):`,
  `  IDP_ISSUER=${idp.issuer} IDP_CLIENT_ID=${idp.jwtClientId} IDP_PRIVATE_KEY_FILE=${keyFile} npm start`,
  '',
  'Ctrl-C stops it (it keeps nothing).',
];
process.stdout.write(`${lines.join('\n')}\n`);

const stop = () => void idp.close().then(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
