/**
 * End to end in headless Chromium: a SMART app sends the browser to the platform's authorization
 * endpoint, the platform sends it to the project's OpenID provider (oidc-provider, its development
 * login and consent pages), the provider back to the federation callback, the user consents, the
 * app gets a code, trades it for a token and reads FHIR data with it.
 *
 * Chromium is Debian's (`/usr/bin/chromium`, installed by .ci/run). Without it the test skips with
 * a message, except under CI, where it fails.
 */
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import express from 'express';
import { chromium, type BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueAccessToken } from '../../src/auth/access-token.js';
import { signingKeys } from '../../src/auth/signing-keys.js';
import { asyncHandler } from '../../src/http/async-handler.js';
import { fhirPlatform, type FhirPlatform } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';

const CHROMIUM = '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.CI) {
  throw new Error(`${CHROMIUM} is missing: CI must install Debian's chromium (.ci/run does)`);
}
if (!haveChromium) {
  console.warn(`Skipping the Chromium end-to-end sign-in test: no ${CHROMIUM} (apt-get install chromium)`);
}

const storage = memoryStorage();
let platform: FhirPlatform;
let idp: DevIdp;
let fhirServer: Server;
let appServer: Server;
let base: string;
let appOrigin: string;
let context: BrowserContext | undefined;
let profileDir: string;
let patientId: string;

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/**
 * The authorization leg the platform does not mount on this branch: a stand-in that asks the
 * platform's sign-in who the user is, shows a consent page, and issues a code worth a user token.
 */
function authorizationStandIn(): express.Router {
  const router = express.Router();
  const codes = new Map<string, string>();
  router.get(
    '/authorize',
    asyncHandler(async (req, res) => {
      const query = new URL(req.originalUrl, base).searchParams;
      const ticket = query.get('state') ?? '';
      const signIn = {
        projectId: 'p1',
        clientId: query.get('client_id') ?? '',
        ticket,
        resumeUrl: `${base}${req.originalUrl}`,
      };
      const user = await platform.authenticateUser(req, res, signIn);
      if (!user) return;
      const action = `${base}/authorize/consent?${query.toString()}&user=${user.userId}`;
      res
        .type('html')
        .send(
          `<!doctype html><title>Consent</title><form method="post" action="${action.replaceAll('&', '&amp;')}"><button id="allow">Allow</button></form>`,
        );
    }),
  );
  router.post(
    '/authorize/consent',
    asyncHandler(async (req, res) => {
      const query = new URL(req.originalUrl, base).searchParams;
      const user = await storage.readUser('p1', query.get('user') ?? '');
      const issued = await issueAccessToken(signingKeys(storage), {
        client: await storage.readClient(query.get('client_id') ?? ''),
        scopes: ['user/*.rs'],
        issuer: base,
        audience: base,
        lifetime: 300,
        user: { id: user.id, fhirUser: `${user.userType}/${user.profileId}` },
      });
      const code = crypto.randomUUID();
      codes.set(code, issued.token);
      res.redirect(303, `${query.get('redirect_uri')}?code=${code}&state=${query.get('state')}`);
    }),
  );
  router.post('/standin-token', express.urlencoded({ extended: false }), (req, res) => {
    const token = codes.get(String((req.body as Record<string, unknown>).code));
    if (!token) return void res.status(400).json({ error: 'invalid_grant' });
    res.json({ access_token: token, token_type: 'Bearer' });
  });
  return router;
}

/** The SMART app: a launch link, and a redirect page that trades the code and reads the patient. */
function smartApp(): express.Express {
  const app = express();
  const redirectUri = () => `${appOrigin}/callback`;
  app.get('/', (_req, res) => {
    const url = new URL(`${base}/authorize`);
    url.search = new URLSearchParams({
      response_type: 'code',
      client_id: 'app1',
      redirect_uri: redirectUri(),
      scope: 'openid fhirUser user/*.rs',
      state: crypto.randomUUID(),
      aud: `${base}/fhir/R4`,
    }).toString();
    res
      .type('html')
      .send(
        `<!doctype html><title>App</title><a id="launch" href="${url.href.replaceAll('&', '&amp;')}">Launch</a>`,
      );
  });
  app.get(
    '/callback',
    asyncHandler(async (req, res) => {
      const code = new URL(req.originalUrl, appOrigin).searchParams.get('code') ?? '';
      const token = (await (
        await fetch(`${base}/standin-token`, { method: 'POST', body: new URLSearchParams({ code }) })
      ).json()) as { access_token: string };
      const read = await fetch(`${base}/fhir/R4/Patient/${patientId}`, {
        headers: { authorization: `Bearer ${token.access_token}` },
      });
      const patient = (await read.json()) as { name?: { family?: string }[] };
      res
        .type('html')
        .send(
          `<!doctype html><title>Done</title><p id="result">${read.status} ${patient.name?.[0]?.family}</p>`,
        );
    }),
  );
  return app;
}

beforeAll(async () => {
  if (!haveChromium) return;
  const host = express();
  platform = fhirPlatform({ storage, bulk: false });
  host.use(platform.router);
  host.use(authorizationStandIn());
  fhirServer = createServer(host);
  base = await listen(fhirServer);
  appServer = createServer(smartApp());
  appOrigin = await listen(appServer);
  idp = await startDevIdp({ redirectUris: [`${base}/oauth2/federation/callback`] });

  await storage.createProject({
    id: 'p1',
    name: 'P1',
    strictMode: false,
    identityProvider: { issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret },
  });
  patientId = (await storage.createResource('p1', { resourceType: 'Patient', name: [{ family: 'Liddell' }] }))
    .id;
  await storage.createUser('p1', {
    id: 'u-alice',
    projectId: 'p1',
    userName: 'alice',
    userType: 'Patient',
    profileId: patientId,
    active: true,
    data: { emails: [{ value: 'alice@example.org' }] },
  });
  await storage.createClient({
    id: 'app1',
    projectId: 'p1',
    name: 'Test app',
    scope: 'openid fhirUser user/*.rs',
    admin: false,
    superAdmin: false,
  });

  profileDir = mkdtempSync(path.join(tmpdir(), 'fpk-chromium-'));
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}, 60_000);

afterAll(async () => {
  await context?.close();
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
  await idp?.close();
  await platform?.close();
  for (const server of [fhirServer, appServer]) {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  }
});

describe.skipIf(!haveChromium)('SMART sign-in in headless Chromium', () => {
  it('app → authorize → provider login → callback → consent → code → token → FHIR read', async () => {
    const page = await context!.newPage();
    await page.goto(`${appOrigin}/`);
    await page.click('#launch');
    // The provider's development login page, then its consent page.
    await page.waitForURL(`${idp.issuer}/interaction/**`);
    await page.fill('input[name="login"]', 'alice');
    await page.fill('input[name="password"]', 'any');
    await page.click('button[type="submit"]');
    await page.waitForSelector('button[type="submit"], #allow');
    if (page.url().startsWith(idp.issuer)) await page.click('button[type="submit"]');
    // Back at the platform, signed in: its consent page.
    await page.waitForSelector('#allow');
    expect(page.url().startsWith(`${base}/authorize`)).toBe(true);
    await page.click('#allow');
    await page.waitForURL(`${appOrigin}/callback**`);
    expect(await page.textContent('#result')).toBe('200 Liddell');
  });
});
