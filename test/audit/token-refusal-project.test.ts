import request from 'supertest';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { PLATFORM_AUDIT_PROJECT_ID } from '../../src/audit/trail.js';
import { clientKey, signAssertion, type ClientKey } from '../auth/client-keys.js';
import { createPlatformApp, type PlatformTestApp } from '../helpers/platform-app.js';

const FHIR = '/fhir/R4';
const TOKEN_URL = 'http://fhir.test/oauth2/token';
const AUDITOR_SCOPE = 'project:admin system/AuditEvent.rs';

interface StoredEvent {
  id: string;
  outcome: string;
  outcomeDesc?: string;
  type: { code: string };
  agent: { altId?: string; who?: { identifier?: { value: string } } }[];
}

let signer: ClientKey;
let stranger: ClientKey;
beforeAll(async () => {
  [signer, stranger] = await Promise.all([clientKey('ES384'), clientKey('ES384')]);
});

const apps: PlatformTestApp[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

/** Projects A and B, each with an auditor token; A has a secret client and a private_key_jwt one. */
async function setUp(extra: Parameters<typeof createPlatformApp>[0] = {}) {
  const t = await createPlatformApp({ bulk: false, ...extra });
  apps.push(t);
  const a = await t.initProject('A');
  const b = await t.initProject('B');
  const adminA = await t.newClient(a, { name: 'admin-a', admin: true });
  const adminB = await t.newClient(b, { name: 'admin-b', admin: true });
  const etl = await t.newClient(a, { name: 'etl', scope: 'system/*.rs' });
  const jwt = await t.newClient(a, {
    name: 'signer',
    scope: 'system/*.rs',
    jwks: JSON.stringify({ keys: [signer.publicJwk] }),
  });
  const auditorA = await t.bearer(adminA.id, adminA.secret, AUDITOR_SCOPE);
  const auditorB = await t.bearer(adminB.id, adminB.secret, AUDITOR_SCOPE);
  return { t, a, b, etl, jwt, auditorA, auditorB };
}

/** Token refusals (DICOM 110114, outcome 4) in the trail the token's project reads. */
async function tokenRefusals(t: PlatformTestApp, auth: string): Promise<StoredEvent[]> {
  const res = await request(t.app).get(`${FHIR}/AuditEvent?type=110114&outcome=4`).set('Authorization', auth);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return ((res.body.entry ?? []) as { resource: StoredEvent }[]).map((e) => e.resource);
}

async function platformLog(t: PlatformTestApp): Promise<string> {
  return JSON.stringify(await t.storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent'));
}

describe("refused token requests naming a project's client", () => {
  it("are in that client's project, not in the platform log nor in another project", async () => {
    const { t, etl, jwt, auditorA, auditorB } = await setUp();
    // A wrong secret for A's secret client, and an assertion signed with a key A's signer never registered.
    expect((await t.tokenResponse(etl.id, 'wrong-secret-0123456789')).status).toBe(401);
    const assertion = await signAssertion(stranger, { clientId: jwt.id, aud: TOKEN_URL });
    const badAssertion = await request(t.app).post('/oauth2/token').type('form').send({
      grant_type: 'client_credentials',
      client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
      client_assertion: assertion,
    });
    expect(badAssertion.status).toBe(401);
    // A client id that names no client: the platform log.
    expect((await t.tokenResponse('no-such-client', 'wrong-secret-0123456789')).status).toBe(401);
    await t.platform.close(); // writes every event (and any refusal counted in a window)

    const inA = await tokenRefusals(t, auditorA);
    expect(inA.map((e) => e.agent[0]?.altId).sort()).toEqual([etl.id, jwt.id].sort());
    for (const event of inA) expect(event.outcomeDesc).toBe('invalid_client');
    expect(await tokenRefusals(t, auditorB)).toEqual([]);

    const log = await platformLog(t);
    expect(log).not.toContain(etl.id);
    expect(log).not.toContain(jwt.id);
    expect(log).toContain('no-such-client');
  });

  it('a revoked client: still its project', async () => {
    const { t, a, etl, auditorA } = await setUp();
    const root = await t.bearer('root', 'root-secret-0123456789');
    const revoked = await request(t.app)
      .delete(`${FHIR}/Project/${a}/ClientApplication/${etl.id}`)
      .set('Authorization', root);
    expect(revoked.status).toBe(204);
    expect((await t.tokenResponse(etl.id, etl.secret)).status).toBe(401);
    await t.platform.close();
    expect((await tokenRefusals(t, auditorA)).map((e) => e.agent[0]?.altId)).toEqual([etl.id]);
    expect(await platformLog(t)).not.toContain(etl.id);
  });

  it('over the failure limit (429 slow_down): still its project', async () => {
    const { t, etl, auditorA } = await setUp({ token: { rateLimit: { maxFailuresPerClientAddress: 2 } } });
    const statuses = [];
    for (let i = 0; i < 3; i++)
      statuses.push((await t.tokenResponse(etl.id, 'wrong-secret-0123456789')).status);
    expect(statuses).toEqual([401, 401, 429]);
    await t.platform.close();
    const inA = await tokenRefusals(t, auditorA);
    expect(inA.map((e) => e.outcomeDesc).sort()).toEqual(['invalid_client', 'invalid_client', 'slow_down']);
    expect(await platformLog(t)).not.toContain(etl.id);
  });
});
