import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { authorizationRouter } from '../../src/auth/authorize/authorization-router.js';
import { escapeHtml } from '../../src/auth/browser/authorization-pages.js';
import { memoryStorage } from '../../src/stores.js';
import { formSignIn } from '../helpers/form-sign-in.js';
import { authorizeQuery, launchSetup, pkce, signIn, type LaunchSetup } from './smart-launch.js';

describe('authorizationRouter options and pages', () => {
  let setup: LaunchSetup | undefined;
  afterEach(async () => {
    await setup?.close();
  });

  it('validates its options early', () => {
    const storage = memoryStorage();
    expect(() => authorizationRouter({ storage } as never)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() =>
      authorizationRouter({ storage, authenticateUser: formSignIn(), ticketLifetime: -1 }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    expect(() =>
      authorizationRouter({ storage, authenticateUser: formSignIn(), colour: 'red' } as never),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
  });

  it('renders the host’s own consent and error pages', async () => {
    setup = await launchSetup(undefined, {
      authorization: {
        authenticateUser: formSignIn(),
        pages: {
          consent: (page) =>
            `<p>Ours: ${escapeHtml(page.clientName)} wants ${page.scopes.length} scopes</p>` +
            `<input type="hidden" name="ticket" value="${page.form.hidden.ticket!}">` +
            `<input type="hidden" name="csrf" value="${page.form.hidden.csrf!}">`,
          error: (page) => `<p>Oops ${page.error}</p>`,
        },
      },
    });
    const { challenge } = pkce();
    const agent = request.agent(setup.app);
    const { page } = await signIn(agent, authorizeQuery(setup.publicApp, challenge), setup.users.patient);
    expect(page.text).toContain('Ours: Patient app wants 5 scopes');
    const bad = await request(setup.app).get('/oauth2/authorize').query(authorizeQuery('nobody', challenge));
    expect(bad.status).toBe(400);
    expect(bad.text).toBe('<p>Oops invalid_client</p>');
  });

  it('escapes what the default pages print', async () => {
    setup = await launchSetup();
    const app = await setup.newClient(setup.projectId, {
      name: '<script>alert(1)</script>',
      public: true,
      redirectUri: 'https://app.example/cb',
      scope: 'patient/*.rs launch/patient',
    });
    const { challenge } = pkce();
    const agent = request.agent(setup.app);
    const { page } = await signIn(
      agent,
      authorizeQuery(app.id, challenge, { scope: 'patient/*.rs launch/patient' }),
      setup.users.patient,
    );
    expect(page.status).toBe(200);
    expect(page.text).not.toContain('<script>');
    expect(page.text).toContain('&#60;script&#62;');
  });
});
