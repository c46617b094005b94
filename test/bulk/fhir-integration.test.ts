import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { bulkExportCapability } from '../../src/bulk/capability.js';
import { bulkExportRouter } from '../../src/bulk/router.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { BASE, exportManifest, seed, tempDir, token } from '../helpers/bulk-export.js';
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
        operation?: { name: string }[];
        resource: { type: string; operation?: { name: string; definition: string }[] }[];
      }[];
    };
    expect(cs.instantiates).toContain('http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data');
    const rest = cs.rest[0]!;
    expect(rest.operation?.map((o) => o.name)).toContain('export');
    // Named as invoked (`Patient/$export`), told apart by their definitions.
    expect(rest.resource.find((r) => r.type === 'Patient')?.operation).toContainEqual({
      name: 'export',
      definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/patient-export',
    });
    expect(rest.resource.find((r) => r.type === 'Group')?.operation).toContainEqual({
      name: 'export',
      definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/group-export',
    });

    const manifest = await exportManifest(app, token('proj-a'), '/Group/g1/$export?_type=Patient');
    expect(manifest.output[0]!.count).toBe(2);
  });
});
