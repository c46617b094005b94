import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { secretKey } from '../../src/auth/token/user-grants.js';
import { eventually } from '../helpers/eventually.js';
import { REDIRECT, authorize, launchSetup, pkce, token, type LaunchSetup } from './smart-launch.js';

const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

describe('SMART App Launch: refresh, revocation, introspection, SCIM', () => {
  let setup: LaunchSetup;
  beforeEach(async () => {
    setup = await launchSetup();
  });
  afterEach(async () => {
    await setup.close();
  });

  /** A Patient user's tokens for the public app (offline_access unless `scope` says). */
  async function tokens(scope?: string, userId = setup.users.patient) {
    const { verifier, challenge } = pkce();
    const back = await authorize(setup, setup.publicApp, userId, challenge, scope ? { scope } : {});
    const res = await token(setup, {
      grant_type: 'authorization_code',
      code: back.searchParams.get('code')!,
      redirect_uri: REDIRECT,
      code_verifier: verifier,
      client_id: setup.publicApp,
    });
    expect(res.status).toBe(200);
    return res.body as { access_token: string; refresh_token: string; scope: string; expires_in: number };
  }

  const refresh = (refreshToken: string, extra: Record<string, string> = {}) =>
    token(setup, {
      grant_type: 'refresh_token',
      refresh_token: refreshToken,
      client_id: setup.publicApp,
      ...extra,
    });

  const fhirStatus = async (accessToken: string) =>
    (await request(setup.app).get('/fhir/R4/Patient/pat1').set('Authorization', `Bearer ${accessToken}`))
      .status;

  const introspect = (tokenValue: string) =>
    request(setup.app)
      .post('/oauth2/introspect')
      .auth(setup.confidentialApp.id, setup.confidentialApp.secret)
      .type('form')
      .send({ token: tokenValue });

  const revoke = (tokenValue: string) =>
    request(setup.app)
      .post('/oauth2/revoke')
      .type('form')
      .send({ token: tokenValue, client_id: setup.publicApp });

  it('rotates refresh tokens; a used one coming again revokes the whole grant', async () => {
    const first = await tokens();
    const second = await refresh(first.refresh_token);
    expect(second.status).toBe(200);
    expect(second.body.refresh_token).not.toBe(first.refresh_token);
    expect(second.body).toMatchObject({ patient: 'pat1', scope: first.scope });
    const narrowed = await refresh(second.body.refresh_token as string, { scope: 'patient/*.rs' });
    expect(narrowed.status).toBe(200);
    expect(narrowed.body.scope).toBe('patient/*.rs offline_access');
    const wider = await refresh(narrowed.body.refresh_token as string, { scope: 'user/*.rs' });
    expect(wider.body.error).toBe('invalid_scope');

    // The first token, used already, comes again: refused, and the newest one dies with it, as do
    // the access tokens of the grant, those the refreshes gave included.
    const reuse = await refresh(first.refresh_token);
    expect(reuse.status).toBe(400);
    expect(reuse.body.error).toBe('invalid_grant');
    const after = await refresh(narrowed.body.refresh_token as string);
    expect(after.body.error).toBe('invalid_grant');
    for (const access of [first.access_token, second.body.access_token, narrowed.body.access_token]) {
      expect(await fhirStatus(access as string)).toBe(401);
    }

    // Refreshes and the reuse are audited in the project.
    const events = await eventually('refresh audit events', async () => {
      const page = await setup.storage.searchResources(setup.projectId, 'AuditEvent');
      const text = JSON.stringify(page.resources);
      return text.includes('"reuse"') && text.includes('"refresh"') && text.includes('"consent"')
        ? text
        : false;
    });
    expect(events).toContain(setup.users.patient);
  });

  /** Waits for the audit event of a refresh; then resolves whether a reuse is recorded too. */
  async function reuseRecorded(): Promise<boolean> {
    const text = await eventually('the refresh audit event', async () => {
      const page = await setup.storage.searchResources(setup.projectId, 'AuditEvent');
      const all = JSON.stringify(page.resources);
      return all.includes('"refresh"') ? all : false;
    });
    return text.includes('"reuse"');
  }

  it('a refused refresh leaves its refresh token as it was, and records no reuse', async () => {
    const t = await tokens();
    const refused = async (answer: Promise<request.Response>, status: number, error: string) => {
      const res = await answer;
      expect([res.status, res.body.error]).toEqual([status, error]);
    };
    // Scopes the grant does not imply (more actions, another context, a scope never granted).
    for (const scope of ['patient/*.cruds', 'user/*.rs', 'patient/Observation.rs online_access', ' ']) {
      await refused(refresh(t.refresh_token, { scope }), 400, 'invalid_scope');
    }
    // Another client, authenticated or only named, or the app with a secret it does not have.
    await refused(
      token(setup, { grant_type: 'refresh_token', refresh_token: t.refresh_token }, setup.confidentialApp),
      400,
      'invalid_grant',
    );
    await refused(refresh(t.refresh_token, { client_id: setup.confidentialApp.id }), 401, 'invalid_client');
    await refused(
      token(
        setup,
        { grant_type: 'refresh_token', refresh_token: t.refresh_token },
        { id: setup.publicApp, secret: 'not-its-secret' },
      ),
      401,
      'invalid_client',
    );
    // The app may no longer have any scope of the grant; then it may again.
    const registered = (await setup.storage.readClient(setup.publicApp)).scope;
    await setup.storage.updateClient(setup.publicApp, { scope: 'user/Practitioner.rs' });
    await refused(refresh(t.refresh_token), 400, 'invalid_scope');
    await setup.storage.updateClient(setup.publicApp, { scope: registered });

    const ok = await refresh(t.refresh_token);
    expect(ok.status).toBe(200);
    expect(ok.body.scope).toBe(t.scope);
    expect(await fhirStatus(t.access_token)).toBe(200);
    expect(await reuseRecorded()).toBe(false);
  });

  it('a refresh may ask for any scope its grant implies; the new refresh token keeps the whole grant', async () => {
    await setup.storage.updateResource(setup.projectId, {
      resourceType: 'Observation',
      id: 'obs1',
      status: 'final',
      code: { text: 'weight' },
      subject: { reference: 'Patient/pat1' },
    });
    const t = await tokens();
    const observation = async (accessToken: string) =>
      (
        await request(setup.app)
          .get('/fhir/R4/Observation/obs1')
          .set('Authorization', `Bearer ${accessToken}`)
      ).status;
    // patient/*.rs implies one type in v2 syntax, or in v1 (.read is .rs), or with fewer actions.
    let current = t.refresh_token;
    for (const scope of [
      'patient/Observation.rs',
      'patient/Observation.read',
      'patient/Observation.r launch/patient openid',
    ]) {
      const res = await refresh(current, { scope });
      expect(res.status).toBe(200);
      expect(res.body.scope).toBe(`${scope} offline_access`);
      expect(res.body.patient).toBe('pat1');
      expect(await observation(res.body.access_token as string)).toBe(200);
      expect(await fhirStatus(res.body.access_token as string)).toBe(403);
      current = res.body.refresh_token as string;
    }
    // Each refresh is measured against the grant, not against the last refresh's narrower ask.
    const whole = await refresh(current);
    expect(whole.status).toBe(200);
    expect(whole.body.scope).toBe(t.scope);
    expect(await fhirStatus(whole.body.access_token as string)).toBe(200);
    const wider = await refresh(whole.body.refresh_token as string, { scope: 'patient/Observation.cruds' });
    expect(wider.body.error).toBe('invalid_scope');
  });

  it('online_access refresh tokens work like offline ones, and a refresh token needs its own client', async () => {
    const online = await tokens('launch/patient patient/*.rs online_access');
    expect(typeof online.refresh_token).toBe('string');
    const other = await token(
      setup,
      { grant_type: 'refresh_token', refresh_token: online.refresh_token },
      setup.confidentialApp,
    );
    expect(other.body.error).toBe('invalid_grant');
    const rotated = await refresh(online.refresh_token);
    expect(rotated.status).toBe(200);
    // A public app may refresh without naming itself (RFC 6749 §6): the token names it.
    const unnamed = await token(setup, {
      grant_type: 'refresh_token',
      refresh_token: rotated.body.refresh_token as string,
    });
    expect(unnamed.status).toBe(200);
    const none = await tokens('launch/patient patient/*.rs');
    expect(none.refresh_token).toBeUndefined();
  });

  it('revoking the app ends its refresh tokens', async () => {
    const t = await tokens();
    await setup.platform.admin.revokeClient(setup.projectId, setup.publicApp);
    expect(await setup.storage.grants!.get('refresh', secretKey(t.refresh_token))).toBeUndefined();
    const res = await refresh(t.refresh_token);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_client');
    expect(await fhirStatus(t.access_token)).toBe(401);
  });

  it('revokes refresh tokens and access tokens (RFC 7009), 200 for unknown ones', async () => {
    // A refresh token revokes its grant: the access tokens issued from it too (RFC 7009 §2.1).
    const t = await tokens();
    const rotated = await refresh(t.refresh_token);
    expect(await fhirStatus(rotated.body.access_token as string)).toBe(200);
    expect((await revoke(rotated.body.refresh_token as string)).status).toBe(200);
    expect((await refresh(rotated.body.refresh_token as string)).body.error).toBe('invalid_grant');
    expect(await fhirStatus(t.access_token)).toBe(401);
    expect(await fhirStatus(rotated.body.access_token as string)).toBe(401);

    // An access token revokes itself only.
    const t1 = await tokens();
    expect((await revoke(t1.access_token)).status).toBe(200);
    expect(await fhirStatus(t1.access_token)).toBe(401);
    expect((await refresh(t1.refresh_token)).status).toBe(200);

    expect((await revoke('no-such-token')).status).toBe(200);
    expect((await revoke('a.b.c')).status).toBe(200);
    const noToken = await request(setup.app)
      .post('/oauth2/revoke')
      .type('form')
      .send({ client_id: setup.publicApp });
    expect(noToken.body.error).toBe('invalid_request');
    // Another client cannot revoke the app's tokens.
    const t2 = await tokens();
    const foreign = await request(setup.app)
      .post('/oauth2/revoke')
      .auth(setup.confidentialApp.id, setup.confidentialApp.secret)
      .type('form')
      .send({ token: t2.refresh_token });
    expect(foreign.status).toBe(200);
    expect((await refresh(t2.refresh_token)).status).toBe(200);
  });

  it('introspects (RFC 7662) for a confidential client or a bearer, inactive once revoked', async () => {
    const t = await tokens();
    const active = await introspect(t.access_token);
    expect(active.status).toBe(200);
    expect(active.body).toMatchObject({
      active: true,
      scope: t.scope,
      client_id: setup.publicApp,
      sub: setup.users.patient,
      iss: 'http://fhir.test',
      fhirUser: 'Patient/pat1',
      patient: 'pat1',
    });
    expect(typeof active.body.exp).toBe('number');
    expect(typeof active.body.iat).toBe('number');
    const refreshInfo = await introspect(t.refresh_token);
    expect(refreshInfo.body).toMatchObject({
      active: true,
      client_id: setup.publicApp,
      sub: setup.users.patient,
    });

    const bearer = await request(setup.app)
      .post('/oauth2/introspect')
      .set('Authorization', `Bearer ${t.access_token}`)
      .type('form')
      .send({ token: t.access_token });
    expect(bearer.body.active).toBe(true);

    const publicCaller = await request(setup.app)
      .post('/oauth2/introspect')
      .type('form')
      .send({ token: t.access_token, client_id: setup.publicApp });
    expect(publicCaller.status).toBe(401);

    await revoke(t.access_token);
    expect((await introspect(t.access_token)).body).toEqual({ active: false });
    // An access token whose grant was revoked (by its refresh token) is no longer active either.
    const ended = await tokens();
    expect((await introspect(ended.access_token)).body.active).toBe(true);
    await revoke(ended.refresh_token);
    expect((await introspect(ended.access_token)).body).toEqual({ active: false });
    expect((await introspect('garbage')).body).toEqual({ active: false });

    // Another project's client sees nothing of this project's tokens.
    const other = await setup.initProject('other');
    const stranger = await setup.newClient(other, { name: 'rs', scope: 'system/*.rs' });
    const fresh = await tokens();
    const hidden = await request(setup.app)
      .post('/oauth2/introspect')
      .auth(stranger.id, stranger.secret)
      .type('form')
      .send({ token: fresh.access_token });
    expect(hidden.body).toEqual({ active: false });
  });

  it('SCIM deactivation or deletion ends the user’s refresh tokens and access tokens at once', async () => {
    const admin = await setup.newClient(setup.projectId, { name: 'idp', admin: true });
    const auth = await setup.bearer(admin.id, admin.secret);
    const t = await tokens();
    const patch = await request(setup.app)
      .patch(`/scim/v2/Users/${setup.users.patient}`)
      .set('Authorization', auth)
      .type('application/scim+json')
      .send({ schemas: [PATCH_OP], Operations: [{ op: 'replace', path: 'active', value: false }] });
    expect(patch.status).toBe(200);
    expect(await fhirStatus(t.access_token)).toBe(401);
    expect((await refresh(t.refresh_token)).body.error).toBe('invalid_grant');
    // Active again: the old refresh token stays revoked.
    await setup.storage.updateUser(setup.projectId, setup.users.patient, { active: true });
    expect((await refresh(t.refresh_token)).body.error).toBe('invalid_grant');

    const t2 = await tokens();
    const del = await request(setup.app)
      .delete(`/scim/v2/Users/${setup.users.patient}`)
      .set('Authorization', auth);
    expect(del.status).toBe(204);
    expect(await fhirStatus(t2.access_token)).toBe(401);
    expect((await refresh(t2.refresh_token)).body.error).toBe('invalid_grant');
  });
});
