import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { formSignIn } from '../helpers/form-sign-in.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { createPlatformApp, type PlatformTestApp } from '../helpers/platform-app.js';
import { REDIRECT, authorize, launchSetup, pkce, token, type LaunchSetup } from './smart-launch.js';
import { postgresTestUrl } from '../helpers/postgres.js';

// Two instances (each its own pool) on one schema, as separate processes would be: a code or a
// refresh token used on one is spent for the other, and reuse seen by either revokes the grant.
if (postgresTestUrl('SMART grants across PostgreSQL instances')) {
  const connectionString = POSTGRES_URL!;
  const freshSchema = schemaFactory(connectionString);

  describe('SMART grants across PostgreSQL instances', () => {
    const open: { close(): Promise<void> }[] = [];
    afterEach(async () => {
      for (const item of open.splice(0).reverse()) await item.close();
    });

    async function twoInstances(): Promise<{ a: LaunchSetup; b: LaunchSetup }> {
      const schema = freshSchema();
      const a = await launchSetup(postgresStorage({ connectionString, schema, maxConnections: 4 }));
      open.push(a);
      const other: PlatformTestApp = await createPlatformApp(
        { authorization: { authenticateUser: formSignIn() } },
        postgresStorage({ connectionString, schema, maxConnections: 4 }),
      );
      open.push(other);
      return { a, b: { ...a, app: other.app } };
    }

    const exchange = (setup: LaunchSetup, code: string, verifier: string) =>
      token(setup, {
        grant_type: 'authorization_code',
        code,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        client_id: setup.publicApp,
      });
    const refresh = (setup: LaunchSetup, refreshToken: string) =>
      token(setup, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: setup.publicApp });

    it('spends a code once across instances, even when both race for it, and revokes what it gave', async () => {
      const { a, b } = await twoInstances();
      // The race is real: which instance wins, and where the two interleave, varies by round.
      for (let round = 0; round < 5; round++) {
        const { verifier, challenge } = pkce();
        const code = (await authorize(a, a.publicApp, a.users.patient, challenge)).searchParams.get('code')!;
        const answers = await Promise.all([exchange(a, code, verifier), exchange(b, code, verifier)]);
        expect(answers.map((r) => r.status).sort()).toEqual([200, 400]);
        const winner = answers.find((r) => r.status === 200)!;
        for (const instance of [a, b]) {
          const read = await request(instance.app)
            .get('/fhir/R4/Patient/pat1')
            .set('Authorization', `Bearer ${winner.body.access_token as string}`);
          expect(read.status).toBe(401);
        }
        expect((await refresh(b, winner.body.refresh_token as string)).body.error).toBe('invalid_grant');
      }
    });

    it('a refresh token used on both instances at once revokes the winner’s new tokens', async () => {
      const { a, b } = await twoInstances();
      for (let round = 0; round < 5; round++) {
        const { verifier, challenge } = pkce();
        const code = (await authorize(a, a.publicApp, a.users.patient, challenge)).searchParams.get('code')!;
        const first = await exchange(a, code, verifier);
        const refreshToken = first.body.refresh_token as string;
        const answers = await Promise.all([refresh(a, refreshToken), refresh(b, refreshToken)]);
        expect(answers.map((r) => r.status).sort()).toEqual([200, 400]);
        const winner = answers.find((r) => r.status === 200)!;
        const read = await request(b.app)
          .get('/fhir/R4/Patient/pat1')
          .set('Authorization', `Bearer ${winner.body.access_token as string}`);
        expect(read.status).toBe(401);
        expect((await refresh(a, winner.body.refresh_token as string)).body.error).toBe('invalid_grant');
      }
    });

    it('rotates refresh tokens across instances; reuse on the other revokes the grant; SCIM ends it', async () => {
      const { a, b } = await twoInstances();
      const { verifier, challenge } = pkce();
      const code = (await authorize(a, a.publicApp, a.users.patient, challenge)).searchParams.get('code')!;
      const first = await exchange(b, code, verifier);
      expect(first.status).toBe(200);
      const second = await refresh(a, first.body.refresh_token as string);
      expect(second.status).toBe(200);
      const reuse = await refresh(b, first.body.refresh_token as string);
      expect(reuse.body.error).toBe('invalid_grant');
      expect((await refresh(a, second.body.refresh_token as string)).body.error).toBe('invalid_grant');

      // A revoked access token is refused by the other instance too.
      const revoked = await request(a.app)
        .post('/oauth2/revoke')
        .type('form')
        .send({ token: second.body.access_token as string, client_id: a.publicApp });
      expect(revoked.status).toBe(200);
      const read = await request(b.app)
        .get('/fhir/R4/Patient/pat1')
        .set('Authorization', `Bearer ${second.body.access_token as string}`);
      expect(read.status).toBe(401);

      // SCIM deactivation on one instance: the user's refresh token is refused on the other.
      const { verifier: v2, challenge: c2 } = pkce();
      const code2 = (await authorize(b, b.publicApp, b.users.patient, c2)).searchParams.get('code')!;
      const fresh = await exchange(a, code2, v2);
      const admin = await a.newClient(a.projectId, { name: 'idp', admin: true });
      const deactivate = await request(a.app)
        .patch(`/scim/v2/Users/${a.users.patient}`)
        .set('Authorization', await a.bearer(admin.id, admin.secret))
        .type('application/scim+json')
        .send({
          schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
          Operations: [{ op: 'replace', path: 'active', value: false }],
        });
      expect(deactivate.status).toBe(200);
      await a.storage.updateUser(a.projectId, a.users.patient, { active: true });
      expect((await refresh(b, fresh.body.refresh_token as string)).body.error).toBe('invalid_grant');
    });
  });
}
