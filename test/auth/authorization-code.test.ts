import { createLocalJWKSet, decodeJwt, jwtVerify } from 'jose';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  FHIR_BASE,
  REDIRECT,
  approve,
  authorize,
  authorizeQuery,
  hidden,
  launchSetup,
  pkce,
  signIn,
  token,
  type LaunchSetup,
} from './smart-launch.js';

describe('SMART App Launch: authorization code flow', () => {
  let setup: LaunchSetup;
  beforeEach(async () => {
    setup = await launchSetup();
  });
  afterEach(async () => {
    await setup.close();
  });

  const exchange = (code: string, verifier: string, clientId = setup.publicApp) =>
    token(setup, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: REDIRECT,
      code_verifier: verifier,
      client_id: clientId,
    });

  it('a public app gets a Patient user’s token, patient, id_token and refresh token with PKCE', async () => {
    const { verifier, challenge } = pkce();
    const back = await authorize(setup, setup.publicApp, setup.users.patient, challenge);
    expect(back.origin + back.pathname).toBe(REDIRECT);
    expect(back.searchParams.get('state')).toBe('st-123');
    const code = back.searchParams.get('code')!;
    const res = await exchange(code, verifier);
    expect(res.status).toBe(200);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toMatchObject({
      token_type: 'bearer',
      patient: 'pat1',
      scope: 'launch/patient patient/*.rs openid fhirUser offline_access',
    });
    expect(typeof res.body.refresh_token).toBe('string');
    const access = decodeJwt(res.body.access_token as string);
    expect(access).toMatchObject({
      sub: setup.users.patient,
      client_id: setup.publicApp,
      principal_kind: 'user',
      fhirUser: 'Patient/pat1',
      patient: 'pat1',
    });
    const id = decodeJwt(res.body.id_token as string);
    expect(id).toMatchObject({
      iss: 'http://fhir.test',
      sub: setup.users.patient,
      aud: setup.publicApp,
      nonce: 'n-1',
      fhirUser: `${FHIR_BASE}/Patient/pat1`,
    });
    // The id_token checks out against the keys its issuer's OpenID discovery document names.
    const discovery = await request(setup.app).get('/.well-known/openid-configuration');
    expect(discovery.status).toBe(200);
    expect(discovery.body).toMatchObject({
      issuer: id.iss,
      authorization_endpoint: 'http://fhir.test/oauth2/authorize',
      token_endpoint: 'http://fhir.test/oauth2/token',
      response_types_supported: ['code'],
      subject_types_supported: ['public'],
      code_challenge_methods_supported: ['S256'],
    });
    expect(discovery.body.scopes_supported).toEqual(expect.arrayContaining(['openid', 'fhirUser']));
    const jwksPath = new URL(discovery.body.jwks_uri as string).pathname;
    const jwks = await request(setup.app).get(jwksPath);
    const verified = await jwtVerify(res.body.id_token as string, createLocalJWKSet(jwks.body), {
      issuer: discovery.body.issuer as string,
      audience: setup.publicApp,
      algorithms: discovery.body.id_token_signing_alg_values_supported as string[],
    });
    expect(verified.payload.sub).toBe(setup.users.patient);
    // The access token reads the launch patient (patient/*.rs).
    const read = await request(setup.app)
      .get('/fhir/R4/Patient/pat1')
      .set('Authorization', `Bearer ${res.body.access_token as string}`);
    expect(read.status).toBe(200);
  });

  it('a confidential app must authenticate with its secret', async () => {
    const { verifier, challenge } = pkce();
    const app = setup.confidentialApp;
    const code = (await authorize(setup, app.id, setup.users.patient, challenge)).searchParams.get('code')!;
    const form = { grant_type: 'authorization_code', code, redirect_uri: REDIRECT, code_verifier: verifier };
    const anonymous = await token(setup, { ...form, client_id: app.id });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error).toBe('invalid_client');
    const ok = await token(setup, form, app);
    expect(ok.status).toBe(200);
    expect(decodeJwt(ok.body.access_token as string).client_id).toBe(app.id);
  });

  it('refuses a wrong verifier without spending the code, and a code used twice revokes what it gave', async () => {
    const { verifier, challenge } = pkce();
    const code = (await authorize(setup, setup.publicApp, setup.users.patient, challenge)).searchParams.get(
      'code',
    )!;
    const wrong = await exchange(code, pkce().verifier);
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toBe('invalid_grant');
    const missing = await token(setup, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: REDIRECT,
      client_id: setup.publicApp,
    });
    expect(missing.body.error).toBe('invalid_grant');
    const ok = await exchange(code, verifier);
    expect(ok.status).toBe(200);
    const again = await exchange(code, verifier);
    expect(again.status).toBe(400);
    expect(again.body.error).toBe('invalid_grant');
    // The refresh token and the access token of the first exchange are revoked.
    const refresh = await token(setup, {
      grant_type: 'refresh_token',
      refresh_token: ok.body.refresh_token as string,
      client_id: setup.publicApp,
    });
    expect(refresh.body.error).toBe('invalid_grant');
    const read = await request(setup.app)
      .get('/fhir/R4/Patient/pat1')
      .set('Authorization', `Bearer ${ok.body.access_token as string}`);
    expect(read.status).toBe(401);
  });

  it('a code refused because the app may no longer have its scopes stays usable once it may', async () => {
    const { verifier, challenge } = pkce();
    const code = (await authorize(setup, setup.publicApp, setup.users.patient, challenge)).searchParams.get(
      'code',
    )!;
    const registered = (await setup.storage.readClient(setup.publicApp)).scope;
    await setup.storage.updateClient(setup.publicApp, { scope: 'user/Practitioner.rs' });
    const refused = await exchange(code, verifier);
    expect([refused.status, refused.body.error]).toEqual([400, 'invalid_scope']);
    await setup.storage.updateClient(setup.publicApp, { scope: registered });
    const ok = await exchange(code, verifier);
    expect(ok.status).toBe(200);
    const read = await request(setup.app)
      .get('/fhir/R4/Patient/pat1')
      .set('Authorization', `Bearer ${ok.body.access_token as string}`);
    expect(read.status).toBe(200);
  });

  it('refuses a code at another redirect_uri or for another client', async () => {
    const { verifier, challenge } = pkce();
    const code = (await authorize(setup, setup.publicApp, setup.users.patient, challenge)).searchParams.get(
      'code',
    )!;
    const other = await token(setup, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: 'https://app.example/other',
      code_verifier: verifier,
      client_id: setup.publicApp,
    });
    expect(other.body.error).toBe('invalid_grant');
    const stolen = await exchange(code, verifier, setup.confidentialApp.id);
    expect(stolen.status).toBe(401);
    expect((await exchange(code, verifier)).status).toBe(200);
  });

  it('shows an error page, never a redirect, for an unknown client or an unregistered redirect URI', async () => {
    const { challenge } = pkce();
    for (const extra of [
      { redirect_uri: 'https://evil.example/cb' },
      { client_id: 'nobody' },
      { redirect_uri: undefined },
    ]) {
      const res = await request(setup.app)
        .get('/oauth2/authorize')
        .query(authorizeQuery(setup.publicApp, challenge, extra));
      expect(res.status).toBe(400);
      expect(res.headers.location).toBeUndefined();
      expect(res.headers['content-type']).toMatch(/^text\/html/);
      expect(res.headers['x-frame-options']).toBe('DENY');
    }
  });

  it.each([
    ['aud mismatch', { aud: 'https://other.example/fhir' }, 'invalid_request'],
    ['missing PKCE', { code_challenge: undefined, code_challenge_method: undefined }, 'invalid_request'],
    ['plain PKCE', { code_challenge_method: 'plain' }, 'invalid_request'],
    ['no state', { state: undefined }, 'invalid_request'],
    ['response_type token', { response_type: 'token' }, 'unsupported_response_type'],
    ['no grantable scope', { scope: 'system/*.rs' }, 'invalid_scope'],
  ])('redirects a request with %s back to the app with an error', async (_label, extra, error) => {
    const { challenge } = pkce();
    const res = await request(setup.app)
      .get('/oauth2/authorize')
      .query(authorizeQuery(setup.publicApp, challenge, extra));
    expect(res.status).toBe(302);
    const back = new URL(res.headers.location as string);
    expect(back.origin + back.pathname).toBe(REDIRECT);
    expect(back.searchParams.get('error')).toBe(error);
    if (!('state' in extra)) expect(back.searchParams.get('state')).toBe('st-123');
  });

  it('binds the sign-in to the browser that started it', async () => {
    const { challenge } = pkce();
    const agent = request.agent(setup.app);
    const start = await agent.get('/oauth2/authorize').query(authorizeQuery(setup.publicApp, challenge));
    const ticket = hidden(start.text, 'ticket');
    expect(start.headers['set-cookie']?.[0]).toMatch(/HttpOnly; SameSite=Lax/);
    const other = await request(setup.app)
      .get('/oauth2/authorize')
      .query({ ticket, login_user: setup.users.patient });
    expect(other.status).toBe(400);
    expect(other.text).toContain('wrong_browser');
    const same = await agent.get('/oauth2/authorize').query({ ticket, login_user: setup.users.patient });
    expect(same.status).toBe(200);
    // A form post without the page's CSRF token is refused.
    const forged = await agent
      .post('/oauth2/authorize')
      .type('form')
      .send({ ticket, csrf: 'x', action: 'approve' });
    expect(forged.status).toBe(400);
  });

  it('consent denied redirects with access_denied and the state', async () => {
    const { challenge } = pkce();
    const agent = request.agent(setup.app);
    const { page } = await signIn(agent, authorizeQuery(setup.publicApp, challenge), setup.users.patient);
    expect(page.text).toContain('Patient app');
    const back = await approve(agent, page, 'deny');
    expect(back.searchParams.get('error')).toBe('access_denied');
    expect(back.searchParams.get('state')).toBe('st-123');
    expect(back.searchParams.get('code')).toBeNull();
  });

  it('refuses an unknown or inactive user with a page', async () => {
    const { challenge } = pkce();
    await setup.storage.updateUser(setup.projectId, setup.users.related, { active: false });
    for (const user of ['nobody', setup.users.related]) {
      const agent = request.agent(setup.app);
      const { page } = await signIn(agent, authorizeQuery(setup.publicApp, challenge), user);
      expect(page.status).toBe(403);
    }
  });

  it('launch/patient: a RelatedPerson gets their patient, a Practitioner picks one', async () => {
    const { verifier, challenge } = pkce();
    const related = await authorize(setup, setup.publicApp, setup.users.related, challenge);
    const relatedToken = await exchange(related.searchParams.get('code')!, verifier);
    expect(relatedToken.body.patient).toBe('pat2');
    expect(decodeJwt(relatedToken.body.access_token as string).fhirUser).toBe('RelatedPerson/rp1');

    const agent = request.agent(setup.app);
    const query = authorizeQuery(setup.publicApp, challenge, {
      scope: 'launch/patient user/*.rs openid fhirUser',
    });
    const { page } = await signIn(agent, query, setup.users.practitioner);
    expect(page.status).toBe(200);
    expect(page.text).toContain('Choose the patient');
    const form = { ticket: hidden(page.text, 'ticket'), csrf: hidden(page.text, 'csrf') };
    const found = await agent
      .post('/oauth2/authorize')
      .type('form')
      .send({ ...form, action: 'search', name: 'sto' });
    expect(found.status).toBe(200);
    expect(found.text).toContain('Bob Stone');
    expect(found.text).not.toContain('Ann Lee');
    const consent = await agent
      .post('/oauth2/authorize')
      .type('form')
      .send({ ...form, action: 'pick', patient: 'pat2' });
    expect(consent.text).toContain('Patient/pat2');
    const back = await approve(agent, consent);
    const practitionerToken = await exchange(back.searchParams.get('code')!, verifier);
    expect(practitionerToken.status).toBe(200);
    expect(practitionerToken.body.patient).toBe('pat2');
    expect(decodeJwt(practitionerToken.body.id_token as string).fhirUser).toBe(
      `${FHIR_BASE}/Practitioner/dr1`,
    );
  });

  it('advertises the flow in .well-known/smart-configuration', async () => {
    const res = await request(setup.app).get('/fhir/R4/.well-known/smart-configuration');
    expect(res.body).toMatchObject({
      issuer: 'http://fhir.test',
      authorization_endpoint: 'http://fhir.test/oauth2/authorize',
      token_endpoint: 'http://fhir.test/oauth2/token',
      revocation_endpoint: 'http://fhir.test/oauth2/revoke',
      introspection_endpoint: 'http://fhir.test/oauth2/introspect',
      code_challenge_methods_supported: ['S256'],
      response_types_supported: ['code'],
    });
    expect(res.body.grant_types_supported).toEqual(
      expect.arrayContaining(['authorization_code', 'refresh_token']),
    );
    expect(res.body.capabilities).toEqual(
      expect.arrayContaining([
        'launch-standalone',
        'client-public',
        'client-confidential-symmetric',
        'sso-openid-connect',
        'permission-offline',
      ]),
    );
  });
});
