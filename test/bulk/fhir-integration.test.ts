import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { bulkExportCapability } from '../../src/bulk/capability.js';
import { bulkExportRouter } from '../../src/bulk/router.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { BASE, exportManifest, pathOf, seed, tempDir, token } from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';

describe('next to the FHIR router', () => {
  it('shares the FHIR base and contributes to the CapabilityStatement', async () => {
    const storage = fixtureStorage({ dir: tempDir() });
    await seed(storage);
    const bulk = bulkExportRouter({
      storage,
      authenticate: testAuthenticate,
      exportDir: tempDir('bulk-out-'),
      onError: () => undefined,
    });
    afterTest(() => bulk.close());
    const app = express();
    app.use(BASE, bulk);
    app.use(
      BASE,
      fhirRouter({ storage, authenticate: testAuthenticate, capabilities: [bulkExportCapability()] }),
    );

    const metadata = await request(app).get(`${BASE}/metadata`);
    expect(metadata.status).toBe(200);
    const cs = JSON.parse(metadata.text) as {
      instantiates?: string[];
      rest: {
        operation?: { name: string; definition: string }[];
        resource: { type: string; operation?: { name: string; definition: string }[] }[];
      }[];
    };
    expect(cs.instantiates).toContain('http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data');
    const rest = cs.rest[0]!;
    expect(rest.operation?.map((o) => o.name)).toContain('export');
    // Named as invoked (`Patient/$export`), told apart by their definitions: this server's own,
    // based on the IG's.
    const own = (id: string) =>
      expect.stringMatching(new RegExp(`^http://127\\.0\\.0\\.1:\\d+${BASE}/OperationDefinition/${id}$`));
    expect(rest.resource.find((r) => r.type === 'Patient')?.operation).toContainEqual({
      name: 'export',
      definition: own('bulk-patient-export'),
    });
    expect(rest.resource.find((r) => r.type === 'Group')?.operation).toContainEqual({
      name: 'export',
      definition: own('bulk-group-export'),
    });
    // Each definition is served, names every parameter (Bulk Data 3.0.0's too) and its IG base.
    const definitions = [
      ...(rest.operation ?? []),
      ...rest.resource.flatMap((r) => r.operation ?? []),
    ].filter((o) => o.name === 'export') as { definition: string }[];
    expect(definitions).toHaveLength(3);
    for (const { definition } of definitions) {
      const res = await request(app).get(pathOf(definition));
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
      const od = JSON.parse(res.text) as {
        resourceType: string;
        url: string;
        base: string;
        parameter: { name: string }[];
      };
      expect(od).toMatchObject({ resourceType: 'OperationDefinition', code: 'export' });
      // supertest connects from a new port each time: the URLs are compared by path.
      expect(pathOf(od.url)).toBe(pathOf(definition));
      expect(od.base).toMatch(/^http:\/\/hl7\.org\/fhir\/uv\/bulkdata\/OperationDefinition\//);
      expect(od.parameter.map((p) => p.name)).toEqual(
        expect.arrayContaining([
          '_since',
          '_until',
          '_type',
          '_typeFilter',
          'allowPartialManifests',
          'organizeOutputBy',
        ]),
      );
    }
    // Other OperationDefinitions are the FHIR router's to answer.
    expect((await request(app).get(`${BASE}/OperationDefinition/other`)).status).not.toBe(200);

    const manifest = await exportManifest(app, token('proj-a'), '/Group/g1/$export?_type=Patient');
    expect(manifest.output[0]!.count).toBe(2);
  });
});
