/**
 * The identity provider's ID-token signature (issue 43 item 3), through the platform's real SMART
 * sign-in: app → /oauth2/authorize → a hand-made provider → the federation callback → consent →
 * code → token. The provider signs as each test says, so forged, unsigned and MAC-signed ID tokens
 * can be tried, keys rotated and fetches of its key set counted.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { fhirPlatform, type FhirPlatform, type FhirPlatformOptions } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { TestBrowser, type Page } from './federation-browser.js';
import {
  hmacWith,
  idpKey,
  signedWith,
  startHandMadeIdp,
  unsigned,
  type HandMadeIdp,
} from './fixtures/hand-made-idp.js';

const SCOPE = 'openid fhirUser launch/patient user/*.rs';

let server: Server;
let origin: string;
let current: express.Express;
let idp: HandMadeIdp;
let other: HandMadeIdp;
let platform: FhirPlatform;
let storage: Storage;
let errors: unknown[];
/** The app of each project, by project id. */
const apps = new Map<string, string>();

const callbackUrl = () => `${origin}/oauth2/federation/callback`;
const appRedirect = () => `${origin}/app/callback`;

/** A platform on a fresh store behind the one server both providers redirect to. */
async function startPlatform(federation: FhirPlatformOptions['federation'] = {}): Promise<void> {
  await platform?.close();
  storage = memoryStorage();
  errors = [];
  platform = fhirPlatform({
    storage,
    bulk: false,
    audit: { enabled: false },
    onError: (error) => void errors.push(error),
    federation,
  });
  const host = express();
  host.use(platform.router);
  // The SMART app's redirect URI: it only shows the code it was given.
  host.get('/app/callback', (req, res) => {
    const code = new URL(req.originalUrl, origin).searchParams.get('code') ?? '';
    res.type('text').send(code);
  });
  current = host;
  for (const [projectId, provider] of [
    ['p1', idp],
    ['p2', other],
  ] as const) {
    await storage.createProject({
      id: projectId,
      name: projectId,
      strictMode: false,
      identityProvider: {
        issuer: provider.issuer,
        clientId: provider.clientId,
        clientSecret: provider.clientSecret,
      },
    });
    const patient = await storage.createResource(projectId, { resourceType: 'Patient' });
    await storage.createUser(projectId, {
      id: `alice-${projectId}`,
      projectId,
      userName: 'alice',
      userType: 'Patient',
      profileId: patient.id,
      active: true,
      data: { emails: [{ value: 'alice@example.org' }] },
    });
    const app = await platform.admin.newClient(projectId, {
      resourceType: 'Parameters',
      parameter: [
        { name: 'name', valueString: 'App' },
        { name: 'public', valueBoolean: true },
        { name: 'redirectUri', valueUri: appRedirect() },
        { name: 'scope', valueString: SCOPE },
      ],
    });
    apps.set(projectId, app.id);
  }
}

function resetProvider(provider: HandMadeIdp): void {
  provider.published = [provider.key.publicJwk];
  provider.signIdToken = signedWith(provider.key);
  provider.metadata = {};
  provider.jwksRoute = undefined;
  provider.jwksFetches = 0;
  provider.idTokensIssued = 0;
}

beforeAll(async () => {
  server = createServer((req, res) => current(req, res)).listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // Two providers whose only keys share one `kid` (each its own key): their caches must not mix.
  idp = await startHandMadeIdp(callbackUrl());
  other = await startHandMadeIdp(callbackUrl());
});

beforeEach(async () => {
  resetProvider(idp);
  resetProvider(other);
  await startPlatform();
});

afterEach(() => {
  vi.useRealTimers();
});

afterAll(async () => {
  await platform?.close();
  await idp?.close();
  await other?.close();
  server?.closeAllConnections();
  server?.close();
});

/** Why the fetches of key sets reported to onError failed (`JwksFetchError` reasons). */
const fetchFailures = () =>
  errors.map((e) => ((e as { cause?: { reason?: string } }).cause ?? (e as { reason?: string })).reason);

/** The app sends a fresh browser to the authorization endpoint of `projectId`'s app. */
async function launch(projectId = 'p1'): Promise<{ browser: TestBrowser; page: Page; verifier: string }> {
  const verifier = randomBytes(32).toString('base64url');
  const url = new URL(`${origin}/oauth2/authorize`);
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: apps.get(projectId)!,
    redirect_uri: appRedirect(),
    scope: SCOPE,
    state: 'app-state',
    aud: `${origin}/fhir/R4`,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
  }).toString();
  const browser = new TestBrowser();
  return { browser, page: await browser.follow(url.href), verifier };
}

const reason = (page: Page) => /data-reason="([\w-]+)"/.exec(page.body)?.[1];
const isConsentPage = (page: Page) => page.status === 200 && page.body.includes('value="approve"');

/** The federated sign-in's cookies that say who signed in for an authorization (ticket). */
const signedInCookies = (browser: TestBrowser) =>
  [...(browser.cookies.get(new URL(origin).host)?.keys() ?? [])].filter((n) => n.startsWith('fpk-signin-'));

/** The browser got the refusal page `reason` and nothing that signs the user in. */
function expectRefused(
  { browser, page }: { browser: TestBrowser; page: Page },
  expected: [number, string],
  label?: string,
): void {
  expect([page.status, reason(page)], label).toEqual(expected);
  expect(isConsentPage(page)).toBe(false);
  // It came back to the callback, and never to the app with a code.
  expect(browser.visited.some((u) => u.startsWith(`${callbackUrl()}?`))).toBe(true);
  expect(browser.visited.some((u) => u.startsWith(appRedirect()))).toBe(false);
  // No signed-in cookie either.
  expect(signedInCookies(browser)).toEqual([]);
}

/** The browser, now on the platform's consent page, allows the app; the token endpoint's answer. */
async function approveAndTrade(
  browser: TestBrowser,
  page: Page,
  verifier: string,
  projectId = 'p1',
): Promise<Response> {
  expect(isConsentPage(page)).toBe(true);
  const hidden = (name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(page.body)?.[1] ?? '';
  const atApp = await browser.submit(page, {
    ticket: hidden('ticket'),
    csrf: hidden('csrf'),
    action: 'approve',
  });
  expect(atApp.url.startsWith(`${appRedirect()}?`)).toBe(true);
  return fetch(`${origin}/oauth2/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code: atApp.body,
      client_id: apps.get(projectId)!,
      redirect_uri: appRedirect(),
      code_verifier: verifier,
    }),
  });
}

describe("federated sign-in: the identity provider's ID-token signature", () => {
  it('signs the user in with a genuine ID token, up to a code and a token', async () => {
    const { browser, page, verifier } = await launch();
    expect(signedInCookies(browser)).toHaveLength(1);
    const answer = await approveAndTrade(browser, page, verifier);
    expect(answer.status).toBe(200);
    const body = (await answer.json()) as { access_token?: string; id_token?: string };
    expect(body.access_token).toBeTruthy();
    expect(body.id_token).toBeTruthy();
    expect(idp.jwksFetches).toBe(1);
  });

  it("refuses an ID token signed by another key that carries the published key's kid", async () => {
    const forger = await idpKey(idp.key.kid);
    idp.signIdToken = signedWith(forger);
    const started = await launch();
    expectRefused(started, [400, 'idp-error']);
    expect(started.page.body).toContain('ID token signature invalid');
    expect(idp.idTokensIssued).toBe(1);
    // The provider's published keys were read to find this out.
    expect(idp.jwksFetches).toBe(1);
    // The callback did not send the browser back to the authorization endpoint signed in.
    const resumed = started.browser.visited.some((u) => u.startsWith(`${origin}/oauth2/authorize?ticket=`));
    expect(resumed).toBe(false);
  });

  it('refuses an ID token signed with a kid the provider does not publish', async () => {
    idp.signIdToken = signedWith(await idpKey('unknown-kid'));
    const started = await launch();
    expectRefused(started, [400, 'idp-error']);
    expect(started.page.body).toContain('No published key of the provider matches the ID token');
    // Fetched just now: the unknown kid waits for the cooldown before it causes another fetch.
    expect(idp.jwksFetches).toBe(1);
  });

  it('refuses unsigned (alg none) and MAC-signed (HS256 with the client secret) ID tokens', async () => {
    // Listed in its metadata or not: the platform verifies only signatures by the published keys.
    for (const metadata of [{}, { id_token_signing_alg_values_supported: ['RS256', 'HS256', 'none'] }]) {
      idp.metadata = metadata;
      await startPlatform(); // the metadata is discovered again
      for (const [alg, sign] of [
        ['none', unsigned],
        ['HS256', hmacWith(idp.clientSecret)],
      ] as const) {
        idp.signIdToken = sign;
        expectRefused(await launch(), [400, 'idp-error'], `${alg} ${JSON.stringify(metadata)}`);
      }
    }
  });

  it('fetches the key set once and reuses it for the next sign-ins', async () => {
    for (let i = 0; i < 3; i++) {
      const { page } = await launch();
      expect(isConsentPage(page)).toBe(true);
    }
    expect(idp.jwksFetches).toBe(1);
  });

  it('follows a key rotation without a restart: an unknown kid fetches the key set again', async () => {
    // Only Date is faked: the cooldown between fetches (30 s) passes without waiting.
    vi.useFakeTimers({ toFake: ['Date'] });
    expect(isConsentPage((await launch()).page)).toBe(true);
    const next = await idpKey('idp-key-2');
    idp.published = [idp.key.publicJwk, next.publicJwk];
    idp.signIdToken = signedWith(next);
    vi.setSystemTime(Date.now() + 31_000);
    expect(isConsentPage((await launch()).page)).toBe(true);
    expect(idp.jwksFetches).toBe(2);
    // The old key retired: still the cached set, no fetch.
    idp.published = [next.publicJwk];
    expect(isConsentPage((await launch()).page)).toBe(true);
    expect(idp.jwksFetches).toBe(2);
  });

  it("keeps each provider's keys apart, though their kids are the same", async () => {
    expect(isConsentPage((await launch('p1')).page)).toBe(true);
    expect(isConsentPage((await launch('p2')).page)).toBe(true);
    expect([idp.jwksFetches, other.jwksFetches]).toEqual([1, 1]);
    // The second provider's token signed with the first one's key: refused.
    other.signIdToken = signedWith(idp.key);
    expectRefused(await launch('p2'), [400, 'idp-error']);
  });

  it('keeps two platforms apart: each verifies with its own cache', async () => {
    const first = platform;
    expect(isConsentPage((await launch()).page)).toBe(true);
    await startPlatform();
    expect(first).not.toBe(platform);
    expect(isConsentPage((await launch()).page)).toBe(true);
    expect(idp.jwksFetches).toBe(2);
  });
});

describe("federated sign-in: fetching the provider's key set is bounded", () => {
  it('refuses a key set larger than maxBytes', async () => {
    idp.jwksRoute = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ keys: [idp.key.publicJwk], padding: 'x'.repeat(70 * 1024) }));
    };
    expectRefused(await launch(), [502, 'idp-unavailable']);
    expect(fetchFailures()).toContain('too-large');
  });

  it('does not follow a redirect of the jwks_uri', async () => {
    const asked: string[] = [];
    idp.jwksRoute = (req, res) => {
      asked.push(req.url ?? '');
      if (req.url === '/jwks') res.writeHead(302, { location: `${idp.issuer}/jwks?moved` }).end();
      else
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ keys: idp.published }));
    };
    expectRefused(await launch(), [502, 'idp-unavailable']);
    expect(asked).toEqual(['/jwks']);
    expect(fetchFailures()).toContain('status');
  });

  it('gives up on a key set that does not come within timeout', async () => {
    await startPlatform({ jwks: { timeout: 50 } });
    idp.jwksRoute = () => undefined; // never answers
    expectRefused(await launch(), [502, 'idp-unavailable']);
    expect(fetchFailures()).toContain('timeout');
  });

  it('refuses a jwks_uri on a private address unless allowed', async () => {
    await startPlatform({ jwks: { allowPrivateAddresses: false } });
    expectRefused(await launch(), [502, 'idp-unavailable']);
    expect(idp.jwksFetches).toBe(0);
    expect(fetchFailures()).toContain('address');
  });

  it('refuses a jwks_uri in http on a host that is not this machine', async () => {
    idp.metadata = { jwks_uri: 'http://idp.example.org/jwks' };
    await startPlatform();
    expectRefused(await launch(), [502, 'idp-unavailable']);
  });

  it('checks the jwks options when the platform is made', () => {
    expect(() => fhirPlatform({ storage, bulk: false, federation: { jwks: { timeout: 0 } } })).toThrow(
      /jwks\.timeout/,
    );
    expect(() =>
      fhirPlatform({ storage, bulk: false, federation: { jwks: { maxByte: 1 } as never } }),
    ).toThrow(/maxBytes/);
  });
});
