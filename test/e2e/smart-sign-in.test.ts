/**
 * End to end in headless Chromium: a SMART app sends the browser to the platform's authorization
 * endpoint, the platform sends it to the project's OpenID provider (oidc-provider, its development
 * login and consent pages), the provider back to the federation callback, the user consents on the
 * platform's page, the app gets a code, trades it (PKCE) at the token endpoint and reads FHIR data
 * with the token.
 *
 * Chromium is Debian's (`/usr/bin/chromium`, installed by .ci/run). Without it the test skips with
 * a message, except under CI, where it fails.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import express from 'express';
import { chromium, type BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import { asyncHandler } from '../../src/http/async-handler.js';
import { fhirPlatform, type FhirPlatform } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';
import { listen } from '../helpers/listen.js';

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
let appId: string;

/** The SMART app (public, PKCE): a launch link, and a redirect page that trades the code and reads. */
function smartApp(): express.Express {
  const app = express();
  const redirectUri = () => `${appOrigin}/callback`;
  const verifiers = new Map<string, string>();
  app.get('/', (_req, res) => {
    const state = randomBytes(16).toString('base64url');
    const verifier = randomBytes(32).toString('base64url');
    verifiers.set(state, verifier);
    const url = new URL(`${base}/oauth2/authorize`);
    url.search = new URLSearchParams({
      response_type: 'code',
      client_id: appId,
      redirect_uri: redirectUri(),
      scope: 'openid fhirUser launch/patient user/*.rs',
      state,
      aud: `${base}/fhir/R4`,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
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
      const query = new URL(req.originalUrl, appOrigin).searchParams;
      const verifier = verifiers.get(query.get('state') ?? '');
      if (!verifier) return void res.status(400).send('unknown state');
      const answer = await fetch(`${base}/oauth2/token`, {
        method: 'POST',
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code: query.get('code') ?? '',
          client_id: appId,
          redirect_uri: redirectUri(),
          code_verifier: verifier,
        }),
      });
      const token = (await answer.json()) as { access_token?: string; patient?: string; id_token?: string };
      const read = await fetch(`${base}/fhir/R4/Patient/${token.patient}`, {
        headers: { authorization: `Bearer ${token.access_token}` },
      });
      const patient = (await read.json()) as { name?: { family?: string }[] };
      const idToken = JSON.parse(
        Buffer.from(token.id_token?.split('.')[1] ?? '', 'base64url').toString() || '{}',
      ) as {
        fhirUser?: string;
      };
      res
        .type('html')
        .send(
          `<!doctype html><title>Done</title><p id="result">${answer.status} ${read.status} ${patient.name?.[0]?.family} ${idToken.fhirUser}</p>`,
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
  fhirServer = createServer(host);
  base = (await listen(fhirServer)).origin;
  appServer = createServer(smartApp());
  appOrigin = (await listen(appServer)).origin;
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
  const registered = await platform.admin.newClient('p1', {
    resourceType: 'Parameters',
    parameter: [
      { name: 'name', valueString: 'Test app' },
      { name: 'public', valueBoolean: true },
      { name: 'redirectUri', valueUri: `${appOrigin}/callback` },
      { name: 'scope', valueString: 'openid fhirUser launch/patient user/*.rs' },
    ],
  });
  appId = registered.id;

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
});

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
    await page.waitForSelector('input[name="prompt"][value="consent"], button[value="approve"]', {
      state: 'attached',
    });
    if (await page.$('input[name="prompt"][value="consent"]')) await page.click('button[type="submit"]');
    // Back at the platform, signed in: its consent page.
    await page.waitForSelector('button[value="approve"]');
    expect(page.url().startsWith(`${base}/oauth2/authorize`)).toBe(true);
    await page.click('button[value="approve"]');
    await page.waitForURL(`${appOrigin}/callback**`);
    expect(await page.textContent('#result')).toBe(`200 200 Liddell ${base}/fhir/R4/Patient/${patientId}`);
  });
});
