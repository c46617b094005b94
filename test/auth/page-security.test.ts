/**
 * Every HTML page the platform renders answers with the same security headers: the authorization
 * endpoint's error, patient picker and consent pages (on GET and on form posts, and its 500 page),
 * and the federated sign-in's refusal pages (at the authorization endpoint and at the callback)
 * and its 500 page. The walk goes through the platform as a browser would, with a real OpenID
 * provider, and uses only the platform's public entry points.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import express from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authorizationRouter } from '../../src/index.js';
import { fhirPlatform, type FhirPlatform } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';
import { TestBrowser, type Page } from './federation-browser.js';

/** The one set of headers every page carries. */
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

const REDIRECT = 'https://app.example/cb';

/** Store methods that fail (a store outage) while their name is here. */
const failing = new Set<string>();
const memory = memoryStorage();
const storage = new Proxy(memory, {
  get(target, name, receiver) {
    const value: unknown = Reflect.get(target, name, receiver);
    if (typeof name !== 'string' || typeof value !== 'function') return value;
    return (...args: unknown[]) =>
      failing.has(name)
        ? Promise.reject(new Error(`${name}: the store is down`))
        : (value as (...a: unknown[]) => unknown).apply(target, args);
  },
});

let platform: FhirPlatform;
let idp: DevIdp;
let server: Server;
let origin: string;
const errors: unknown[] = [];

function headersOf(page: Page): Record<string, string | null> {
  return Object.fromEntries(Object.keys(PAGE_HEADERS).map((name) => [name, page.headers.get(name)]));
}

function hidden(page: Page, name: string): string {
  const value = new RegExp(`name="${name}" value="([^"]*)"`).exec(page.body)?.[1];
  if (value === undefined) throw new Error(`no hidden ${name} on ${page.url}: ${page.body.slice(0, 300)}`);
  return value;
}

/** The URL of an authorization request of `clientId` (PKCE S256, `launch/patient`). */
function authorizeUrl(clientId: string): string {
  const challenge = createHash('sha256').update(randomBytes(32).toString('base64url')).digest('base64url');
  const query = new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: REDIRECT,
    scope: 'launch/patient patient/*.rs openid fhirUser',
    state: 'st-1',
    aud: `${origin}/api/fhir/R4`,
    code_challenge: challenge,
    code_challenge_method: 'S256',
  });
  return `${origin}/api/oauth2/authorize?${query.toString()}`;
}

async function app(id: string, projectId: string): Promise<void> {
  await memory.createClient({
    id,
    projectId,
    name: `App ${id}`,
    scope: 'launch/patient patient/*.rs openid fhirUser',
    admin: false,
    superAdmin: false,
    public: true,
    redirectUris: [REDIRECT],
  });
}

beforeAll(async () => {
  const host = express();
  platform = fhirPlatform({
    storage,
    bulk: false,
    audit: { enabled: false },
    onError: (error) => void errors.push(error),
  });
  host.use('/api', platform.router);
  server = host.listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  idp = await startDevIdp({
    redirectUris: [`${origin}/api/oauth2/federation/callback`],
    users: [
      { login: 'drew', email: 'drew@example.org', email_verified: true },
      { login: 'stranger', email: 'stranger@example.org', email_verified: true },
    ],
  });
  const identityProvider = { issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret };
  await memory.createProject({ id: 'p1', name: 'P1', strictMode: false, identityProvider });
  await memory.createProject({ id: 'p2', name: 'No provider', strictMode: false });
  await memory.updateResource('p1', { resourceType: 'Practitioner', id: 'dr1' });
  await memory.updateResource('p1', { resourceType: 'Patient', id: 'pat1', name: [{ family: 'Lee' }] });
  await memory.createUser('p1', {
    projectId: 'p1',
    userName: 'drew',
    userType: 'Practitioner',
    profileId: 'dr1',
    active: true,
    data: { emails: [{ value: 'drew@example.org' }] },
  });
  await app('app1', 'p1');
  await app('app2', 'p2');
});

afterAll(async () => {
  await idp?.close();
  await platform?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
});

/** Signs in at the provider from the authorization endpoint, as `login`. */
async function signIn(browser: TestBrowser, login: string): Promise<Page> {
  const atProvider = await browser.follow(authorizeUrl('app1'));
  expect(atProvider.url.startsWith(idp.issuer)).toBe(true);
  return browser.signInAtIdp(atProvider, login);
}

/** Every page of the walk, by name, with the status it must have. */
async function walk(): Promise<{ name: string; status: number; page: Page }[]> {
  const pages: { name: string; status: number; page: Page }[] = [];
  const add = (name: string, status: number, page: Page) => pages.push({ name, status, page });

  add('authorization error page', 400, await new TestBrowser().follow(authorizeUrl('nobody')));
  failing.add('readClient');
  add('authorization 500 page', 500, await new TestBrowser().follow(authorizeUrl('app1')));
  failing.delete('readClient');
  add('sign-in refusal: no identity provider', 403, await new TestBrowser().follow(authorizeUrl('app2')));
  const forged = `${origin}/api/oauth2/federation/callback?state=forged&code=x`;
  add('sign-in refusal: bad state', 400, await new TestBrowser().follow(forged));
  add('sign-in refusal: unknown user', 403, await signIn(new TestBrowser(), 'stranger'));

  const failed = new TestBrowser();
  const atProvider = await failed.follow(authorizeUrl('app1'));
  failing.add('readProject');
  add('sign-in 500 page', 500, await failed.signInAtIdp(atProvider, 'drew'));
  failing.delete('readProject');

  const browser = new TestBrowser();
  const picker = await signIn(browser, 'drew');
  add('patient picker', 200, picker);
  const form = { ticket: hidden(picker, 'ticket'), csrf: hidden(picker, 'csrf') };
  const found = await browser.submit(picker, { ...form, action: 'search', name: 'Lee' });
  add('patient picker with results', 200, found);
  const consent = await browser.submit(found, { ...form, action: 'pick', patient: 'pat1' });
  add('consent page', 200, consent);
  const forgedForm = await browser.submit(consent, { ...form, csrf: 'forged', action: 'approve' });
  add('authorization error page (form post)', 400, forgedForm);
  return pages;
}

describe('the HTML pages of the platform', () => {
  it('answer with one set of security headers', async () => {
    const pages = await walk();
    const first = headersOf(pages[0]!.page);
    for (const { name, status, page } of pages) {
      expect({ name, status: page.status }).toEqual({ name, status });
      expect(page.body).toMatch(/^<!doctype html>/i);
      // Every page the same headers as the first...
      expect({ name, headers: headersOf(page) }).toEqual({ name, headers: first });
    }
    // ...and those the chosen ones.
    expect(first).toEqual(PAGE_HEADERS);
    expect(pages.map((p) => p.name)).toHaveLength(10);
    // The two 500 pages were the store's failures, reported to the host.
    expect(errors.map((e) => (e as Error).message)).toEqual([
      'readClient: the store is down',
      'readProject: the store is down',
    ]);
  });
});

describe('the cookie of a pending authorization', () => {
  it('is scoped to the public URL its pages post to, behind a proxy that strips a path prefix', async () => {
    // The public URL is https://fhir.example.org/prefix/oauth2/authorize; the proxy in front strips
    // /prefix, so the app sees /oauth2/authorize over plain http.
    let resumeUrl = '';
    const host = express();
    host.use(
      '/oauth2/authorize',
      authorizationRouter({
        storage,
        baseUrl: 'https://fhir.example.org/prefix',
        fhirBase: `${origin}/api/fhir/R4`,
        authenticateUser: (_req, res, signIn) => {
          resumeUrl = signIn.resumeUrl;
          res.status(200).type('html').send('<!doctype html><p>Sign in</p>');
          return Promise.resolve(undefined);
        },
      }),
    );
    const start = await request(host).get(`/oauth2/authorize${new URL(authorizeUrl('app1')).search}`);
    expect(start.status).toBe(200);
    const endpoint = new URL(resumeUrl);
    expect(`${endpoint.origin}${endpoint.pathname}`).toBe('https://fhir.example.org/prefix/oauth2/authorize');
    const cookie = start.headers['set-cookie']?.[0] ?? '';
    const attributes = cookie.split(/;\s*/).slice(1);
    // The browser sends it back to the public URL, over https only, and no script reads it.
    expect(attributes).toContain(`Path=${endpoint.pathname}`);
    expect(attributes).toContain('Secure');
    expect(attributes).toContain('HttpOnly');
    expect(attributes).toContain('SameSite=Lax');
  });
});
