import { createHash, randomBytes } from 'node:crypto';
import request from 'supertest';
import { expect } from 'vitest';
import { createPlatformApp, type PlatformTestApp } from '../helpers/platform-app.js';
import { formSignIn } from '../helpers/form-sign-in.js';
import type { Storage } from '../../src/storage/types.js';
import type { FhirPlatformOptions } from '../../src/platform.js';

export const FHIR_BASE = 'http://fhir.test/fhir/R4';
export const REDIRECT = 'https://app.example/cb';

/** A PKCE pair (RFC 7636): a verifier and its S256 challenge. */
export function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** A platform with the authorization endpoint (test form sign-in), a project, and its users and resources. */
export interface LaunchSetup extends PlatformTestApp {
  projectId: string;
  /** Users: a Patient (pat1), a RelatedPerson of pat2, a Practitioner. */
  users: { patient: string; related: string; practitioner: string };
  publicApp: string;
  confidentialApp: { id: string; secret: string };
}

export async function launchSetup(
  store?: Storage,
  extra: Partial<FhirPlatformOptions> = {},
): Promise<LaunchSetup> {
  const base = await createPlatformApp(
    { authorization: { authenticateUser: formSignIn() }, ...extra },
    store,
  );
  const projectId = await base.initProject('launch');
  const { storage } = base;
  await storage.updateResource(projectId, {
    resourceType: 'Patient',
    id: 'pat1',
    name: [{ given: ['Ann'], family: 'Lee' }],
  });
  await storage.updateResource(projectId, {
    resourceType: 'Patient',
    id: 'pat2',
    name: [{ given: ['Bob'], family: 'Stone' }],
    birthDate: '2015-04-01',
  });
  await storage.updateResource(projectId, {
    resourceType: 'RelatedPerson',
    id: 'rp1',
    patient: { reference: 'Patient/pat2' },
  });
  await storage.updateResource(projectId, { resourceType: 'Practitioner', id: 'dr1' });
  const user = async (
    userName: string,
    userType: 'Patient' | 'RelatedPerson' | 'Practitioner',
    profileId: string,
  ) =>
    (
      await storage.createUser(projectId, {
        projectId,
        userName,
        userType,
        profileId,
        active: true,
        data: {},
      })
    ).id;
  const users = {
    patient: await user('ann', 'Patient', 'pat1'),
    related: await user('rita', 'RelatedPerson', 'rp1'),
    practitioner: await user('drew', 'Practitioner', 'dr1'),
  };
  const scope = 'patient/*.rs user/*.rs openid fhirUser launch/patient offline_access online_access';
  const publicApp = (
    await base.newClient(projectId, { name: 'Patient app', public: true, redirectUri: REDIRECT, scope })
  ).id;
  const confidentialApp = await base.newClient(projectId, {
    name: 'Clinic app',
    redirectUri: REDIRECT,
    scope,
  });
  return { ...base, projectId, users, publicApp, confidentialApp };
}

/** The query of an authorization request, overridable. */
export function authorizeQuery(
  clientId: string,
  challenge: string,
  extra: Record<string, string | undefined> = {},
) {
  const query: Record<string, string> = {};
  const all = {
    response_type: 'code',
    client_id: clientId,
    redirect_uri: REDIRECT,
    scope: 'launch/patient patient/*.rs openid fhirUser offline_access',
    state: 'st-123',
    aud: FHIR_BASE,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    nonce: 'n-1',
    ...extra,
  };
  for (const [k, v] of Object.entries(all)) if (v !== undefined) query[k] = v;
  return query;
}

/** The value of a hidden input of a page. */
export function hidden(html: string, name: string): string {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(html);
  expect(match, `hidden ${name}`).not.toBeNull();
  return match![1]!;
}

/** Runs the browser side up to the page after sign-in; the agent keeps the ticket cookie. */
export async function signIn(
  agent: ReturnType<typeof request.agent>,
  query: Record<string, string>,
  userId: string,
): Promise<{ ticket: string; page: request.Response }> {
  const start = await agent.get('/oauth2/authorize').query(query);
  expect(start.status).toBe(200);
  const ticket = hidden(start.text, 'ticket');
  const page = await agent.get('/oauth2/authorize').query({ ticket, login_user: userId });
  return { ticket, page };
}

/** Approves the consent page; the code and state from the redirect. */
export async function approve(
  agent: ReturnType<typeof request.agent>,
  page: request.Response,
  action = 'approve',
): Promise<URL> {
  expect(page.status).toBe(200);
  const res = await agent
    .post('/oauth2/authorize')
    .type('form')
    .send({ ticket: hidden(page.text, 'ticket'), csrf: hidden(page.text, 'csrf'), action });
  expect(res.status).toBe(303);
  return new URL(res.headers.location as string);
}

/** The whole browser side for a user: the redirect URL with the code. */
export async function authorize(
  setup: LaunchSetup,
  clientId: string,
  userId: string,
  challenge: string,
  extra: Record<string, string | undefined> = {},
): Promise<URL> {
  const agent = request.agent(setup.app);
  const { page } = await signIn(agent, authorizeQuery(clientId, challenge, extra), userId);
  return approve(agent, page);
}

/** `POST /oauth2/token` with a form (a public client: client_id in the form). */
export function token(
  setup: LaunchSetup,
  form: Record<string, string>,
  basic?: { id: string; secret: string },
) {
  const req = request(setup.app).post('/oauth2/token').type('form');
  if (basic) req.auth(basic.id, basic.secret);
  return req.send(form);
}
