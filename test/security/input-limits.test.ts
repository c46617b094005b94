// Every input limit of the mounted platform at its default, tried just over the limit through
// HTTP: each answers its protocol's error with the right status (docs/reliability.md, "Input
// limits", lists them; header and connection limits are in test/http/server-limits.test.ts).
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { clientKey, signAssertion } from '../auth/client-keys.js';
import { expectOAuthError, expectOperationOutcome, expectScimError } from '../helpers/protocol-errors.js';
import {
  createPlatformApp,
  FHIR_JSON,
  parameters,
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

  it('FHIR PATCH: 1,000 operations (413 above), patched resource 32 MiB (413 at the copy that would pass it)', async () => {
    const created = await request(t.app)
      .post('/fhir/R4/Basic')
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify({ resourceType: 'Basic', code: { text: 'x'.repeat(1000) } }));
    expect(created.status).toBe(201);
    const patch = (operations: unknown[]) =>
      request(t.app)
        .patch(`/fhir/R4/Basic/${created.body.id as string}`)
        .set('Authorization', auth)
        .type('application/json-patch+json')
        .send(JSON.stringify(operations));
    const test = { op: 'test', path: '/code/text', value: 'x'.repeat(1000) };
    expect((await patch(Array.from({ length: 1000 }, () => test))).status).toBe(200);
    expectOperationOutcome(await patch(Array.from({ length: 1001 }, () => test)), 413);
    // Each copy of the list into itself doubles the resource: 1 KB to 32 MiB in about 15 copies.
    const extension = { url: 'http://example.org/x', valueString: 'x'.repeat(1000) };
    const copy = { op: 'copy', from: '/extension', path: '/extension/-' };
    const res = await patch([
      { op: 'add', path: '/extension', value: [extension] },
      ...Array.from({ length: 30 }, () => copy),
    ]);
    expectOperationOutcome(res, 413);
    expect(res.body.issue[0].details.text).toContain('maxPatchedResourceSize');
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

describe('client registration and client assertion limits (fixed)', () => {
  const newClient = async (values: Record<string, string | boolean>) =>
    request(t.app)
      .post(`/fhir/R4/Project/${projectId}/$new-client`)
      .set('Authorization', await t.bearer(ROOT_ID, ROOT_SECRET))
      .type(FHIR_JSON)
      .send(JSON.stringify(parameters({ name: 'limits', ...values })));

  it('$new-client: JWKS over 64 KiB or 20 keys, jwksUri over 2,048, name over 256 and scope over 4,096 characters (400); just under is registered', async () => {
    const key = await clientKey('ES256');
    const jwks = (keys: object[]) => JSON.stringify({ keys });
    // 21 distinct keys: over the key count (the text is well under 64 KiB).
    const keys = await Promise.all(Array.from({ length: 21 }, () => clientKey('ES256')));
    const publicKeys = keys.map((k) => k.publicJwk);
    expect(jwks(publicKeys).length).toBeLessThan(64 * 1024);
    expectOperationOutcome(await newClient({ jwks: jwks(publicKeys) }), 400, 'invalid');
    expect((await newClient({ jwks: jwks(publicKeys.slice(0, 20)) })).status).toBe(201);
    // One key padded with whitespace to just over 64 KiB of text.
    const text = jwks([key.publicJwk]);
    const padded = `${text.slice(0, -1)}${' '.repeat(64 * 1024 - text.length + 1)}}`;
    expect(padded.length).toBe(64 * 1024 + 1);
    expectOperationOutcome(await newClient({ jwks: padded }), 400, 'invalid');
    expect((await newClient({ jwks: padded.replace('  ', '') })).status).toBe(201);
    // jwksUri: 2,049 characters.
    const uri = (length: number) => {
      const head = 'https://keys.example.org/';
      return head + 'a'.repeat(length - head.length);
    };
    expectOperationOutcome(await newClient({ jwksUri: uri(2049) }), 400, 'invalid');
    expect((await newClient({ jwksUri: uri(2048) })).status).toBe(201);
    // The client name: 257 characters.
    expectOperationOutcome(await newClient({ name: 'n'.repeat(257) }), 400, 'invalid');
    expect((await newClient({ name: 'n'.repeat(256) })).status).toBe(201);
    // scope: 4,097 characters of valid tokens.
    const scope = (length: number) => {
      const base = 'system/Patient.rs';
      return base + ` ${'x'.repeat(length - base.length - 1)}`;
    };
    expectOperationOutcome(await newClient({ scope: scope(4097) }), 400, 'invalid');
    expect((await newClient({ scope: scope(4096) })).status).toBe(201);
  });

  it('client assertion: a jti over 512 characters is 401 invalid_client; 512 gets a token', async () => {
    const key = await clientKey('ES384');
    const registered = await newClient({
      jwks: JSON.stringify({ keys: [key.publicJwk] }),
      scope: 'system/*.rs',
    });
    expect(registered.status).toBe(201);
    const clientId = registered.body.id as string;
    const token = async (jti: string) =>
      request(t.app)
        .post('/oauth2/token')
        .type('form')
        .send({
          grant_type: 'client_credentials',
          client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
          client_assertion: await signAssertion(key, {
            clientId,
            aud: 'http://fhir.test/oauth2/token',
            jti,
          }),
        });
    expectOAuthError(await token('j'.repeat(513)), 401, 'invalid_client');
    const ok = await token('k'.repeat(512));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.access_token).toBeTypeOf('string');
  });
});

describe('input limits at smaller configured values', () => {
  const KiB = 1024;
  let small: PlatformTestApp;
  let smallAuth: string;
  beforeAll(async () => {
    small = await createPlatformApp({
      fhir: {
        bodyLimit: 16 * KiB,
        streamedBundleLimit: 64 * KiB,
        upload: { maxFileSize: 256 * KiB, maxFiles: 2, maxLineLength: KiB },
        searchLimits: { maxAccurateTotal: 3 },
      },
    });
    const id = await small.initProject('Small limits');
    const client = await small.newClient(id, { name: 'etl', scope: 'system/*.*', admin: true });
    smallAuth = await small.bearer(client.id, client.secret, 'project:admin system/*.*');
  });
  afterAll(async () => {
    await small.close();
  });

  /** A batch Bundle of `count` Basic creates, each padded with `pad` characters. */
  const bundle = (count: number, pad: number) =>
    JSON.stringify({
      resourceType: 'Bundle',
      type: 'batch',
      entry: Array.from({ length: count }, () => ({
        resource: { resourceType: 'Basic', code: { text: 'x'.repeat(pad) } },
        request: { method: 'POST', url: 'Basic' },
      })),
    });

  it('searchLimits.maxAccurateTotal (100,000 by default, 3 here): an exact total past it is 400, at it 200', async () => {
    const search = (query: string) =>
      request(small.app).get(`/fhir/R4/Basic?${query}`).set('Authorization', smallAuth);
    const basic = (code: string) =>
      request(small.app)
        .post('/fhir/R4/Basic')
        .set('Authorization', smallAuth)
        .type(FHIR_JSON)
        .send(JSON.stringify({ resourceType: 'Basic', code: { text: code } }));
    for (const code of ['three', 'three', 'three', 'four', 'four', 'four', 'four'])
      expect((await basic(code)).status).toBe(201);
    const under = await search('code:text=three&_summary=count');
    expect(under.status).toBe(200);
    expect(under.body.total).toBe(3);
    const over = await search('code:text=four&_total=accurate');
    expectOperationOutcome(over, 400, 'too-costly');
    expect(over.body.issue[0].expression).toEqual(['_total']);
    expect((await search('code:text=four')).status).toBe(200);
  });

  it('streamedBundleLimit (1 GB by default, 64 KiB here): a Bundle over bodyLimit is streamed; over the limit, 413', async () => {
    const post = (text: string) =>
      request(small.app).post('/fhir/R4').set('Authorization', smallAuth).type(FHIR_JSON).send(text);
    const under = bundle(30, 1000);
    expect(under.length).toBeGreaterThan(16 * KiB);
    expect(under.length).toBeLessThan(64 * KiB);
    const ok = await post(under);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.entry).toHaveLength(30);
    // Padded by whitespace to exactly one byte over: refused from its Content-Length.
    const over = bundle(30, 1000);
    expectOperationOutcome(await post(`${over}${' '.repeat(64 * KiB + 1 - over.length)}`), 413);
    // A body sent chunked (no Content-Length) over bodyLimit is refused by the body limit.
    const server = small.app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      const text = bundle(70, 1000);
      const res = await fetch(`http://127.0.0.1:${port}/fhir/R4`, {
        method: 'POST',
        headers: { Authorization: smallAuth, 'Content-Type': FHIR_JSON },
        body: Readable.toWeb(Readable.from([Buffer.from(text)])) as ReadableStream,
        duplex: 'half',
      });
      expect(res.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
      expect(res.status).toBe(413);
      expect(((await res.json()) as { resourceType: string }).resourceType).toBe('OperationOutcome');
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    expect((await post(bundle(1, 10))).status).toBe(200);
  });

  const upload = (files: [string, string][]) => {
    let req = request(small.app).post('/fhir/R4').set('Authorization', smallAuth);
    for (const [name, text] of files)
      req = req.attach('file', Buffer.from(text), { filename: name, contentType: 'application/fhir+ndjson' });
    return req;
  };
  const line = (id: string, pad = 10) =>
    JSON.stringify({ resourceType: 'Basic', id, code: { text: 'x'.repeat(pad) } });

  it('upload maxFileSize (1 GiB by default, 256 KiB here): a bigger file is 413; lines before the limit stay loaded', async () => {
    const lines = Array.from({ length: 400 }, (_, i) => line(`big-${i}`, 700)).join('\n');
    expect(lines.length).toBeGreaterThan(256 * KiB);
    expectOperationOutcome(await upload([['big.ndjson', lines]]), 413, 'too-costly');
    expect(
      (await request(small.app).get('/fhir/R4/Basic/big-0').set('Authorization', smallAuth)).status,
    ).toBe(200);
    expect(
      (await request(small.app).get('/fhir/R4/Basic/big-399').set('Authorization', smallAuth)).status,
    ).toBe(404);
    const ok = await upload([
      ['fits.ndjson', Array.from({ length: 10 }, (_, i) => line(`fits-${i}`, 300)).join('\n')],
    ]);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });

  it('upload maxFiles (20 by default, 2 here): a third file is 413', async () => {
    const three: [string, string][] = ['a', 'b', 'c'].map((n) => [`${n}.ndjson`, line(`files-${n}`)]);
    expectOperationOutcome(await upload(three), 413, 'too-costly');
    const two = await upload(three.slice(0, 2));
    expect(two.status, JSON.stringify(two.body)).toBe(200);
  });

  it('upload maxLineLength (16 MiB by default, 1 KiB here): a longer line is reported and skipped, the file goes on', async () => {
    // A long line whole within one chunk, and one longer than a chunk of the upload stream.
    const lines = [
      line('ll-1'),
      line('ll-long', 2000),
      line('ll-2'),
      line('ll-huge', 200 * KiB),
      line('ll-3'),
    ];
    const res = await upload([['lines.ndjson', lines.join('\n')]]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const issues = res.body.issue as { severity: string; code: string; location?: string[] }[];
    for (const at of ['lines.ndjson:2', 'lines.ndjson:4'])
      expect(issues).toContainEqual(
        expect.objectContaining({ severity: 'error', code: 'too-costly', location: [at] }),
      );
    expect(issues).toContainEqual(
      expect.objectContaining({ details: { text: 'lines.ndjson: 5 lines, 3 loaded, 2 failed' } }),
    );
  });
});
