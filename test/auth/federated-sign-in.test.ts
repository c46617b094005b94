import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import { createAuditTrail, type AuditTrail } from '../../src/audit/trail.js';
import { federatedSignIn } from '../../src/auth/federation/federated-sign-in.js';
import { asyncHandler } from '../../src/http/async-handler.js';
import { memoryStorage } from '../../src/stores.js';
import type { ProjectIdentityProvider, Storage } from '../../src/storage/types.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';
import { TestBrowser, type Page } from './federation-browser.js';

const USERS = [
  { login: 'alice', email: 'alice@example.org', email_verified: true, preferred_username: 'alice.w' },
  { login: 'dora', email: 'dora@example.org', email_verified: true },
  { login: 'ivy', email: 'ivy@example.org', email_verified: true },
  { login: 'twin', email: 'twin@example.org', email_verified: true },
  { login: 'eve', email: 'eve@example.org', email_verified: false },
  { login: 'nobody', email: 'nobody@example.org', email_verified: true },
];

let idp: DevIdp;
let server: Server;
let origin: string;
let storage: Storage;
let trail: AuditTrail;
let events: AuditEventResource[];
let current: express.Express;

/** The stand-in of the authorization endpoint: asks the sign-in, answers who signed in. */
function app(): express.Express {
  const fed = federatedSignIn({
    storage,
    auditTrail: trail,
    onError: () => undefined,
    texts: { 'unknown-user': 'No such person here.' },
  });
  const host = express();
  host.use('/oauth2/federation', fed.router);
  host.get(
    '/authorize',
    asyncHandler(async (req, res) => {
      const query = new URL(req.originalUrl, origin).searchParams;
      const ticket = query.get('ticket') ?? '';
      const projectId = query.get('project') ?? 'p1';
      const resumeUrl = `${origin}/authorize?project=${projectId}&ticket=${ticket}`;
      const user = await fed.authenticateUser(req, res, { projectId, clientId: 'app', ticket, resumeUrl });
      if (user) res.json(user);
    }),
  );
  return host;
}

async function setProvider(provider: Partial<ProjectIdentityProvider> | undefined): Promise<void> {
  const base = { issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret };
  await storage.updateProject('p1', { identityProvider: provider && { ...base, ...provider } });
}

async function user(
  id: string,
  fields: { userName?: string; externalId?: string; email?: string; active?: boolean },
) {
  await storage.createUser('p1', {
    id,
    projectId: 'p1',
    userName: fields.userName ?? id,
    ...(fields.externalId ? { externalId: fields.externalId } : {}),
    userType: 'Patient',
    profileId: `pat-${id}`,
    active: fields.active ?? true,
    data: fields.email ? { emails: [{ value: fields.email }] } : {},
  });
}

beforeAll(async () => {
  // Each test mounts a fresh app (fresh store and trail) behind the one server the provider knows.
  server = createServer((req, res) => current(req, res)).listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  idp = await startDevIdp({ redirectUris: [`${origin}/oauth2/federation/callback`], users: USERS });
});

afterAll(async () => {
  await idp?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
});

beforeEach(async () => {
  storage = memoryStorage();
  events = [];
  trail = createAuditTrail({ storage, flushIntervalMs: 60_000, onAudit: (event) => void events.push(event) });
  current = app();
  await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
  await setProvider({});
  await user('u-alice', { email: 'Alice@Example.org', userName: 'alice.w', externalId: 'alice' });
  await user('u-dora', { email: 'dora@example.org', active: false });
  await user('u-twin1', { email: 'twin@example.org' });
  await user('u-twin2', { email: 'twin@example.org' });
  await user('u-eve', { email: 'eve@example.org' });
});

/** Runs the browser from the authorization stand-in through the provider as `login`. */
async function signIn(login: string, ticket = 't1'): Promise<{ page: Page; browser: TestBrowser }> {
  const browser = new TestBrowser();
  const atIdp = await browser.follow(`${origin}/authorize?ticket=${ticket}`);
  const page = await browser.signInAtIdp(atIdp, login);
  return { page, browser };
}

function reason(page: Page): string | undefined {
  return /data-reason="([\w-]+)"/.exec(page.body)?.[1];
}

const signInEvents = () =>
  events.filter((e) => e.entity?.[0]?.description === 'sign-in through the identity provider');

describe('federatedSignIn with a real OpenID provider', () => {
  it('matches the e-mail claim (default) to the SCIM user, case-insensitively, and audits it', async () => {
    const { page, browser } = await signIn('alice');
    expect(page.status).toBe(200);
    expect(JSON.parse(page.body)).toEqual({ userId: 'u-alice' });
    // The browser went to the provider with PKCE S256, state and nonce, and came back to the callback.
    const toIdp = new URL(browser.visited.find((u) => u.startsWith(`${idp.issuer}/auth`))!);
    expect(toIdp.searchParams.get('code_challenge_method')).toBe('S256');
    expect(toIdp.searchParams.get('state')).toBeTruthy();
    expect(toIdp.searchParams.get('nonce')).toBeTruthy();
    expect(toIdp.searchParams.get('redirect_uri')).toBe(`${origin}/oauth2/federation/callback`);
    const [event] = signInEvents();
    expect(event?.outcome).toBe('0');
    expect(event?.agent[0]?.who?.identifier?.value).toBe('u-alice');
    expect(event?.agent[0]?.who?.reference).toBe('Patient/pat-u-alice');
    expect(event?.entity?.[0]?.detail).toContainEqual({
      type: 'claim:email',
      valueString: 'alice@example.org',
    });
    // The ticket is remembered in this browser only: another browser starts over.
    const again = await browser.follow(`${origin}/authorize?ticket=t1`);
    expect(JSON.parse(again.body)).toEqual({ userId: 'u-alice' });
    const other = await new TestBrowser().request(`${origin}/authorize?ticket=t1`);
    expect(other.status).toBe(303);
    // The transaction cookie: HttpOnly, SameSite=Lax, for the callback's path only; a signed JWT.
    const [cookie] = other.headers.getSetCookie();
    expect(cookie).toMatch(/^fpk-fed-[\w-]+=ey[\w-]+\.[\w-]+\.[\w-]+;/);
    expect(cookie).toContain('Path=/oauth2/federation/callback');
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Lax');
    expect(cookie).not.toContain('Secure'); // http here; https URLs get Secure
    expect(other.headers.get('location')).toMatch(new RegExp(`^${idp.issuer}/auth`));
  });

  it('matches preferred_username to userName', async () => {
    await setProvider({ claim: 'preferred_username', matchAttribute: 'userName' });
    const { page } = await signIn('alice');
    expect(JSON.parse(page.body)).toEqual({ userId: 'u-alice' });
  });

  it('matches sub to externalId', async () => {
    await setProvider({ claim: 'sub', matchAttribute: 'externalId' });
    const { page } = await signIn('alice');
    expect(JSON.parse(page.body)).toEqual({ userId: 'u-alice' });
  });

  it('authenticates to the provider with private_key_jwt', async () => {
    await setProvider({
      clientId: idp.jwtClientId,
      clientSecret: undefined,
      privateKey: { ...idp.privateKey },
    });
    const { page } = await signIn('alice');
    expect(JSON.parse(page.body)).toEqual({ userId: 'u-alice' });
  });

  it('a wrong client secret is an identity provider error', async () => {
    await setProvider({ clientSecret: 'wrong' });
    const { page } = await signIn('alice');
    expect(page.status).toBe(400);
    expect(reason(page)).toBe('idp-error');
    expect(page.body).toContain('invalid_client');
  });

  it('refuses an unknown user with a page (host text) and an audit event', async () => {
    const { page } = await signIn('nobody');
    expect(page.status).toBe(403);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(reason(page)).toBe('unknown-user');
    expect(page.body).toContain('No such person here.');
    expect(page.body).toContain('nobody@example.org');
    const [event] = signInEvents();
    expect(event?.outcome).toBe('4');
    expect(event?.outcomeDesc).toBe('unknown-user');
    expect(event?.agent[0]?.name).toBe('nobody@example.org');
  });

  it('refuses an inactive user, an ambiguous match, an unverified e-mail, a missing claim', async () => {
    for (const [login, expected] of [
      ['dora', 'inactive-user'],
      ['twin', 'ambiguous-user'],
      ['eve', 'missing-claim'],
      ['ghost', 'missing-claim'], // the provider knows no e-mail of this login
    ] as const) {
      const { page } = await signIn(login);
      expect([page.status, reason(page)]).toEqual([403, expected]);
    }
    expect(signInEvents().map((e) => e.outcomeDesc)).toEqual([
      'inactive-user',
      'ambiguous-user',
      'missing-claim',
      'missing-claim',
    ]);
    // The inactive user is named in the event.
    expect(signInEvents()[0]?.agent[0]?.who?.identifier?.value).toBe('u-dora');
  });

  it('refuses a callback whose state this browser did not start, and a replayed one', async () => {
    const forged = await new TestBrowser().request(
      `${origin}/oauth2/federation/callback?state=forged&code=x`,
    );
    expect([forged.status, reason(forged)]).toEqual([400, 'bad-state']);
    // Replay: the callback URL (code and state) used a second time in the same browser.
    const browser = new TestBrowser();
    const atIdp = await browser.follow(`${origin}/authorize?ticket=t2`);
    await browser.signInAtIdp(atIdp, 'alice');
    const callback = browser.visited.find((u) => u.startsWith(`${origin}/oauth2/federation/callback`))!;
    const replay = await browser.request(callback);
    expect([replay.status, reason(replay)]).toEqual([400, 'bad-state']);
    expect(signInEvents().filter((e) => e.outcomeDesc === 'bad-state')).toHaveLength(2);
  });

  it("shows the provider's error answer (the user aborts at the provider)", async () => {
    const browser = new TestBrowser();
    const atIdp = await browser.follow(`${origin}/authorize?ticket=t3`);
    const uid = /\/interaction\/([\w-]+)/.exec(atIdp.url)?.[1];
    const page = await browser.follow(`${idp.issuer}/interaction/${uid}/abort`);
    expect([page.status, reason(page)]).toEqual([400, 'idp-error']);
    expect(page.body).toContain('access_denied');
  });

  it("renders the host's own refusal page", async () => {
    const fed = federatedSignIn({
      storage,
      renderRefusal: (r) => `<p>${r.reason} ${r.status} ${r.message}</p>`,
    });
    current = express().use('/oauth2/federation', fed.router);
    const page = await new TestBrowser().request(`${origin}/oauth2/federation/callback?state=x`);
    expect(page.status).toBe(400);
    expect(page.body).toMatch(/^<p>bad-state 400 This sign-in has expired/);
  });

  it('refuses a project without identity provider, and an unreachable one', async () => {
    await setProvider(undefined);
    const none = await new TestBrowser().follow(`${origin}/authorize?ticket=t4`);
    expect([none.status, reason(none)]).toEqual([403, 'no-identity-provider']);
    await setProvider({ issuer: 'http://127.0.0.1:9' });
    const down = await new TestBrowser().follow(`${origin}/authorize?ticket=t5`);
    expect([down.status, reason(down)]).toEqual([502, 'idp-unavailable']);
  });
});
