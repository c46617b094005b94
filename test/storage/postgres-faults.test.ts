import request from 'supertest';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { StorageUnavailableError } from '../../src/storage/errors.js';
import type { Storage } from '../../src/storage/types.js';
import { Relay } from '../helpers/pg-relay.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import {
  createPlatformApp,
  FHIR_JSON,
  ROOT_ID,
  ROOT_SECRET,
  type PlatformTestApp,
} from '../helpers/platform-app.js';
import { expectOAuthError, expectOperationOutcome, expectScimError } from '../helpers/protocol-errors.js';
import { postgresTestUrl } from '../helpers/postgres.js';

if (postgresTestUrl('PostgreSQL out of reach')) {
  const url = new URL(POSTGRES_URL!);
  const schema = schemaFactory(POSTGRES_URL!);
  let relay: Relay;
  let relayed: string;
  const apps: PlatformTestApp[] = [];

  beforeAll(async () => {
    relay = new Relay({ host: url.hostname, port: Number(url.port || 5432) });
    const relayUrl = new URL(url);
    relayUrl.hostname = '127.0.0.1';
    relayUrl.port = String(await relay.listen());
    relayed = relayUrl.href;
  });
  afterEach(async () => {
    relay.restore();
    for (const t of apps.splice(0)) await t.close();
  });
  afterAll(() => relay.close());

  describe('PostgreSQL out of reach', () => {
    it('every route answers 503 in its protocol while it is; the next requests after it is back succeed', async () => {
      const name = schema();
      const storage = postgresStorage({ connectionString: relayed, schema: name });
      const t = await createPlatformApp({}, storage);
      apps.push(t);
      const projectId = await t.initProject('Acme');
      const admin = await t.newClient(projectId, { name: 'app', scope: 'system/*.*', admin: true });
      const auth = await t.bearer(admin.id, admin.secret);
      const put = (id: string) =>
        request(t.app)
          .put(`/fhir/R4/Patient/${id}`)
          .set('Authorization', auth)
          .type(FHIR_JSON)
          .send(JSON.stringify({ resourceType: 'Patient', id }));
      const scimUser = (userName: string) => t.scimUser(auth, userName);
      expect((await put('kept')).status).toBe(201);
      expect((await scimUser('kept@acme.example')).status).toBe(201);

      relay.cut();
      const fhir = await put('refused');
      expectOperationOutcome(fhir, 503, 'transient');
      expect(fhir.headers['retry-after']).toBe('1');
      const read = await request(t.app).get('/fhir/R4/Patient/kept').set('Authorization', auth);
      expectOperationOutcome(read, 503, 'transient');
      const scim = await scimUser('refused@acme.example');
      expectScimError(scim, 503);
      expect(scim.headers['retry-after']).toBe('1');
      const token = await t.tokenResponse(ROOT_ID, ROOT_SECRET);
      expectOAuthError(token, 503, 'temporarily_unavailable');
      expect(token.headers['retry-after']).toBe('1');
      const kickoff = await request(t.app)
        .get('/fhir/R4/$export')
        .set('Authorization', auth)
        .set('Prefer', 'respond-async');
      expectOperationOutcome(kickoff, 503, 'transient');

      relay.restore();
      expect((await put('after')).status).toBe(201);
      expect((await scimUser('after@acme.example')).status).toBe(201);
      expect((await t.tokenResponse(ROOT_ID, ROOT_SECRET)).status).toBe(200);

      // Straight to the database: every acknowledged write, none of the refused ones.
      const direct = postgresStorage({ connectionString: POSTGRES_URL!, schema: name });
      try {
        const ids = (await direct.searchResources(projectId, 'Patient', { sort: '_id' })).resources.map(
          (r) => r.id,
        );
        expect(ids).toEqual(['after', 'kept']);
        const users = (await direct.listUsers(projectId))
          .map((u) => u.userName)
          .filter((n) => n.includes('@'));
        expect(users.sort()).toEqual(['after@acme.example', 'kept@acme.example']);
      } finally {
        await direct.close();
      }
    });

    it('a store opened while the database is out of reach fails its calls with StorageUnavailableError, then migrates once it is back', async () => {
      relay.cut();
      const storage: Storage = postgresStorage({ connectionString: relayed, schema: schema() });
      try {
        const refused = await storage.listProjects().catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(StorageUnavailableError);
        await expect(storage.ping()).rejects.toMatchObject({ code: 'ERR_STORAGE_UNAVAILABLE' });
        relay.restore();
        await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
        expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p1']);
      } finally {
        await storage.close();
      }
    });
  });
}
