// Every input limit of the mounted platform at its default, tried just over the limit through
// HTTP: each answers its protocol's error with the right status (docs/reliability.md, "Input
// limits", lists them; header and connection limits are in test/http/server-limits.test.ts).
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectOAuthError, expectOperationOutcome, expectScimError } from '../helpers/protocol-errors.js';
import {
  createPlatformApp,
  FHIR_JSON,
  ROOT_ID,
  ROOT_SECRET,
  SCIM_JSON,
  type PlatformTestApp,
} from '../helpers/platform-app.js';

const MB = 1024 * 1024;
let t: PlatformTestApp;
let auth: string;
let projectId: string;

beforeAll(async () => {
  t = await createPlatformApp();
  projectId = await t.initProject('Limits');
  const client = await t.newClient(projectId, { name: 'etl', scope: 'system/*.*', admin: true });
  auth = await t.bearer(client.id, client.secret, 'project:admin system/*.*');
});
afterAll(async () => {
  await t.close();
});

/** JSON nested `depth` levels deep (arrays), as the value of `key`. */
function nested(depth: number): string {
  return `${'['.repeat(depth - 1)}1${']'.repeat(depth - 1)}`;
}

describe('input limits at their defaults', () => {
  it('FHIR resource body: 16 MB (413), JSON depth 100 (400), strict string 1 MiB', async () => {
    const big = JSON.stringify({ resourceType: 'Patient', text: { div: 'x'.repeat(16 * MB + 10) } });
    expectOperationOutcome(
      await request(t.app).post('/fhir/R4/Patient').set('Authorization', auth).type(FHIR_JSON).send(big),
      413,
    );
    const deep = `{"resourceType":"Basic","code":{"text":"x"},"extension":${nested(101)}}`;
    expectOperationOutcome(
      await request(t.app).post('/fhir/R4/Basic').set('Authorization', auth).type(FHIR_JSON).send(deep),
      400,
    );
    // $init makes strict projects: a string over 1 MiB is refused there (not a 500).
    const long = JSON.stringify({ resourceType: 'Patient', name: [{ family: 'x'.repeat(MB + 1) }] });
    expectOperationOutcome(
      await request(t.app).post('/fhir/R4/Patient').set('Authorization', auth).type(FHIR_JSON).send(long),
      400,
    );
  });

  it('Bundles: 10,000 entries (413)', async () => {
    const entry = {
      resource: { resourceType: 'Basic', code: { text: 'x' } },
      request: { method: 'POST', url: 'Basic' },
    };
    const bundle = {
      resourceType: 'Bundle',
      type: 'batch',
      entry: Array.from({ length: 10_001 }, () => entry),
    };
    expectOperationOutcome(
      await request(t.app)
        .post('/fhir/R4')
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(JSON.stringify(bundle)),
      413,
    );
  });

  it('search: _count over 1,000 is lowered to 1,000', async () => {
    const res = await request(t.app).get('/fhir/R4/Patient?_count=5000').set('Authorization', auth);
    expect(res.status).toBe(200);
    const self = (res.body.link as { relation: string; url: string }[]).find((l) => l.relation === 'self');
    expect(self?.url).toContain('_count=1000');
  });

  it('SCIM: body 1 MB (413), JSON depth 100 (400), filter 8,192 characters (400), PATCH 1,000 operations (400)', async () => {
    const scim = () => request(t.app).post('/scim/v2/Users').set('Authorization', auth).type(SCIM_JSON);
    expectScimError(await scim().send(JSON.stringify({ schemas: [], userName: 'x'.repeat(MB + 10) })), 413);
    expectScimError(await scim().send(`{"schemas":${nested(101)}}`), 400);
    const filter = `userName eq "${'x'.repeat(8200)}"`;
    expectScimError(
      await request(t.app)
        .get(`/scim/v2/Users?filter=${encodeURIComponent(filter)}`)
        .set('Authorization', auth),
      400,
    );
    const user = await scim().send(
      JSON.stringify({
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        userName: 'limits@example.org',
        userType: 'Patient',
      }),
    );
    expect(user.status).toBe(201);
    const ops = Array.from({ length: 1001 }, () => ({ op: 'replace', path: 'displayName', value: 'x' }));
    expectScimError(
      await request(t.app)
        .patch(`/scim/v2/Users/${user.body.id as string}`)
        .set('Authorization', auth)
        .type(SCIM_JSON)
        .send(
          JSON.stringify({ schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'], Operations: ops }),
        ),
      400,
    );
  });

  it('Project operations: body 1 MB (413), JSON depth 100 (400), a project name over 256 characters (400)', async () => {
    const root = await t.bearer(ROOT_ID, ROOT_SECRET);
    const init = () =>
      request(t.app).post('/fhir/R4/Project/$init').set('Authorization', root).type(FHIR_JSON);
    expectOperationOutcome(
      await init().send(
        JSON.stringify({
          resourceType: 'Parameters',
          parameter: [{ name: 'name', valueString: 'x'.repeat(MB + 10) }],
        }),
      ),
      413,
    );
    expectOperationOutcome(
      await init().send(`{"resourceType":"Parameters","parameter":${nested(101)}}`),
      400,
    );
    expectOperationOutcome(
      await init().send(
        JSON.stringify({
          resourceType: 'Parameters',
          parameter: [{ name: 'name', valueString: 'x'.repeat(257) }],
        }),
      ),
      400,
    );
  });

  it('token endpoint: form 64 KB (413) and 100 parameters', async () => {
    const big = await request(t.app)
      .post('/oauth2/token')
      .type('form')
      .send(`grant_type=client_credentials&scope=${'a'.repeat(70 * 1024)}`);
    expectOAuthError(big, 413, big.body.error as string);
    expect(big.body.error).toBeTypeOf('string');
    const many = Array.from({ length: 150 }, (_, i) => `p${i}=1`).join('&');
    const res = await request(t.app)
      .post('/oauth2/token')
      .type('form')
      .send(`grant_type=client_credentials&${many}`);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    expect(res.body.error).toBeTypeOf('string');
  });

  it('NDJSON upload: a line deeper than 100 levels is reported and skipped, the file goes on', async () => {
    const lines = [
      JSON.stringify({ resourceType: 'Basic', id: 'ok1', code: { text: 'x' } }),
      `{"resourceType":"Basic","id":"deep","code":{"text":"x"},"extension":${nested(101)}}`,
      JSON.stringify({ resourceType: 'Basic', id: 'ok2', code: { text: 'x' } }),
    ].join('\n');
    const res = await request(t.app)
      .post('/fhir/R4')
      .set('Authorization', auth)
      .attach('file', Buffer.from(lines), {
        filename: 'basic.ndjson',
        contentType: 'application/fhir+ndjson',
      });
    expect(res.status).toBe(200);
    const issues = res.body.issue as { severity: string; code: string; location?: string[] }[];
    expect(issues).toContainEqual(
      expect.objectContaining({ severity: 'error', code: 'structure', location: ['basic.ndjson:2'] }),
    );
    expect((await request(t.app).get('/fhir/R4/Basic/ok2').set('Authorization', auth)).status).toBe(200);
    expect((await request(t.app).get('/fhir/R4/Basic/deep').set('Authorization', auth)).status).toBe(404);
  });
});
