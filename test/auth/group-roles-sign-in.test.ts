/**
 * The roles of SCIM Groups at sign-in (docs/login.md, "Roles"), through the platform's real
 * authorization endpoint (a form sign-in stands in for the identity provider), token endpoint and
 * FHIR API; groups and roles set over SCIM and `$settings` as an identity provider and an admin would.
 */
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { Storage, StoredResource } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { eventually } from '../helpers/eventually.js';
import {
  REDIRECT,
  approve,
  authorizeQuery,
  launchSetup,
  pkce,
  signIn,
  token,
  type LaunchSetup,
} from './smart-launch.js';

const SCIM_JSON = 'application/scim+json';
const FHIR_JSON = 'application/fhir+json';
const GROUP_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Group';
const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
/** What the clinic app may ask for. */
const APP_SCOPE = 'openid fhirUser launch/patient offline_access user/*.cruds patient/*.cruds';

interface RolesSetup extends LaunchSetup {
  /** The clinic app (public). */
  clinicApp: string;
  /** A second Practitioner user (profile dr2). */
  erin: string;
  scim(method: 'post' | 'patch', path: string, body: unknown): request.Test;
  /** `$settings` with these `groupRole`s (group, scope). */
  setRoles(...roles: [string, string][]): Promise<void>;
  /** A SCIM Group of these users; its id. */
  group(displayName: string, members: string[]): Promise<string>;
  /** Signs `userId` in to the clinic app asking `scope`: the page after sign-in, and the agent. */
  signInTo(
    userId: string,
    scope: string,
  ): Promise<{ agent: ReturnType<typeof request.agent>; page: request.Response; verifier: string }>;
  /** Signs in, approves and trades the code: the token endpoint's answer. */
  tokens(userId: string, scope: string): Promise<request.Response>;
  refresh(refreshToken: string): Promise<request.Response>;
  /** The project's `authorization` AuditEvents of `action` that `match`, once there is one. */
  authorizationEvent(action: string, match: (details: Details) => boolean): Promise<Details>;
}

/** An AuditEvent's entity details, by type (a type may repeat: `group`). */
type Details = Record<string, string[]> & { outcomeDesc?: string[]; who?: string[] };

function detailsOf(event: StoredResource): Details {
  const details: Details = {};
  const entity = (event.entity as { detail?: { type: string; valueString: string }[] }[])[0];
  for (const { type, valueString } of entity?.detail ?? []) (details[type] ??= []).push(valueString);
  if (typeof event.outcomeDesc === 'string') details.outcomeDesc = [event.outcomeDesc];
  const agent = (event.agent as { who?: { identifier?: { value?: string } } }[])[0];
  if (agent?.who?.identifier?.value) details.who = [agent.who.identifier.value];
  return details;
}

async function rolesSetup(store?: Storage): Promise<RolesSetup> {
  const setup = await launchSetup(store);
  const { projectId, storage, app } = setup;
  const provisioning = await setup.newClient(projectId, {
    name: 'provisioning',
    scope: 'system/*.*',
    admin: true,
  });
  const admin = await setup.bearer(provisioning.id, provisioning.secret, 'project:admin system/*.*');
  const clinicApp = (
    await setup.newClient(projectId, {
      name: 'Clinic app',
      public: true,
      redirectUri: REDIRECT,
      scope: APP_SCOPE,
    })
  ).id;
  await storage.updateResource(projectId, { resourceType: 'Practitioner', id: 'dr2' });
  const erin = (
    await storage.createUser(projectId, {
      projectId,
      userName: 'erin',
      userType: 'Practitioner',
      profileId: 'dr2',
      active: true,
      data: {},
    })
  ).id;
  await storage.updateResource(projectId, {
    resourceType: 'Observation',
    id: 'obs1',
    status: 'final',
    code: { text: 'weight' },
    subject: { reference: 'Patient/pat1' },
  });

  const scim = (method: 'post' | 'patch', path: string, body: unknown) => {
    const agent = request(app);
    const call = method === 'post' ? agent.post(`/scim/v2${path}`) : agent.patch(`/scim/v2${path}`);
    return call.set('Authorization', admin).type(SCIM_JSON).send(JSON.stringify(body));
  };

  async function signInTo(userId: string, scope: string) {
    const { verifier, challenge } = pkce();
    const agent = request.agent(app);
    const { page } = await signIn(agent, authorizeQuery(clinicApp, challenge, { scope }), userId);
    return { agent, page, verifier };
  }

  return {
    ...setup,
    clinicApp,
    erin,
    scim,
    async setRoles(...roles) {
      const res = await request(app)
        .post(`/fhir/R4/Project/${projectId}/$settings`)
        .set('Authorization', admin)
        .type(FHIR_JSON)
        .send(
          JSON.stringify({
            resourceType: 'Parameters',
            parameter: roles.map(([group, scope]) => ({
              name: 'groupRole',
              part: [
                { name: 'group', valueString: group },
                { name: 'scope', valueString: scope },
              ],
            })),
          }),
        );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    },
    async group(displayName, members) {
      const res = await scim('post', '/Groups', {
        schemas: [GROUP_SCHEMA],
        displayName,
        members: members.map((value) => ({ value })),
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      return res.body.id as string;
    },
    signInTo,
    async tokens(userId, scope) {
      const { agent, page, verifier } = await signInTo(userId, scope);
      const back = await approve(agent, page);
      return token(setup, {
        grant_type: 'authorization_code',
        code: back.searchParams.get('code')!,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        client_id: clinicApp,
      });
    },
    refresh: (refreshToken) =>
      token(setup, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: clinicApp }),
    authorizationEvent: (action, match) =>
      eventually(`an authorization event '${action}'`, async () => {
        const page = await storage.searchResources(projectId, 'AuditEvent');
        return page.resources
          .map(detailsOf)
          .find((details) => details.action?.[0] === action && match(details));
      }),
  };
}

/** What a bearer token may do: read Patient/pat1, search Observations, create an Observation, a Patient. */
async function reach(setup: RolesSetup, accessToken: string) {
  const auth = `Bearer ${accessToken}`;
  const create = (resource: Record<string, unknown>) =>
    request(setup.app)
      .post(`/fhir/R4/${resource.resourceType as string}`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(resource));
  return {
    readPatient: (await request(setup.app).get('/fhir/R4/Patient/pat1').set('Authorization', auth)).status,
    searchObservations: (await request(setup.app).get('/fhir/R4/Observation').set('Authorization', auth))
      .status,
    createObservation: (
      await create({
        resourceType: 'Observation',
        status: 'final',
        code: { text: 'pulse' },
        subject: { reference: 'Patient/pat1' },
      })
    ).status,
    createPatient: (await create({ resourceType: 'Patient', name: [{ family: 'New' }] })).status,
  };
}

forEachStore('Roles at sign-in', (store, open) => {
  describe(`roles of SCIM Groups at sign-in (${store})`, () => {
    let setup: RolesSetup;
    afterEach(async () => {
      await setup?.close();
    });

    it('caps a member of a mapped group, and gives a user outside every mapped group what was asked', async () => {
      setup = await rolesSetup(await open());
      await setup.setRoles(['Clinicians', 'user/*.rs'], ['Care team A', 'user/Observation.cruds']);
      // The group's name differs in case from the role's: they still match.
      await setup.group('CLINICIANS', [setup.users.practitioner]);
      const asked = 'openid fhirUser user/*.cruds offline_access';

      const { page } = await setup.signInTo(setup.users.practitioner, asked);
      expect(page.status).toBe(200);
      expect(page.text).toContain('<code>user/*.rs</code>');
      expect(page.text).not.toContain('user/*.cruds');
      const capped = await setup.tokens(setup.users.practitioner, asked);
      expect(capped.status).toBe(200);
      expect(capped.body.scope).toBe('openid fhirUser user/*.rs offline_access');
      expect(await reach(setup, capped.body.access_token as string)).toEqual({
        readPatient: 200,
        searchObservations: 200,
        createObservation: 403,
        createPatient: 403,
      });
      // A scope within the cap stays as asked.
      const within = await setup.tokens(setup.users.practitioner, 'openid user/Observation.rs');
      expect(within.body.scope).toBe('openid user/Observation.rs');

      const uncapped = await setup.tokens(setup.erin, asked);
      expect(uncapped.body.scope).toBe(asked);
      expect((await reach(setup, uncapped.body.access_token as string)).createPatient).toBe(201);

      // The consent events say which groups capped what.
      const consent = await setup.authorizationEvent('consent', (d) => d.capped !== undefined);
      expect(consent).toMatchObject({
        who: [setup.users.practitioner],
        group: ['CLINICIANS'],
        capped: ['user/*.cruds'],
        scope: ['openid fhirUser user/*.rs offline_access'],
      });
      const plain = await setup.authorizationEvent('consent', (d) => d.who?.[0] === setup.erin);
      expect(plain.group).toBeUndefined();
      expect(plain.scope).toEqual([asked]);
    });
  });
});

describe('roles of SCIM Groups at sign-in', () => {
  let setup: RolesSetup;
  afterEach(async () => {
    await setup?.close();
  });

  it('grants within the union of the roles of every mapped group the user is in', async () => {
    setup = await rolesSetup();
    await setup.setRoles(
      ['Clinicians', 'user/*.rs'],
      ['Care team A', 'user/Observation.cruds'],
      ['Night shift', 'user/*.cruds'],
    );
    await setup.group('Clinicians', [setup.erin]);
    await setup.group('Care team A', [setup.erin, setup.users.patient]);
    // A group without a member of interest and a group without a role change nothing.
    await setup.group('Night shift', [setup.users.practitioner]);
    await setup.group('Visitors', [setup.erin]);

    const both = await setup.tokens(setup.erin, 'openid user/*.cruds');
    expect(both.body.scope).toBe('openid user/*.rs user/Observation.cruds');
    expect(await reach(setup, both.body.access_token as string)).toEqual({
      readPatient: 200,
      searchObservations: 200,
      createObservation: 201,
      createPatient: 403,
    });
    const consent = await setup.authorizationEvent('consent', (d) => d.who?.[0] === setup.erin);
    expect(consent.group?.sort()).toEqual(['Care team A', 'Clinicians']);

    // patient/ scopes are capped as the user/ scopes of the roles: a Patient user of Care team A
    // reads Observations of its compartment, not its Patient resource.
    const patient = await setup.tokens(setup.users.patient, 'launch/patient patient/*.rs openid fhirUser');
    expect(patient.body).toMatchObject({
      scope: 'launch/patient patient/Observation.rs openid fhirUser',
      patient: 'pat1',
    });
    expect(await reach(setup, patient.body.access_token as string)).toMatchObject({
      readPatient: 403,
      searchObservations: 200,
      createObservation: 403,
    });
  });

  it('sends the app access_denied when the roles allow none of the data asked for, and audits it', async () => {
    setup = await rolesSetup();
    await setup.setRoles(['Care team A', 'user/Observation.cruds']);
    await setup.group('Care team A', [setup.users.practitioner]);
    const { agent, page } = await setup.signInTo(setup.users.practitioner, 'openid fhirUser user/Patient.rs');
    expect(page.status).toBe(302);
    const back = new URL(page.headers.location as string);
    expect(back.origin + back.pathname).toBe(REDIRECT);
    expect(back.searchParams.get('error')).toBe('access_denied');
    expect(back.searchParams.get('state')).toBe('st-123');
    expect(back.searchParams.has('code')).toBe(false);
    // The pending authorization is over: the browser coming back finds nothing to approve.
    const ticket = /ticket=([^&]+)/.exec(String(page.request.url))?.[1];
    const again = await agent.get('/oauth2/authorize').query({ ticket: decodeURIComponent(ticket!) });
    expect(again.status).toBe(400);

    const refused = await setup.authorizationEvent('consent', (d) => d.outcomeDesc !== undefined);
    expect(refused).toMatchObject({
      who: [setup.users.practitioner],
      group: ['Care team A'],
      capped: ['user/Patient.rs'],
      scope: ['openid fhirUser user/Patient.rs'],
      outcomeDesc: ["the roles of the user's groups allow none of the data scopes asked for"],
    });
    // Asking for no data at all is not refused.
    const identity = await setup.tokens(setup.users.practitioner, 'openid fhirUser');
    expect(identity.body.scope).toBe('openid fhirUser');
  });

  it('applies the roles again at every refresh: membership and roles as they are then', async () => {
    setup = await rolesSetup();
    await setup.setRoles(['Clinicians', 'user/*.rs'], ['Care team A', 'user/Observation.cruds']);
    const clinicians = await setup.group('Clinicians', [setup.erin]);
    const careTeam = await setup.group('Care team A', [setup.erin]);
    const first = await setup.tokens(setup.erin, 'user/*.cruds offline_access');
    expect(first.body.scope).toBe('user/*.rs user/Observation.cruds offline_access');

    // Out of Care team A (as Entra removes a member): what only it allowed is gone at the refresh.
    const removed = await setup.scim('patch', `/Groups/${careTeam}`, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'Remove', path: `members[value eq "${setup.erin}"]` }],
    });
    expect(removed.status).toBe(200);
    const second = await setup.refresh(first.body.refresh_token as string);
    expect(second.status).toBe(200);
    expect(second.body.scope).toBe('user/*.rs user/Observation.rs offline_access');
    expect((await reach(setup, second.body.access_token as string)).createObservation).toBe(403);
    const refreshed = await setup.authorizationEvent('refresh', (d) => d.group !== undefined);
    expect(refreshed).toMatchObject({ group: ['Clinicians'], capped: ['user/Observation.cruds'] });

    // A narrower role, set by the admin, applies at the next refresh too.
    await setup.setRoles(['Clinicians', 'user/Patient.rs'], ['Care team A', 'user/Observation.cruds']);
    const third = await setup.refresh(second.body.refresh_token as string);
    expect(third.body.scope).toBe('user/Patient.rs offline_access');

    // A role that allows none of the grant's data refuses the refresh, and leaves its refresh token.
    await setup.setRoles(['Clinicians', 'user/Patient.c'], ['Care team A', 'user/Observation.cruds']);
    const none = await setup.refresh(third.body.refresh_token as string);
    expect([none.status, none.body.error]).toEqual([400, 'invalid_scope']);
    const refusal = await setup.authorizationEvent('refresh', (d) => d.outcomeDesc !== undefined);
    expect(refusal).toMatchObject({
      who: [setup.erin],
      group: ['Clinicians'],
      capped: ['user/*.rs user/Observation.cruds'],
      outcomeDesc: ["the roles of the user's groups allow none of the data scopes asked for"],
    });

    // Out of every mapped group, nothing caps the user: the grant's scopes, as consented to.
    const out = await setup.scim('patch', `/Groups/${clinicians}`, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'replace', path: 'members', value: [] }],
    });
    expect(out.status).toBe(200);
    const fourth = await setup.refresh(third.body.refresh_token as string);
    expect(fourth.status).toBe(200);
    expect(fourth.body.scope).toBe('user/*.rs user/Observation.cruds offline_access');
  });

  it('a deactivated member cannot sign in; reactivated, the roles cap it again', async () => {
    setup = await rolesSetup();
    await setup.setRoles(['Clinicians', 'user/*.rs']);
    const groupId = await setup.group('Clinicians', [setup.users.practitioner]);
    const active = (value: boolean) =>
      setup.scim('patch', `/Users/${setup.users.practitioner}`, {
        schemas: [PATCH_OP],
        Operations: [{ op: 'replace', value: { active: value } }],
      });
    expect((await active(false)).status).toBe(200);
    const group = await setup.storage.readResource(setup.projectId, 'Group', groupId);
    expect(group.member).toEqual([
      expect.objectContaining({
        entity: expect.objectContaining({ reference: 'Practitioner/dr1' }),
        inactive: true,
      }),
    ]);
    const { page } = await setup.signInTo(setup.users.practitioner, 'openid user/*.cruds');
    expect(page.status).toBe(403);
    expect(page.text).toContain('not active');

    expect((await active(true)).status).toBe(200);
    const again = await setup.tokens(setup.users.practitioner, 'openid user/*.cruds');
    expect(again.body.scope).toBe('openid user/*.rs');
  });
});
