/**
 * The roles of SCIM Groups through the whole federated sign-in, as a deployment sees it: the
 * project's identity provider (oidc-provider's development pages) signs the user in, SCIM provisions
 * the user and the group, `$settings` maps the group to a role, and the app gets what the role allows.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fhirPlatform, type FhirPlatform } from '../../src/platform.js';
import { memoryStorage } from '../../src/stores.js';
import { startDevIdp, type DevIdp } from '../../scripts/dev-idp/provider.js';
import { TestBrowser } from './federation-browser.js';

let server: Server;
let origin: string;
let idp: DevIdp;
let platform: FhirPlatform;
const storage = memoryStorage();

const appRedirect = () => `${origin}/app/callback`;

/** A JSON call to the platform; the answer's status and body. */
async function call(
  method: string,
  path: string,
  auth: string,
  body: unknown,
  type = 'application/fhir+json',
) {
  const res = await fetch(`${origin}${path}`, {
    method,
    headers: { authorization: auth, 'content-type': type },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

beforeAll(async () => {
  platform = fhirPlatform({ storage, bulk: false, audit: { enabled: false } });
  const host = express();
  host.use(platform.router);
  host.get('/app/callback', (req, res) => {
    res.type('text').send(new URL(req.originalUrl, origin).searchParams.get('code') ?? '');
  });
  server = createServer(host).listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  idp = await startDevIdp({ redirectUris: [`${origin}/oauth2/federation/callback`] });
});

afterAll(async () => {
  await platform?.close();
  await idp?.close();
  server?.closeAllConnections();
  server?.close();
});

describe('roles of SCIM Groups through the federated sign-in', () => {
  it('caps what a user signed in by the identity provider is granted, by the role of its group', async () => {
    const project = await platform.admin.initProject({
      resourceType: 'Parameters',
      parameter: [{ name: 'name', valueString: 'Clinic' }],
    });
    const parameters = (values: Record<string, string | boolean>) => ({
      resourceType: 'Parameters' as const,
      parameter: Object.entries(values).map(([name, value]) =>
        typeof value === 'boolean' ? { name, valueBoolean: value } : { name, valueString: value },
      ),
    });
    const provisioning = await platform.admin.newClient(
      project.id,
      parameters({ name: 'provisioning', scope: 'system/*.*', admin: true }),
    );
    const tokenAnswer = await fetch(`${origin}/oauth2/token`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${Buffer.from(`${provisioning.id}:${provisioning.secret!}`).toString('base64')}`,
      },
      body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'project:admin system/*.*' }),
    });
    const admin = `Bearer ${((await tokenAnswer.json()) as { access_token: string }).access_token}`;

    // The project's identity provider and the role of its group Clinicians.
    const provider = parameters({
      idpIssuer: idp.issuer,
      idpClientId: idp.clientId,
      idpClientSecret: idp.clientSecret,
    });
    const role = {
      name: 'groupRole',
      part: [
        { name: 'group', valueString: 'Clinicians' },
        { name: 'scope', valueString: 'user/*.rs' },
      ],
    };
    const settings = await call('POST', `/fhir/R4/Project/${project.id}/$settings`, admin, {
      ...provider,
      parameter: [...provider.parameter, role],
    });
    expect(settings.status, JSON.stringify(settings.body)).toBe(200);

    // Bob, as the identity provider provisions him, and the group it pushes.
    const scim = 'application/scim+json';
    const bob = await call(
      'POST',
      '/scim/v2/Users',
      admin,
      {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        userType: 'Practitioner',
        userName: 'bob',
        emails: [{ value: 'bob@example.org' }],
      },
      scim,
    );
    expect(bob.status).toBe(201);
    const group = await call(
      'POST',
      '/scim/v2/Groups',
      admin,
      {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
        displayName: 'Clinicians',
        members: [{ value: bob.body.id }],
      },
      scim,
    );
    expect(group.status).toBe(201);

    const app = await platform.admin.newClient(
      project.id,
      parameters({
        name: 'App',
        public: true,
        redirectUri: appRedirect(),
        scope: 'openid fhirUser user/*.cruds',
      }),
    );
    const verifier = randomBytes(32).toString('base64url');
    const authorize = new URL(`${origin}/oauth2/authorize`);
    authorize.search = new URLSearchParams({
      response_type: 'code',
      client_id: app.id,
      redirect_uri: appRedirect(),
      scope: 'openid fhirUser user/*.cruds',
      state: 'app-state',
      aud: `${origin}/fhir/R4`,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    }).toString();
    const browser = new TestBrowser();
    const consent = await browser.signInAtIdp(await browser.follow(authorize.href), 'bob');
    expect(consent.status).toBe(200);
    expect(consent.body).toContain('<code>user/*.rs</code>');
    expect(consent.body).not.toContain('user/*.cruds');

    const hidden = (name: string) =>
      new RegExp(`name="${name}" value="([^"]*)"`).exec(consent.body)?.[1] ?? '';
    const atApp = await browser.submit(consent, {
      ticket: hidden('ticket'),
      csrf: hidden('csrf'),
      action: 'approve',
    });
    expect(atApp.url.startsWith(`${appRedirect()}?`)).toBe(true);
    const answer = await fetch(`${origin}/oauth2/token`, {
      method: 'POST',
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: atApp.body,
        client_id: app.id,
        redirect_uri: appRedirect(),
        code_verifier: verifier,
      }),
    });
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { scope: string }).scope).toBe('openid fhirUser user/*.rs');
  });
});
