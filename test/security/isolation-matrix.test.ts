import { randomUUID } from 'node:crypto';
import { decodeJwt, decodeProtectedHeader, importJWK, SignJWT, type JWTHeaderParameters } from 'jose';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPlatformApp, FHIR_JSON, SCIM_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { smartUser, userBearer } from '../helpers/smart-users.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { eventually } from '../helpers/eventually.js';

interface Walked {
  method: string;
  path: string;
}

interface LayerLike {
  rawPath?: unknown;
  slash?: boolean;
  route?: { path: unknown; methods: Record<string, boolean> };
  handle?: { stack?: LayerLike[] };
}

function pathText(raw: unknown): string {
  if (raw === undefined || raw === '/') return '';
  if (typeof raw === 'string') return raw;
  if (raw instanceof RegExp) return raw.toString();
  throw new Error(`unexpected route path ${JSON.stringify(raw)}`);
}

/** Every route in an Express 5 router stack, nested routers included, with its full path. */
function walk(stack: LayerLike[], prefix = ''): Walked[] {
  const out: Walked[] = [];
  for (const layer of stack) {
    if (layer.route) {
      for (const [method, on] of Object.entries(layer.route.methods)) {
        if (on) out.push({ method, path: prefix + pathText(layer.route.path) });
      }
    } else if (layer.handle?.stack) {
      out.push(...walk(layer.handle.stack, layer.slash ? prefix : prefix + pathText(layer.rawPath)));
    }
  }
  return out;
}

let t: PlatformTestApp;
beforeAll(async () => {
  t = await createPlatformApp();
});
afterAll(async () => {
  await t.close();
});

/** Public by design: answered without a token. */
const PUBLIC = new Set([
  'get /healthz',
  'get /readyz',
  'post /oauth2/token',
  'all /oauth2/token',
  'get /oauth2/jwks',
  // RFC 7009 / 7662: the caller authenticates as at the token endpoint (client credentials).
  'post /oauth2/revoke',
  'all /oauth2/revoke',
  'post /oauth2/introspect',
  'all /oauth2/introspect',
  // SMART App Launch: the browser's user signs in there (always mounted; federated sign-in by default).
  'get /oauth2/authorize',
  'post /oauth2/authorize',
  'all /oauth2/authorize',
  // The identity provider sends the browser back there; the signed state cookie decides.
  'get /oauth2/federation/callback',
  'get /.well-known/smart-configuration',
  'get /fhir/R4/.well-known/smart-configuration',
  'get /.well-known/openid-configuration',
  'get /fhir/R4/metadata',
  'all /fhir/R4/metadata',
  // The bulk operations' own OperationDefinitions, public as the CapabilityStatement naming them;
  // any other id goes on to the FHIR router (authenticated).
  'get /fhir/R4/^\\/OperationDefinition\\/[^/]+\\/?$/',
]);

/** A concrete URL per walked route path; a walked route missing here fails the test. */
const FILLERS: Record<string, string> = {
  '/scim/v2/^\\/Users\\/?$/': '/scim/v2/Users',
  '/scim/v2/^\\/Users\\/\\.search\\/?$/': '/scim/v2/Users/.search',
  '/scim/v2/^\\/\\.search\\/?$/': '/scim/v2/.search',
  '/scim/v2/^\\/Users\\/([^/]+)\\/?$/': '/scim/v2/Users/u1',
  '/scim/v2/^\\/Groups\\/?$/': '/scim/v2/Groups',
  '/scim/v2/^\\/Groups\\/\\.search\\/?$/': '/scim/v2/Groups/.search',
  '/scim/v2/^\\/Groups\\/([^/]+)\\/?$/': '/scim/v2/Groups/sg1',
  '/scim/v2/^\\/ServiceProviderConfig\\/?$/': '/scim/v2/ServiceProviderConfig',
  '/scim/v2/^\\/ResourceTypes\\/?$/': '/scim/v2/ResourceTypes',
  '/scim/v2/^\\/ResourceTypes\\/([^/]+)\\/?$/': '/scim/v2/ResourceTypes/User',
  '/scim/v2/^\\/Schemas\\/?$/': '/scim/v2/Schemas',
  '/scim/v2/^\\/Schemas\\/([^/]+)\\/?$/': '/scim/v2/Schemas/x',
  '/fhir/R4/^\\/Project\\/(?:\\$|%24)init\\/?$/': '/fhir/R4/Project/$init',
  '/fhir/R4/^\\/Project\\/([^/]+)\\/?$/': '/fhir/R4/Project/p1',
  '/fhir/R4/^\\/Project\\/([^/]+)\\/(?:\\$|%24)new-client\\/?$/': '/fhir/R4/Project/p1/$new-client',
  '/fhir/R4/^\\/Project\\/([^/]+)\\/ClientApplication\\/?$/': '/fhir/R4/Project/p1/ClientApplication',
  '/fhir/R4/^\\/Project\\/([^/]+)\\/ClientApplication\\/([^/]+)\\/?$/':
    '/fhir/R4/Project/p1/ClientApplication/c1',
  '/fhir/R4/^\\/Project\\/([^/]+)\\/(?:\\$|%24)revoke-client\\/?$/': '/fhir/R4/Project/p1/$revoke-client',
  '/fhir/R4/^\\/Project\\/([^/]+)\\/(?:\\$|%24)settings\\/?$/': '/fhir/R4/Project/p1/$settings',
  '/fhir/R4/^\\/Project(?:\\/.*)?$/': '/fhir/R4/Project/p1/other',
  '/fhir/R4/^\\/(?:\\$|%24)export\\/?$/': '/fhir/R4/$export',
  '/fhir/R4/^\\/Patient\\/(?:\\$|%24)export\\/?$/': '/fhir/R4/Patient/$export',
  '/fhir/R4/^\\/Group\\/[^/]+\\/(?:\\$|%24)export\\/?$/': '/fhir/R4/Group/g1/$export',
  '/fhir/R4/^\\/(?:\\$|%24)export-status\\/[^/]+\\/?$/': '/fhir/R4/$export-status/j1',
  '/fhir/R4/^\\/(?:\\$|%24)export-file\\/[^/]+\\/[^/]+$/': '/fhir/R4/$export-file/j1/f1',
  '/fhir/R4/^\\/(?:\\$|%24)import\\/?$/': '/fhir/R4/$import',
  '/fhir/R4/^\\/(?:\\$|%24)import-status\\/[^/]+\\/?$/': '/fhir/R4/$import-status/i1',
  '/fhir/R4': '/fhir/R4',
  // With criteria: PUT and DELETE of a type are conditional update and delete.
  '/fhir/R4/:type': '/fhir/R4/Patient?identifier=urn:matrix|none',
  '/fhir/R4/:type/_search': '/fhir/R4/Patient/_search',
  '/fhir/R4/:type/:id': '/fhir/R4/Patient/p1',
  '/fhir/R4/:type/:id/_history/:vid': '/fhir/R4/Patient/p1/_history/1',
  '/fhir/R4/_history': '/fhir/R4/_history',
  '/fhir/R4/:type/_history': '/fhir/R4/Patient/_history',
  '/fhir/R4/:type/:id/_history': '/fhir/R4/Patient/p1/_history',
  '/fhir/R4/^\\/Patient\\/(?:\\$|%24)everything\\/?$/': '/fhir/R4/Patient/$everything',
  '/fhir/R4/^\\/Patient\\/([^/]+)\\/(?:\\$|%24)everything\\/?$/': '/fhir/R4/Patient/p1/$everything',
  // $validate of a type, and of project A's patient.
  '/fhir/R4/^\\/([^/]+)\\/(?:\\$|%24)validate\\/?$/': '/fhir/R4/Patient/$validate',
  '/fhir/R4/^\\/([^/]+)\\/([^/]+)\\/(?:\\$|%24)validate\\/?$/': '/fhir/R4/Patient/p1/$validate',
  // The terminology operations, at the type level and on project A's ValueSet and CodeSystem.
  '/fhir/R4/^\\/ValueSet\\/(?:\\$|%24)expand\\/?$/': '/fhir/R4/ValueSet/$expand',
  '/fhir/R4/^\\/ValueSet\\/([^/]+)\\/(?:\\$|%24)expand\\/?$/': '/fhir/R4/ValueSet/vs1/$expand',
  '/fhir/R4/^\\/ValueSet\\/(?:\\$|%24)validate-code\\/?$/': '/fhir/R4/ValueSet/$validate-code',
  '/fhir/R4/^\\/ValueSet\\/([^/]+)\\/(?:\\$|%24)validate-code\\/?$/': '/fhir/R4/ValueSet/vs1/$validate-code',
  '/fhir/R4/^\\/CodeSystem\\/(?:\\$|%24)lookup\\/?$/': '/fhir/R4/CodeSystem/$lookup',
  '/fhir/R4/^\\/CodeSystem\\/(?:\\$|%24)validate-code\\/?$/': '/fhir/R4/CodeSystem/$validate-code',
  '/fhir/R4/^\\/CodeSystem\\/([^/]+)\\/(?:\\$|%24)validate-code\\/?$/':
    '/fhir/R4/CodeSystem/cs1/$validate-code',
  '/fhir/R4/^\\/CodeSystem\\/(?:\\$|%24)subsumes\\/?$/': '/fhir/R4/CodeSystem/$subsumes',
  '/fhir/R4/^\\/CodeSystem\\/([^/]+)\\/(?:\\$|%24)subsumes\\/?$/': '/fhir/R4/CodeSystem/cs1/$subsumes',
};

function routes(): Walked[] {
  return walk((t.platform.router as unknown as { stack: LayerLike[] }).stack).map((r) => ({
    method: r.method === '_all' ? 'all' : r.method,
    path: r.path,
  }));
}

describe('routes walked from the router stack', () => {
  it('finds routes, including nested routers, and every one has a matrix entry', () => {
    const walked = routes();
    expect(walked.length).toBeGreaterThan(20);
    const missing = walked.filter(
      (r) => !PUBLIC.has(`${r.method} ${r.path}`) && FILLERS[r.path] === undefined,
    );
    expect(missing).toEqual([]);
    const guarded = walked.filter((r) => !PUBLIC.has(`${r.method} ${r.path}`) && r.method !== 'all');
    console.info(
      `isolation matrix: ${walked.length} routes walked, ${guarded.length} protected (concrete methods)`,
    );
  });

  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const algNone = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'root', exp: 4102444800 })}.`;
  const cases: [string, string | undefined][] = [
    ['no token', undefined],
    ['garbage token', 'Bearer garbage'],
    ['alg none token', `Bearer ${algNone}`],
  ];

  it.each(cases)('answers 401 with %s on every protected route (concrete methods)', async (_name, auth) => {
    const failures: string[] = [];
    for (const r of routes()) {
      if (PUBLIC.has(`${r.method} ${r.path}`) || r.method === 'all') continue;
      const url = FILLERS[r.path] as string;
      const m = r.method as 'get' | 'post' | 'put' | 'patch' | 'delete';
      const req = request(t.app)[m](url);
      const res = await (auth === undefined ? req : req.set('Authorization', auth));
      if (res.status !== 401) failures.push(`${r.method.toUpperCase()} ${url} -> ${res.status}`);
    }
    expect(failures).toEqual([]);
  });
});

/** The protected routes with concrete methods, each with a URL naming `ids`' objects of project A. */
function protectedRoutes(ids: Record<string, string>): { method: string; url: string; path: string }[] {
  const swap = (url: string) =>
    url
      .replace('/Project/p1', `/Project/${ids.project}`)
      .replace('/Users/u1', `/Users/${ids.user}`)
      .replace('/Groups/sg1', `/Groups/${ids.scimGroup}`)
      .replace('/ClientApplication/c1', `/ClientApplication/${ids.client}`)
      .replace('/Patient/p1', `/Patient/${ids.patient}`)
      .replace('/Group/g1/', `/Group/${ids.group}/`)
      .replace('/ValueSet/vs1/', `/ValueSet/${ids.valueSet}/`)
      .replace('/CodeSystem/cs1/', `/CodeSystem/${ids.codeSystem}/`)
      .replace('/$export-status/j1', `/$export-status/${ids.job}`)
      .replace('/$export-file/j1/f1', `/$export-file/${ids.job}/${ids.file}`)
      .replace('/$import-status/i1', `/$import-status/${ids.importJob}`);
  return routes()
    .filter((r) => !PUBLIC.has(`${r.method} ${r.path}`) && r.method !== 'all')
    .map((r) => ({ method: r.method, path: r.path, url: swap(FILLERS[r.path] as string) }));
}

/** A body each route would accept from an authorized caller: refusals must come from the caller. */
function bodyFor(url: string): { type: string; body: unknown } {
  if (url.startsWith('/scim/v2/Groups'))
    return {
      type: SCIM_JSON,
      body: { schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'], displayName: `g-${Math.random()}` },
    };
  if (url.startsWith('/scim/'))
    return {
      type: SCIM_JSON,
      body: {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        userName: `someone-${Math.random()}@example.org`,
        userType: 'Patient',
      },
    };
  if (url.endsWith('/_search')) return { type: 'application/x-www-form-urlencoded', body: 'name=x' };
  // POST $everything takes its parameters as a form, as a search does.
  if (url.endsWith('/$everything')) return { type: 'application/x-www-form-urlencoded', body: '_count=1' };
  const patient = /\/fhir\/R4\/Patient(?:\/([^/$?]+))?(?:\?.*)?$/.exec(url);
  if (patient)
    return { type: FHIR_JSON, body: { resourceType: 'Patient', ...(patient[1] ? { id: patient[1] } : {}) } };
  if (url === '/fhir/R4')
    return {
      type: FHIR_JSON,
      body: {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [{ resource: { resourceType: 'Patient' }, request: { method: 'POST', url: 'Patient' } }],
      },
    };
  if (url.includes('$export')) return { type: FHIR_JSON, body: { resourceType: 'Parameters' } };
  return {
    type: FHIR_JSON,
    body: { resourceType: 'Parameters', parameter: [{ name: 'name', valueString: 'x' }] },
  };
}

async function send(method: string, url: string, auth: string): Promise<request.Response> {
  const m = method as 'get' | 'post' | 'put' | 'patch' | 'delete';
  const req = request(t.app)[m](url).set('Authorization', auth);
  if (method === 'get' || method === 'delete') return req;
  const { type, body } = bodyFor(url);
  return req.type(type).send(typeof body === 'string' ? body : JSON.stringify(body));
}

describe('who is calling, on every protected route', () => {
  /** Project A's objects, named in the URLs; B is the other project. */
  const ids: Record<string, string> = {};
  let adminA: string;
  let adminB: string;
  let narrowA: string;
  let revokedA: string;
  /** SMART user tokens by kind, in project A and in project B. */
  const smartA: Record<string, string> = {};
  const smartB: Record<string, string> = {};

  beforeAll(async () => {
    const a = await t.initProject('Isolation A');
    const b = await t.initProject('Isolation B');
    ids.project = a;
    const clientA = await t.newClient(a, { name: 'etl', scope: 'system/*.*', admin: true });
    const clientB = await t.newClient(b, { name: 'etl', scope: 'system/*.*', admin: true });
    // May create Observations, read nothing, administer nothing.
    const narrow = await t.newClient(a, { name: 'narrow', scope: 'system/Observation.c' });
    const revoked = await t.newClient(a, { name: 'gone', scope: 'system/*.*', admin: true });
    ids.client = narrow.id;
    adminA = await t.bearer(clientA.id, clientA.secret, 'project:admin system/*.*');
    adminB = await t.bearer(clientB.id, clientB.secret, 'project:admin system/*.*');
    narrowA = await t.bearer(narrow.id, narrow.secret, 'system/Observation.c');
    revokedA = await t.bearer(revoked.id, revoked.secret, 'project:admin system/*.*');
    // SMART apps and their users in both projects: a Patient, a RelatedPerson and a Practitioner, and
    // a Practitioner launched for one patient. In A they are about another patient than ids.patient.
    for (const [project, tokens, prefix] of [
      [a, smartA, 'a'],
      [b, smartB, 'b'],
    ] as const) {
      const app = await t.newClient(project, { name: 'smart', scope: 'patient/*.* user/*.* launch/patient' });
      const patient = `${prefix}-iso-patient`;
      await t.storage.writeResources(project, [
        { op: 'update', resource: { resourceType: 'Patient', id: patient } },
        {
          op: 'update',
          resource: {
            resourceType: 'RelatedPerson',
            id: `${prefix}-iso-rp`,
            patient: { reference: `Patient/${patient}` },
          },
        },
        { op: 'update', resource: { resourceType: 'Practitioner', id: `${prefix}-iso-pr` } },
      ]);
      const patientUser = await smartUser(t.storage, project, {
        id: `${prefix}-u-pat`,
        userType: 'Patient',
        profileId: patient,
      });
      const related = await smartUser(t.storage, project, {
        id: `${prefix}-u-rp`,
        userType: 'RelatedPerson',
        profileId: `${prefix}-iso-rp`,
      });
      const doctor = await smartUser(t.storage, project, {
        id: `${prefix}-u-pr`,
        userType: 'Practitioner',
        profileId: `${prefix}-iso-pr`,
      });
      tokens.Patient = await userBearer(t.storage, app.id, patientUser, ['user/*.*']);
      tokens.RelatedPerson = await userBearer(t.storage, app.id, related, ['user/*.*']);
      tokens.Practitioner = await userBearer(t.storage, app.id, doctor, ['user/*.*']);
      tokens['patient-scoped Practitioner'] = await userBearer(
        t.storage,
        app.id,
        doctor,
        ['patient/*.*'],
        patient,
      );
    }
    const revoke = await request(t.app)
      .delete(`/fhir/R4/Project/${a}/ClientApplication/${revoked.id}`)
      .set('Authorization', adminA);
    expect(revoke.status).toBeLessThan(300);

    const patient = await request(t.app)
      .post('/fhir/R4/Patient')
      .set('Authorization', adminA)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Patient', name: [{ family: 'Isolated' }] }));
    expect(patient.status).toBe(201);
    ids.patient = patient.body.id as string;
    const group = await request(t.app)
      .post('/fhir/R4/Group')
      .set('Authorization', adminA)
      .type(FHIR_JSON)
      .send(
        JSON.stringify({
          resourceType: 'Group',
          type: 'person',
          actual: true,
          member: [{ entity: { reference: `Patient/${ids.patient}` } }],
        }),
      );
    expect(group.status).toBe(201);
    ids.group = group.body.id as string;
    for (const [type, key] of [
      ['CodeSystem', 'codeSystem'],
      ['ValueSet', 'valueSet'],
    ] as const) {
      const system = 'http://example.org/isolated';
      const terminology = await request(t.app)
        .post(`/fhir/R4/${type}`)
        .set('Authorization', adminA)
        .type(FHIR_JSON)
        .send(
          JSON.stringify(
            type === 'CodeSystem'
              ? {
                  resourceType: type,
                  url: system,
                  status: 'active',
                  content: 'complete',
                  concept: [{ code: 'a' }],
                }
              : {
                  resourceType: type,
                  url: `${system}/vs`,
                  status: 'active',
                  compose: { include: [{ system }] },
                },
          ),
        );
      expect(terminology.status).toBe(201);
      ids[key] = terminology.body.id as string;
    }
    const user = await request(t.app)
      .post('/scim/v2/Users')
      .set('Authorization', adminA)
      .type(SCIM_JSON)
      .send(
        JSON.stringify({
          schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
          userName: 'isolated@example.org',
          userType: 'Patient',
        }),
      );
    expect(user.status).toBe(201);
    ids.user = user.body.id as string;
    const scimGroup = await request(t.app)
      .post('/scim/v2/Groups')
      .set('Authorization', adminA)
      .type(SCIM_JSON)
      .send(JSON.stringify({ displayName: 'Isolated', members: [{ value: ids.user }] }));
    expect(scimGroup.status).toBe(201);
    ids.scimGroup = scimGroup.body.id as string;
    const kickoff = await request(t.app)
      .get('/fhir/R4/$export?_type=Patient')
      .set('Authorization', adminA)
      .set('Accept', FHIR_JSON)
      .set('Prefer', 'respond-async');
    expect(kickoff.status).toBe(202);
    const status = new URL(kickoff.headers['content-location'] as string).pathname;
    ids.job = status.split('/').pop()!;
    const done = await eventually('the export to complete', async () => {
      const res = await request(t.app).get(status).set('Authorization', adminA);
      if (res.status !== 200) expect(res.status).toBe(202);
      return res.status === 200 && res;
    });
    ids.file = (done.body.output[0].url as string).split('/').pop()!;
    // An import of project A (of a file nobody serves: it completes with an error file).
    const imported = await request(t.app)
      .post('/fhir/R4/$import')
      .set('Authorization', adminA)
      .type(FHIR_JSON)
      .send(
        JSON.stringify({
          resourceType: 'Parameters',
          parameter: [
            {
              name: 'input',
              part: [
                { name: 'type', valueCode: 'Patient' },
                { name: 'url', valueUri: 'http://127.0.0.1:9/none.ndjson' },
              ],
            },
          ],
        }),
      );
    expect(imported.status).toBe(202);
    const importStatus = new URL(imported.headers['content-location'] as string).pathname;
    ids.importJob = importStatus.split('/').pop()!;
    await eventually('the import to complete', async () => {
      const res = await request(t.app).get(importStatus).set('Authorization', adminA);
      if (res.status !== 200) expect(res.status).toBe(202);
      return res.status === 200;
    });
  });

  /** Statuses per route that differ from `expected(route)`. */
  async function mismatches(
    auth: string,
    expected: (r: { method: string; path: string; url: string }) => number,
  ): Promise<string[]> {
    const out: string[] = [];
    for (const r of protectedRoutes(ids)) {
      const res = await send(r.method, r.url, auth);
      const want = expected(r);
      if (res.status !== want) out.push(`${r.method.toUpperCase()} ${r.url} -> ${res.status}, want ${want}`);
    }
    return out;
  }

  it("the setup reaches every object with project A's own admin token", async () => {
    for (const url of [
      `/fhir/R4/Patient/${ids.patient}`,
      `/fhir/R4/Group/${ids.group}`,
      `/scim/v2/Users/${ids.user}`,
      `/scim/v2/Groups/${ids.scimGroup}`,
      `/fhir/R4/Group/${ids.scimGroup}`,
      `/fhir/R4/Project/${ids.project}`,
      `/fhir/R4/Project/${ids.project}/ClientApplication/${ids.client}`,
      `/fhir/R4/$export-status/${ids.job}`,
      `/fhir/R4/$export-file/${ids.job}/${ids.file}`,
      `/fhir/R4/$import-status/${ids.importJob}`,
      `/fhir/R4/ValueSet/${ids.valueSet}/$expand`,
      `/fhir/R4/CodeSystem/${ids.codeSystem}/$validate-code?code=a`,
      `/fhir/R4/Patient/${ids.patient}/$validate`,
    ]) {
      expect((await request(t.app).get(url).set('Authorization', adminA)).status, url).toBe(200);
    }
  });

  it('forged tokens answer 401: HS256 keyed with the public key, wrong aud, wrong iss, expired, other project', async () => {
    const real = adminA.slice('Bearer '.length);
    const header = decodeProtectedHeader(real) as JWTHeaderParameters;
    const claims = decodeJwt(real);
    const record = (await t.storage.listSigningKeys()).find((k) => k.kid === header.kid)!;
    const privateKey = await importJWK(record.privateJwk as Parameters<typeof importJWK>[0], record.alg);
    const resign = (changes: Record<string, unknown>) =>
      new SignJWT({ ...claims, ...changes }).setProtectedHeader(header).sign(privateKey);
    const now = Math.floor(Date.now() / 1000);
    const forged: [string, string][] = [
      [
        'HS256 with the public key',
        await new SignJWT(claims)
          .setProtectedHeader({ ...header, alg: 'HS256' })
          .sign(new TextEncoder().encode(JSON.stringify(record.publicJwk))),
      ],
      ['wrong aud', await resign({ aud: 'http://elsewhere.test' })],
      ['wrong iss', await resign({ iss: 'http://elsewhere.test' })],
      ['expired', await resign({ iat: now - 7200, exp: now - 3600 })],
      ['another project in the claims', await resign({ project_id: 'someone-else' })],
      ['super admin claimed', await resign({ super_admin: true })],
    ];
    const failures: string[] = [];
    for (const [name, token] of forged) {
      for (const f of await mismatches(`Bearer ${token}`, () => 401)) failures.push(`${name}: ${f}`);
    }
    expect(failures).toEqual([]);
  });

  it("a revoked client's token answers 401", async () => {
    expect(await mismatches(revokedA, () => 401)).toEqual([]);
  });

  /**
   * Failures of `auth` on every URL naming one of `ids`' objects: each must answer exactly as the
   * same URL naming objects that do not exist (status, and body once the ids are blanked), and never
   * with success. Listings and searches must show none of the objects.
   */
  async function learnsNothing(auth: string, hidden: Record<string, string>): Promise<string[]> {
    const failures: string[] = [];
    const blank = (text: string, names: string[]) =>
      names.reduce((acc, id) => acc.split(id).join('<id>'), text);
    // An OperationOutcome's own id is new in every answer.
    const comparable = (text: string) => {
      try {
        const body = JSON.parse(text) as { resourceType?: string; id?: string };
        if (body.resourceType === 'OperationOutcome') delete body.id;
        return JSON.stringify(body);
      } catch {
        return text;
      }
    };
    for (const r of protectedRoutes(hidden)) {
      const named = Object.values(hidden).filter((id) => r.url.includes(id) && id !== hidden.file);
      // Ids are per project: B's PUT of that id creates B's own Patient (checked below: A's is
      // untouched), as it would for any id. In one project, a PUT tells a taken id from a free one
      // (update as create), as on any FHIR server that allows it; ids are server-assigned UUIDs.
      if (named.length === 0 || (r.method === 'put' && r.path === '/fhir/R4/:type/:id')) continue;
      const fresh = named.map(() => randomUUID());
      const unknownUrl = named.reduce((url, id, i) => url.split(id).join(fresh[i]), r.url);
      const real = await send(r.method, r.url, auth);
      const unknown = await send(r.method, unknownUrl, auth);
      const line = `${r.method.toUpperCase()} ${r.url}`;
      if (real.status < 400) failures.push(`${line} -> ${real.status}`);
      if (real.status !== unknown.status)
        failures.push(`${line} -> ${real.status}, unknown ids -> ${unknown.status}`);
      else if (comparable(blank(real.text, named)) !== comparable(blank(unknown.text, fresh)))
        failures.push(`${line}: the body differs from that of unknown ids`);
    }
    const own = await request(t.app).get(`/fhir/R4/Patient/${hidden.patient}`).set('Authorization', adminA);
    if (own.body.meta?.versionId !== '1') failures.push(`Patient/${hidden.patient} changed`);
    // Listings and searches show none of the objects.
    for (const url of [
      '/scim/v2/Users',
      '/scim/v2/Groups',
      '/fhir/R4/Patient',
      '/fhir/R4/Group',
      '/fhir/R4/_history',
      '/fhir/R4/Patient/_history',
      `/fhir/R4/Project/${hidden.project}/ClientApplication`,
    ]) {
      const res = await request(t.app).get(url).set('Authorization', auth);
      for (const id of Object.values(hidden))
        if (id !== hidden.project && res.text.includes(id)) failures.push(`${url} lists ${id}`);
    }
    return failures;
  }

  it("another project's admin token learns nothing of project A's objects", async () => {
    expect(await learnsNothing(adminB, ids)).toEqual([]);
  });

  it.each(['Patient', 'RelatedPerson', 'Practitioner', 'patient-scoped Practitioner'])(
    "a %s user of another project learns nothing of project A's objects",
    async (kind) => {
      expect(await learnsNothing(smartB[kind]!, ids)).toEqual([]);
    },
  );

  it.each(['Patient', 'RelatedPerson', 'patient-scoped Practitioner'])(
    "a %s user of project A learns nothing of another patient's objects",
    async (kind) => {
      expect(await learnsNothing(smartA[kind]!, ids)).toEqual([]);
    },
  );

  it("a Practitioner user with user/ scopes reads the project's patients, never the trail or admin routes", async () => {
    const auth = smartA.Practitioner!;
    expect(
      (await request(t.app).get(`/fhir/R4/Patient/${ids.patient}`).set('Authorization', auth)).status,
    ).toBe(200);
    for (const url of [
      '/fhir/R4/AuditEvent',
      `/scim/v2/Users/${ids.user}`,
      `/fhir/R4/Project/${ids.project}`,
    ])
      expect([403, 404], url).toContain((await request(t.app).get(url).set('Authorization', auth)).status);
    expect((await send('get', `/fhir/R4/$export-file/${ids.job}/${ids.file}`, auth)).status).toBe(404);
  });

  it('a token lacking the scope answers 403 (export and import statuses are owner-bound: 404)', async () => {
    const expected = (r: { url: string }) =>
      r.url.includes('$export-status') || r.url.includes('$import-status') ? 404 : 403;
    expect(await mismatches(narrowA, expected)).toEqual([]);
  });
});

describe("a deactivated user's token, with the host's own authentication", () => {
  it('answers 403 on every protected route, and the same user acts again once reactivated', async () => {
    const host = await createPlatformApp({ authenticate: testAuthenticate, scimBasicAuth: false });
    try {
      const project = await host.storage.createProject({ id: 'pu', name: 'Users', strictMode: false });
      const user = await host.storage.createUser(project.id, {
        projectId: project.id,
        userName: 'jane@example.org',
        userType: 'Practitioner',
        profileId: 'pr-1',
        active: false,
        data: {},
      });
      const auth = testToken({
        projectId: project.id,
        kind: 'user',
        id: user.id,
        admin: true,
        scopes: ['system/*.*'],
      });
      const walked = walk((host.platform.router as unknown as { stack: LayerLike[] }).stack)
        .map((r) => ({ method: r.method === '_all' ? 'all' : r.method, path: r.path }))
        .filter((r) => !PUBLIC.has(`${r.method} ${r.path}`) && r.method !== 'all');
      expect(walked.length).toBeGreaterThan(20);
      const failures: string[] = [];
      for (const r of walked) {
        const url = FILLERS[r.path] as string;
        const m = r.method as 'get' | 'post' | 'put' | 'patch' | 'delete';
        const res = await request(host.app)[m](url).set('Authorization', auth);
        if (res.status !== 403) failures.push(`${r.method.toUpperCase()} ${url} -> ${res.status}`);
      }
      expect(failures).toEqual([]);
      await host.storage.updateUser(project.id, user.id, { active: true });
      expect((await request(host.app).get('/fhir/R4/Patient').set('Authorization', auth)).status).toBe(200);
    } finally {
      await host.close();
    }
  });
});
