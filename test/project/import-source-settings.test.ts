import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { projectRouter } from '../../src/project/router.js';
import { memoryStorage } from '../../src/stores.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { expectInvalidParameter } from '../helpers/protocol-errors.js';

const FHIR = '/api/fhir/R4';
const SUPER = testToken({ projectId: null, kind: 'super-admin', id: 'root', superAdmin: true });
const KEY = { kty: 'EC', crv: 'P-384', x: 'x', y: 'y', d: 'private-d-value', kid: 'import-1' };
const params = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });

interface SourceParts {
  url?: unknown;
  tokenUrl?: unknown;
  clientId?: unknown;
  privateKey?: unknown;
  scope?: unknown;
}

/** One `importSource` parameter; `undefined` leaves a part out. */
function source(parts: SourceParts = {}) {
  const given: Required<SourceParts> = {
    url: 'https://source.example.org/fhir',
    tokenUrl: 'https://source.example.org/auth/token',
    clientId: 'platform',
    privateKey: JSON.stringify(KEY),
    scope: undefined,
    ...parts,
  };
  const part = [
    given.url !== undefined && { name: 'url', valueUrl: given.url },
    given.tokenUrl !== undefined && { name: 'tokenUrl', valueUri: given.tokenUrl },
    given.clientId !== undefined && { name: 'clientId', valueString: given.clientId },
    given.privateKey !== undefined && { name: 'privateKey', valueString: given.privateKey },
    given.scope !== undefined && { name: 'scope', valueString: given.scope },
  ].filter(Boolean);
  return { name: 'importSource', part };
}

async function setup(allowPrivateImportAddresses?: boolean) {
  const storage = memoryStorage();
  const app = express();
  app.use(
    FHIR,
    projectRouter({
      storage,
      authenticate: testAuthenticate,
      onError: () => undefined,
      ...(allowPrivateImportAddresses === undefined ? {} : { allowPrivateImportAddresses }),
    }),
  );
  await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
  const admin = testToken({ projectId: 'p1', admin: true });
  const settingsAs = (auth: string, ...parameter: unknown[]) =>
    request(app)
      .post(`${FHIR}/Project/p1/$settings`)
      .set('Authorization', auth)
      .set('Content-Type', 'application/fhir+json')
      .send(JSON.stringify(params(...parameter)));
  const settings = (...parameter: unknown[]) => settingsAs(admin, ...parameter);
  return { storage, app, admin, settings, settingsAs };
}

describe('project settings: the servers $import pulls from (importSource)', () => {
  it('stores a source with its key, and answers it without the key', async () => {
    const { storage, app, admin, settings } = await setup();
    const res = await settings(
      source({ url: 'https://Source.Example.org/fhir/', scope: ' system/*.read  system/Patient.rs ' }),
    );
    expect(res.status).toBe(200);
    expect(res.body.importSources).toEqual([
      {
        url: 'https://source.example.org/fhir',
        tokenUrl: 'https://source.example.org/auth/token',
        clientId: 'platform',
        keyId: 'import-1',
        scope: 'system/*.read system/Patient.rs',
      },
    ]);
    expect(JSON.stringify(res.body)).not.toContain('private-d-value');
    expect((await storage.readProject('p1')).importSources).toEqual([
      {
        url: 'https://source.example.org/fhir',
        tokenUrl: 'https://source.example.org/auth/token',
        clientId: 'platform',
        privateKey: KEY,
        scope: 'system/*.read system/Patient.rs',
      },
    ]);
    const read = await request(app).get(`${FHIR}/Project/p1`).set('Authorization', admin);
    expect(read.status).toBe(200);
    expect(read.body.importSources).toEqual(res.body.importSources);
    expect(JSON.stringify(read.body)).not.toContain('private-d-value');
  });

  it('replaces the source of the same url, adds others, keeps them through other settings, resets them', async () => {
    const { storage, settings } = await setup();
    await settings(
      source(),
      source({ url: 'http://localhost:8080/fhir', tokenUrl: 'http://localhost:8080/token' }),
    );
    const replaced = await settings(
      source({ url: 'https://source.example.org/fhir/', clientId: 'platform-2' }),
      source({ url: 'https://other.example.org/r4', tokenUrl: 'https://other.example.org/token?tenant=a' }),
    );
    expect(replaced.status).toBe(200);
    expect(
      replaced.body.importSources.map((s: { url: string; clientId: string }) => [s.url, s.clientId]),
    ).toEqual([
      ['https://source.example.org/fhir', 'platform-2'],
      ['http://localhost:8080/fhir', 'platform'],
      ['https://other.example.org/r4', 'platform'],
    ]);
    // A source without scope has none stored: the importer's default applies.
    expect(replaced.body.importSources[0]).not.toHaveProperty('scope');

    const other = await settings({ name: 'scimEchoUserName', valueBoolean: true });
    expect(other.body.importSources).toHaveLength(3);

    const reset = await settings({ name: 'reset', valueCode: 'importSources' });
    expect(reset.status).toBe(200);
    expect(reset.body).not.toHaveProperty('importSources');
    const stored = await storage.readProject('p1');
    expect(stored.importSources).toBeUndefined();
    expect(stored.scim).toEqual({ echoUserName: true });
  });

  it('refuses bad URLs at the part at fault, and stores nothing', async () => {
    const { storage, settings } = await setup();
    const urlAt = 'Parameters.parameter[0].part[0].valueUrl';
    for (const url of [
      'source.example.org/fhir',
      'ftp://source.example.org/fhir',
      'http://source.example.org/fhir',
      'https://user:pass@source.example.org/fhir',
      'https://source.example.org/fhir?_format=json',
      'https://source.example.org/fhir#x',
    ]) {
      expectInvalidParameter(await settings(source({ url })), urlAt);
    }
    const tokenAt = 'Parameters.parameter[0].part[1].valueUri';
    for (const tokenUrl of [
      '/token',
      'http://source.example.org/token',
      'https://user@source.example.org/token',
      'https://source.example.org/token#x',
    ]) {
      expectInvalidParameter(await settings(source({ tokenUrl })), tokenAt);
    }
    // http on this machine is allowed, for a test server.
    for (const host of ['localhost:9000', '127.0.0.1', '[::1]:9000']) {
      const res = await settings(source({ url: `http://${host}/fhir`, tokenUrl: `http://${host}/token` }));
      expect(res.status).toBe(200);
    }
    await settings({ name: 'reset', valueCode: 'importSources' });
    expectInvalidParameter(
      await settings(source(), source({ url: 'http://x.example.org' })),
      'Parameters.parameter[1].part[0].valueUrl',
    );
    expect((await storage.readProject('p1')).importSources).toBeUndefined();
  });

  it('refuses a key that is no private asymmetric JWK, at its value', async () => {
    const { settings } = await setup();
    const keyAt = 'Parameters.parameter[0].part[3].valueString';
    const { d: _private, ...publicKey } = KEY;
    for (const privateKey of [
      'not json',
      '[]',
      'null',
      JSON.stringify(publicKey),
      JSON.stringify({ kty: 'oct', k: 'c2VjcmV0', d: 'x' }),
    ]) {
      expectInvalidParameter(await settings(source({ privateKey })), keyAt);
    }
  });

  it('refuses missing or unknown parts, a url twice, set-and-reset, and more than 20 sources', async () => {
    const { settings } = await setup();
    for (const missing of ['url', 'tokenUrl', 'clientId', 'privateKey']) {
      expectInvalidParameter(
        await settings(source({ [missing]: undefined })),
        'Parameters.parameter[0].part',
      );
    }
    expectInvalidParameter(
      await settings({
        name: 'importSource',
        part: [...source().part, { name: 'secret', valueString: 's' }],
      }),
      'Parameters.parameter[0].part[4].name',
    );
    expectInvalidParameter(
      await settings(source({ clientId: ' ' })),
      'Parameters.parameter[0].part[2].valueString',
    );
    expectInvalidParameter(
      await settings(source(), source({ url: 'https://source.example.org/fhir/' })),
      'Parameters.parameter[1].part[0].valueUrl',
    );
    expectInvalidParameter(
      await settings(source(), { name: 'reset', valueCode: 'importSources' }),
      'Parameters.parameter[1].valueCode',
    );
    const many = (from: number, count: number) =>
      Array.from({ length: count }, (_, i) => source({ url: `https://s${from + i}.example.org/fhir` }));
    expectInvalidParameter(await settings(...many(0, 21)), 'Parameters.parameter[20]');
    // Twenty stored: a new url is refused, a stored one may still be replaced.
    expect((await settings(...many(0, 20))).status).toBe(200);
    expectInvalidParameter(await settings(...many(5, 1), ...many(20, 1)), 'Parameters.parameter[1]');
    expect((await settings(...many(5, 1))).status).toBe(200);
  });

  it('is a setting of $settings only, and only for the project admins and the super admin', async () => {
    const { settingsAs } = await setup();
    const member = await settingsAs(testToken({ projectId: 'p1' }), source());
    expect(member.status).toBe(403);
    expect(JSON.stringify(member.body)).not.toContain('private-d-value');
    expect((await settingsAs(testToken({ projectId: 'p2', admin: true }), source())).status).toBe(404);
    expect((await settingsAs(SUPER, source())).status).toBe(200);
  });

  it('refuses sources on private addresses unless allowPrivateImportAddresses', async () => {
    const strict = await setup(false);
    for (const parts of [
      { url: 'https://10.1.2.3/fhir' },
      { url: 'https://[fd00::1]/fhir' },
      { url: 'http://localhost:8080/fhir' },
      { tokenUrl: 'https://169.254.169.254/token' },
    ]) {
      const res = await strict.settings(source(parts));
      expect(res.status, JSON.stringify(parts)).toBe(400);
      expect(JSON.stringify(res.body)).toMatch(/loopback, private or link-local/);
    }
    expect((await strict.settings(source())).status).toBe(200);
    const open = await setup(true);
    expect((await open.settings(source({ url: 'http://localhost:8080/fhir' }))).status).toBe(200);
  });
});
