import http from 'node:http';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import type { AuditContext } from '../../src/audit/options.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { eventually } from '../helpers/eventually.js';
import { listen } from '../helpers/listen.js';

const apps: PlatformTestApp[] = [];
const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  for (const app of apps.splice(0)) await app.close();
});

const pathOf = (url: string) => new URL(url).pathname;

/**
 * A platform keeping every event, listening on loopback (its base URL is its address, so that the
 * URLs it hands out reach it), with a project and an admin client's token.
 */
async function platform(name: string) {
  const seen: { event: AuditEventResource; context: AuditContext }[] = [];
  const { server, origin } = await listen(http.createServer());
  servers.push(server);
  const t = await createPlatformApp({
    baseUrl: origin,
    audit: { onAudit: (event, context) => void seen.push({ event, context }) },
  });
  server.on('request', t.app);
  apps.push(t);
  const projectId = await t.initProject(name);
  const client = await t.newClient(projectId, { name: 'etl', admin: true });
  const auth = await t.bearer(client.id, client.secret);
  const imports = () => seen.filter((s) => s.context.record.kind === 'import');
  return { t, origin, projectId, client, auth, imports };
}

/** `POST /$import` as the platform's admin client, with these parameters. */
function postImport(to: { t: PlatformTestApp; auth: string }, parameter: unknown[]) {
  return request(to.t.app)
    .post('/fhir/R4/$import')
    .set('Authorization', to.auth)
    .set('Content-Type', FHIR_JSON)
    .set('Prefer', 'respond-async')
    .send({ resourceType: 'Parameters', parameter });
}

async function untilDone(app: PlatformTestApp['app'], auth: string, statusPath: string) {
  return eventually('the job to end', async () => {
    const res = await request(app).get(statusPath).set('Authorization', auth);
    return res.status !== 202 && res;
  });
}

describe('$import on the platform', () => {
  it('imports another platform export with its token, and records the kick-off and the completion', async () => {
    const source = await platform('Source');
    await source.t.storage.writeResources(source.projectId, [
      { op: 'update', resource: { resourceType: 'Patient', id: 'p1', gender: 'female' } },
      {
        op: 'update',
        resource: {
          resourceType: 'Observation',
          id: 'o1',
          status: 'final',
          code: { text: 'x' },
          subject: { reference: 'Patient/p1' },
        },
      },
    ]);
    const exported = await request(source.origin)
      .get('/fhir/R4/$export')
      .set('Authorization', source.auth)
      .set('Accept', FHIR_JSON)
      .set('Prefer', 'respond-async');
    expect(exported.status).toBe(202);
    const manifestUrl = exported.headers['content-location'] as string;

    const target = await platform('Target');
    const kicked = await postImport(target, [
      { name: 'manifestUrl', valueUri: manifestUrl },
      { name: 'accessToken', valueString: source.auth.slice('Bearer '.length) },
    ]);
    expect(kicked.status, JSON.stringify(kicked.body)).toBe(202);
    const statusPath = pathOf(kicked.headers['content-location'] as string);
    const done = await untilDone(target.t.app, target.auth, statusPath);
    expect(done.status, done.text).toBe(200);
    const read = await request(target.t.app).get('/fhir/R4/Observation/o1').set('Authorization', target.auth);
    expect(read.status).toBe(200);
    expect(read.body.subject).toEqual({ reference: 'Patient/p1' });

    const jobId = statusPath.split('/').pop()!;
    const [start, end] = await eventually('the import events', () =>
      target.imports().length === 2 ? target.imports() : undefined,
    );
    expect(start!.context.record).toMatchObject({
      kind: 'import',
      phase: 'kickoff',
      jobId,
      source: manifestUrl,
      projectId: target.projectId,
      actor: { kind: 'client', id: target.client.id },
    });
    expect(end!.context.record).toMatchObject({
      kind: 'import',
      phase: 'completed',
      jobId,
      counts: { Patient: 1, Observation: 1 },
      refused: 0,
    });
    expect(end!.event.type.code).toBe('110107');

    // A refused kick-off (400) is recorded too; a wrong token at the source fails the job.
    const bad = await postImport(target, []);
    expect(bad.status).toBe(400);
    await eventually('the refused kick-off event', () =>
      target.imports().find((s) => s.context.record.kind === 'import' && s.context.record.status === 400),
    );
    const wrongToken = await postImport(target, [
      { name: 'manifestUrl', valueUri: manifestUrl },
      { name: 'accessToken', valueString: 'not-a-token' },
    ]);
    expect(wrongToken.status).toBe(202);
    const failed = await untilDone(
      target.t.app,
      target.auth,
      pathOf(wrongToken.headers['content-location'] as string),
    );
    expect(failed.status).toBe(502);
    expect(failed.body.issue[0].details.text).toMatch(/401/);
  });

  it('signs in at a registered source as a SMART Backend Services client (client assertion), without a token given', async () => {
    const source = await platform('Source');
    await source.t.storage.writeResources(source.projectId, [
      { op: 'update', resource: { resourceType: 'Patient', id: 'p9', gender: 'male' } },
    ]);
    const { privateKey, publicKey } = await generateKeyPair('ES384', { extractable: true });
    const publicJwk = { ...(await exportJWK(publicKey)), kid: 'import-key', alg: 'ES384' };
    const privateJwk = { ...(await exportJWK(privateKey)), kid: 'import-key', alg: 'ES384' };
    const reader = await source.t.newClient(source.projectId, {
      name: 'importer',
      scope: 'system/*.rs',
      jwks: JSON.stringify({ keys: [publicJwk] }),
    });
    // The export is the importer client's own (a status URL answers its owner only).
    const tokenUrl = `${source.origin}/oauth2/token`;
    const assertion = await new SignJWT({})
      .setProtectedHeader({ alg: 'ES384', kid: 'import-key', typ: 'JWT' })
      .setIssuer(reader.id)
      .setSubject(reader.id)
      .setAudience(tokenUrl)
      .setJti(crypto.randomUUID())
      .setExpirationTime('4m')
      .sign(privateKey);
    const granted = await request(source.origin).post('/oauth2/token').type('form').send({
      grant_type: 'client_credentials',
      scope: 'system/*.rs',
      client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
      client_assertion: assertion,
    });
    expect(granted.status, granted.text).toBe(200);
    const exported = await request(source.origin)
      .get('/fhir/R4/$export')
      .set('Authorization', `Bearer ${granted.body.access_token as string}`)
      .set('Prefer', 'respond-async');
    expect(exported.status).toBe(202);

    const target = await platform('Target');
    const settings = await request(target.t.app)
      .post(`/fhir/R4/Project/${target.projectId}/$settings`)
      .set('Authorization', target.auth)
      .set('Content-Type', FHIR_JSON)
      .send({
        resourceType: 'Parameters',
        parameter: [
          {
            name: 'importSource',
            part: [
              { name: 'url', valueUri: `${source.origin}/fhir/R4` },
              { name: 'tokenUrl', valueUri: tokenUrl },
              { name: 'clientId', valueString: reader.id },
              { name: 'privateKey', valueString: JSON.stringify(privateJwk) },
              { name: 'scope', valueString: 'system/*.rs' },
            ],
          },
        ],
      });
    expect(settings.status, JSON.stringify(settings.body)).toBe(200);
    const kicked = await postImport(target, [
      { name: 'manifestUrl', valueUri: exported.headers['content-location'] as string },
    ]);
    expect(kicked.status).toBe(202);
    const done = await untilDone(
      target.t.app,
      target.auth,
      pathOf(kicked.headers['content-location'] as string),
    );
    expect(done.status, done.text).toBe(200);
    const read = await request(target.t.app).get('/fhir/R4/Patient/p9').set('Authorization', target.auth);
    expect(read.status).toBe(200);
    expect(read.body.gender).toBe('male');
  });

  it('lists $import in the CapabilityStatement, with a definition naming its parameters', async () => {
    const { t, origin } = await platform('Capability');
    const metadata = await request(t.app).get('/fhir/R4/metadata');
    expect(metadata.status).toBe(200);
    const operations = metadata.body.rest[0].operation as { name: string; definition: string }[];
    const entry = operations.find((o) => o.name === 'import');
    expect(entry?.definition).toBe(`${origin}/fhir/R4/OperationDefinition/bulk-import`);
    const definition = await request(t.app).get(pathOf(entry!.definition));
    expect(definition.status).toBe(200);
    expect(definition.body.code).toBe('import');
    expect((definition.body.parameter as { name: string }[]).map((p) => p.name)).toEqual([
      'manifestUrl',
      'input',
      'inputSource',
      'accessToken',
      'inputFormat',
    ]);
  });

  it("one setting judges import URLs on registration too: the bulk import's allowPrivateAddresses", async () => {
    const t = await createPlatformApp({ bulk: { import: { allowPrivateAddresses: false } } });
    apps.push(t);
    const projectId = await t.initProject('Strict');
    const client = await t.newClient(projectId, { name: 'etl', admin: true });
    const auth = await t.bearer(client.id, client.secret);
    const res = await request(t.app)
      .post(`/fhir/R4/Project/${projectId}/$settings`)
      .set('Authorization', auth)
      .set('Content-Type', FHIR_JSON)
      .send({
        resourceType: 'Parameters',
        parameter: [
          {
            name: 'importSource',
            part: [
              { name: 'url', valueUri: 'http://127.0.0.1:9/fhir' },
              { name: 'tokenUrl', valueUri: 'http://127.0.0.1:9/token' },
              { name: 'clientId', valueString: 'c' },
              {
                name: 'privateKey',
                valueString: JSON.stringify({ kty: 'EC', crv: 'P-384', x: 'x', y: 'y', d: 'd' }),
              },
            ],
          },
        ],
      });
    expect(res.status).toBe(400);
    expect(JSON.stringify(res.body)).toMatch(/loopback, private or link-local/);
  });
});
