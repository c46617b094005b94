import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { REDIRECT, authorize, launchSetup, pkce, token, type LaunchSetup } from './smart-launch.js';

/** Each race is run this many times: which request wins, and where they interleave, varies. */
const ROUNDS = 5;

// A code or refresh token presented twice at once, over real parallel HTTP requests: one answer
// may be 200, and once both have answered every token that answer holds is revoked, however the
// two requests interleaved (RFC 6749 §4.1.2, RFC 9700 §4.14.2).
function suite(store: string, open: () => Storage | Promise<Storage>): void {
  describe(`SMART grants presented twice at once (${store})`, () => {
    let setup: LaunchSetup | undefined;
    afterEach(async () => {
      await setup?.close();
      setup = undefined;
    });

    const exchange = (s: LaunchSetup, code: string, verifier: string) =>
      token(s, {
        grant_type: 'authorization_code',
        code,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        client_id: s.publicApp,
      });
    const refresh = (s: LaunchSetup, refreshToken: string) =>
      token(s, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: s.publicApp });

    async function newCode(s: LaunchSetup): Promise<{ code: string; verifier: string }> {
      const { verifier, challenge } = pkce();
      const back = await authorize(s, s.publicApp, s.users.patient, challenge);
      return { code: back.searchParams.get('code')!, verifier };
    }

    /** One answer at most is 200, the others `invalid_grant`; and what the 200 holds is dead. */
    async function expectWinnerRevoked(s: LaunchSetup, answers: request.Response[]): Promise<void> {
      const won = answers.filter((a) => a.status === 200);
      expect(won.length).toBeLessThanOrEqual(1);
      for (const lost of answers.filter((a) => a.status !== 200)) {
        expect([lost.status, lost.body.error]).toEqual([400, 'invalid_grant']);
      }
      for (const winner of won) {
        const read = await request(s.app)
          .get('/fhir/R4/Patient/pat1')
          .set('Authorization', `Bearer ${winner.body.access_token as string}`);
        expect(read.status).toBe(401);
        const again = await refresh(s, winner.body.refresh_token as string);
        expect([again.status, again.body.error]).toEqual([400, 'invalid_grant']);
      }
    }

    it('a code exchanged twice at once: the winner’s access and refresh tokens are revoked', async () => {
      const s = (setup = await launchSetup(await open()));
      for (let round = 0; round < ROUNDS; round++) {
        const { code, verifier } = await newCode(s);
        const answers = await Promise.all([exchange(s, code, verifier), exchange(s, code, verifier)]);
        // One of them was first to spend the code: it got the tokens.
        expect(answers.map((a) => a.status).sort()).toEqual([200, 400]);
        await expectWinnerRevoked(s, answers);
      }
    });

    it('a refresh token used twice at once: the winner’s new tokens are revoked, with the first ones', async () => {
      const s = (setup = await launchSetup(await open()));
      for (let round = 0; round < ROUNDS; round++) {
        const { code, verifier } = await newCode(s);
        const first = await exchange(s, code, verifier);
        expect(first.status).toBe(200);
        const refreshToken = first.body.refresh_token as string;
        const answers = await Promise.all([refresh(s, refreshToken), refresh(s, refreshToken)]);
        expect(answers.map((a) => a.status).sort()).toEqual([200, 400]);
        await expectWinnerRevoked(s, answers);
        // The access token the code gave dies with its authorization too.
        const read = await request(s.app)
          .get('/fhir/R4/Patient/pat1')
          .set('Authorization', `Bearer ${first.body.access_token as string}`);
        expect(read.status).toBe(401);
      }
    });
  });
}

forEachStore('SMART grants presented twice at once', suite);
