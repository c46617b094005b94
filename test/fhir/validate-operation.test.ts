import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { SCIM_MANAGED_TAG } from '../../src/common/scim-managed.js';
import { fhirRouter } from '../../src/fhir/router.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// Issue 47: `$validate` at type and instance level runs the checks of a write at full strictness,
// whatever the project, and answers 200 with every issue (R4: "200 OK whether or not the resource is
// valid"); a request that cannot be validated answers as a write would.
const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';

interface Issue {
  severity: string;
  code: string;
  expression?: string[];
}

const errorsOf = (res: request.Response): Issue[] =>
  (res.body.issue as Issue[]).filter((i) => i.severity === 'error');

const token = (scopes: string[], project = 'lenient') => testToken({ projectId: project, scopes });
const ALL = token(['system/*.*']);

forEachStore('validate operation', (store, open) => {
  async function createApp(): Promise<{ app: express.Express; storage: Storage }> {
    const storage = await open();
    afterTest(() => storage.close());
    await storage.createProject({ id: 'lenient', name: 'Lenient', strictMode: false });
    const app = express();
    app.use(
      BASE,
      fhirRouter({
        storage,
        authenticate: testAuthenticate,
        onError: () => undefined,
      }),
    );
    return { app, storage };
  }

  const validate = (app: express.Express, path: string, body: unknown, auth = ALL) =>
    request(app)
      .post(`${BASE}/${path}`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(body));

  const params = (resource: unknown, extra: Record<string, string> = {}) => ({
    resourceType: 'Parameters',
    parameter: [
      ...(resource === undefined ? [] : [{ name: 'resource', resource }]),
      ...Object.entries(extra).map(([name, value]) =>
        name === 'profile' ? { name, valueUri: value } : { name, valueCode: value },
      ),
    ],
  });

  describe(`$validate (${store})`, () => {
    it('answers every issue with its expression at full strictness in a lenient project (200)', async () => {
      const { app } = await createApp();
      const res = await validate(app, 'Patient/$validate', {
        resourceType: 'Patient',
        gender: 'mail',
        active: 'yes',
      });
      expect(res.status).toBe(200);
      expect(res.body.resourceType).toBe('OperationOutcome');
      const expressions = errorsOf(res).flatMap((i) => i.expression ?? []);
      expect(expressions).toContain('Patient.gender');
      expect(expressions.some((e) => e.startsWith('Patient.active'))).toBe(true);
      const status = await validate(app, 'Observation/%24validate', {
        resourceType: 'Observation',
        status: 'finalized',
        code: { text: 'x' },
      });
      expect(errorsOf(status)[0]?.expression).toEqual(['Observation.status']);
    });

    it('answers one information issue for a valid resource, and stores nothing', async () => {
      const { app } = await createApp();
      const res = await validate(
        app,
        'Patient/$validate',
        params({ resourceType: 'Patient', gender: 'male' }),
      );
      expect(res.status).toBe(200);
      expect(res.body.issue).toEqual([expect.objectContaining({ severity: 'information' })]);
      const search = await request(app).get(`${BASE}/Patient`).set('Authorization', ALL);
      expect(search.body.total ?? search.body.entry?.length ?? 0).toBe(0);
    });

    it('checks mode=update: an id, the instance id', async () => {
      const { app } = await createApp();
      const noId = await validate(
        app,
        'Patient/$validate',
        params({ resourceType: 'Patient' }, { mode: 'update' }),
      );
      expect(errorsOf(noId)[0]).toMatchObject({ code: 'required', expression: ['Patient.id'] });
      const other = await validate(
        app,
        'Patient/p1/$validate',
        params({ resourceType: 'Patient', id: 'p2' }, { mode: 'update' }),
      );
      expect(errorsOf(other)[0]?.expression).toEqual(['Patient.id']);
      const same = await validate(app, 'Patient/p1/$validate?mode=update', {
        resourceType: 'Patient',
        id: 'p1',
      });
      expect(errorsOf(same)).toEqual([]);
    });

    it('checks mode=delete: the resource must exist and not be managed through SCIM', async () => {
      const { app, storage } = await createApp();
      await storage.createResource('lenient', { resourceType: 'Patient', id: 'p1' });
      await storage.createResource('lenient', {
        resourceType: 'Group',
        id: 'g1',
        type: 'person',
        actual: true,
        meta: { tag: [SCIM_MANAGED_TAG] },
      });
      const existing = await validate(app, 'Patient/p1/$validate', params(undefined, { mode: 'delete' }));
      expect(errorsOf(existing)).toEqual([]);
      const missing = await validate(app, 'Patient/nope/$validate', params(undefined, { mode: 'delete' }));
      expect(errorsOf(missing)[0]?.code).toBe('not-found');
      const scim = await validate(app, 'Group/g1/$validate', params(undefined, { mode: 'delete' }));
      expect(errorsOf(scim)[0]?.code).toBe('conflict');
    });

    it('accepts the R4 base profile of the type, refuses any other (400 not-supported)', async () => {
      const { app } = await createApp();
      const base = await validate(
        app,
        'Patient/$validate',
        params({ resourceType: 'Patient' }, { profile: 'http://hl7.org/fhir/StructureDefinition/Patient' }),
      );
      expect(base.status).toBe(200);
      const other = await validate(
        app,
        'Patient/$validate',
        params(
          { resourceType: 'Patient' },
          { profile: 'http://hl7.org/fhir/us/core/StructureDefinition/us-core-patient' },
        ),
      );
      expect(other.status).toBe(400);
      expect(errorsOf(other)[0]?.code).toBe('not-supported');
      const mode = await validate(
        app,
        'Patient/$validate',
        params({ resourceType: 'Patient' }, { mode: 'merge' }),
      );
      expect(mode.status).toBe(400);
    });

    it('validates the stored resource on GET [type]/[id]/$validate', async () => {
      const { app, storage } = await createApp();
      await storage.createResource('lenient', { resourceType: 'Patient', id: 'bad', gender: 'mail' });
      const res = await request(app).get(`${BASE}/Patient/bad/$validate`).set('Authorization', ALL);
      expect(res.status).toBe(200);
      expect(errorsOf(res)[0]?.expression).toEqual(['Patient.gender']);
      const missing = await request(app).get(`${BASE}/Patient/none/$validate`).set('Authorization', ALL);
      expect(missing.status).toBe(404);
    });

    it('answers a bad body as a write would: not JSON 400/415, not a resource 400, wrong type 400', async () => {
      const { app } = await createApp();
      const notJson = await request(app)
        .post(`${BASE}/Patient/$validate`)
        .set('Authorization', ALL)
        .type(FHIR_JSON)
        .send('{nope');
      expect(notJson.status).toBe(400);
      expect((await validate(app, 'Patient/$validate', [1])).status).toBe(400);
      expect((await validate(app, 'Patient/$validate', { resourceType: 'Observation' })).status).toBe(400);
      expect((await validate(app, 'Nope/$validate', { resourceType: 'Patient' })).status).toBe(404);
      const get = await request(app).get(`${BASE}/Patient/$validate`).set('Authorization', ALL);
      expect(get.status).toBe(405);
    });

    it('needs the right of the write it rehearses, or read for a stored resource (403)', async () => {
      const { app, storage } = await createApp();
      await storage.createResource('lenient', { resourceType: 'Patient', id: 'p1' });
      const reader = token(['system/Patient.read']);
      expect((await validate(app, 'Patient/$validate', { resourceType: 'Patient' }, reader)).status).toBe(
        403,
      );
      const update = await validate(
        app,
        'Patient/p1/$validate?mode=update',
        { resourceType: 'Patient', id: 'p1' },
        reader,
      );
      expect(update.status).toBe(403);
      const remove = await validate(
        app,
        'Patient/p1/$validate',
        params(undefined, { mode: 'delete' }),
        reader,
      );
      expect(remove.status).toBe(403);
      const read = await request(app).get(`${BASE}/Patient/p1/$validate`).set('Authorization', reader);
      expect(read.status).toBe(200);
      const writer = token(['system/Patient.write']);
      expect((await validate(app, 'Patient/$validate', { resourceType: 'Patient' }, writer)).status).toBe(
        200,
      );
      const none = await request(app).get(`${BASE}/Patient/p1/$validate`).set('Authorization', writer);
      expect(none.status).toBe(403);
    });
  });
});
