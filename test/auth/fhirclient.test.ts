import { type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { hidden, launchSetup, type LaunchSetup } from './smart-launch.js';
import { listen } from '../helpers/listen.js';

/** The part of fhirclient's Node API used here (its own declarations pull DOM types into the program). */
interface SmartClient {
  state: { tokenResponse?: { access_token?: string; scope?: string } };
  refresh(): Promise<unknown>;
  getPatientId(): string | null;
  getFhirUser(): string | null;
  getIdToken(): Record<string, unknown> | null;
}
type Smart = (
  req: IncomingMessage,
  res: ServerResponse,
  storage: object,
) => { authorize(options: Record<string, unknown>): Promise<unknown>; ready(): Promise<SmartClient> };
const smart = createRequire(import.meta.url)('fhirclient') as Smart;

// A real SMART client, fhirclient's Node adapter, runs a standalone launch against the platform:
// discovery, PKCE, the authorization request, the code exchange and a refresh are all its own.
// The browser is played by fetch with a cookie jar: it follows the redirects, signs in with the
// test form and approves the consent page.

/** A browser: fetch with its cookies, not following redirects. */
function browser() {
  const cookies = new Map<string, string>();
  return async (url: string, init: RequestInit = {}): Promise<Response> => {
    const headers = new Headers(init.headers);
    if (cookies.size) headers.set('cookie', [...cookies].map(([k, v]) => `${k}=${v}`).join('; '));
    const res = await fetch(url, { ...init, headers, redirect: 'manual' });
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const eq = pair!.indexOf('=');
      cookies.set(pair!.slice(0, eq), pair!.slice(eq + 1));
    }
    return res;
  };
}

describe('SMART App Launch with fhirclient (a real SMART client)', () => {
  const servers: Server[] = [];
  let setup: LaunchSetup | undefined;
  afterEach(async () => {
    for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
    await setup?.close();
  });

  it('runs a standalone patient launch: discovery, PKCE, code exchange, id_token, refresh', async () => {
    // The platform on a real port (fhirclient fetches discovery and the token endpoint by URL).
    const target: { app?: express.Express } = {};
    const platform = await listen((req, res) => void target.app!(req, res));
    servers.push(platform.server);
    setup = await launchSetup(undefined, { baseUrl: platform.origin });
    target.app = setup.app;
    const fhirBase = `${platform.origin}/fhir/R4`;

    // The SMART app: /launch starts the authorization, /app finishes it and reports.
    const sessions = new Map<string, unknown>();
    const storage = {
      get: (key: string) => Promise.resolve(sessions.get(key)),
      set: (key: string, value: unknown) => Promise.resolve(void sessions.set(key, value)),
      unset: (key: string) => Promise.resolve(sessions.delete(key)),
    };
    const app = express();
    let clientId = '';
    app.get('/launch', (req, res, next) => {
      smart(req, res, storage)
        .authorize({
          clientId,
          iss: fhirBase,
          scope: 'launch/patient patient/*.rs openid fhirUser offline_access',
          redirectUri: '/app',
          pkceMode: 'required',
        })
        .catch(next);
    });
    app.get('/app', (req, res, next) => {
      smart(req, res, storage)
        .ready()
        .then(async (client) => {
          const first = client.state.tokenResponse?.access_token;
          await client.refresh();
          res.json({
            patient: client.getPatientId(),
            fhirUser: client.getFhirUser(),
            idToken: client.getIdToken(),
            refreshed: client.state.tokenResponse?.access_token !== first,
            scope: client.state.tokenResponse?.scope,
          });
        })
        .catch(next);
    });
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).send(String(error.stack ?? error));
    });
    const smartApp = await listen(app);
    servers.push(smartApp.server);
    clientId = (
      await setup.newClient(setup.projectId, {
        name: 'fhirclient app',
        public: true,
        redirectUri: `${smartApp.origin}/app`,
        scope: 'launch/patient patient/*.rs openid fhirUser offline_access',
      })
    ).id;

    const go = browser();
    const launch = await go(`${smartApp.origin}/launch`);
    expect(launch.status).toBe(302);
    const authorizeUrl = new URL(launch.headers.get('location')!);
    expect(authorizeUrl.origin + authorizeUrl.pathname).toBe(`${platform.origin}/oauth2/authorize`);
    expect(authorizeUrl.searchParams.get('code_challenge_method')).toBe('S256');
    expect(authorizeUrl.searchParams.get('aud')).toBe(fhirBase);

    const signInPage = await go(authorizeUrl.href);
    expect(signInPage.status).toBe(200);
    const ticket = hidden(await signInPage.text(), 'ticket');
    const consent = await go(
      `${platform.origin}/oauth2/authorize?${new URLSearchParams({ ticket, login_user: setup.users.patient }).toString()}`,
    );
    const consentHtml = await consent.text();
    expect(consent.status).toBe(200);
    const approved = await go(`${platform.origin}/oauth2/authorize`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        ticket: hidden(consentHtml, 'ticket'),
        csrf: hidden(consentHtml, 'csrf'),
        action: 'approve',
      }).toString(),
    });
    expect(approved.status).toBe(303);
    const back = approved.headers.get('location')!;
    expect(back.startsWith(`${smartApp.origin}/app?`)).toBe(true);

    const done = await go(back);
    expect(done.status, done.status === 200 ? '' : await done.text()).toBe(200);
    const report = (await done.json()) as Record<string, unknown>;
    expect(report).toMatchObject({
      patient: 'pat1',
      fhirUser: 'Patient/pat1',
      refreshed: true,
      idToken: { sub: setup.users.patient, aud: clientId, fhirUser: `${fhirBase}/Patient/pat1` },
    });
  });
});
