import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { bulkExportRouter } from '../../src/bulk/router.js';
import { fhirPlatform } from '../../src/platform.js';
import { fileStorage } from '../../src/stores.js';
import { memoryStorage } from '../../src/stores.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';
import {
  BASE,
  bulkTestApp,
  download,
  downloadAll,
  exportManifest,
  keysOf,
  sampleResources,
  tempDir,
  token,
  type Manifest,
} from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';

const provenance = (id: string, recorded: string, ...targets: string[]): FhirResource => ({
  resourceType: 'Provenance',
  id,
  target: targets.map((reference) => ({ reference })),
  recorded,
  agent: [{ who: { reference: 'Organization/org1' } }],
});

/** The sample data plus Account (in the compartment), ActivityDefinition (not), Device, Provenance. */
function conformanceResources(): FhirResource[] {
  return [
    ...sampleResources(),
    { resourceType: 'Account', id: 'a1', status: 'active', subject: [{ reference: 'Patient/p1' }] },
    { resourceType: 'ActivityDefinition', id: 'ad1', status: 'active' },
    {
      resourceType: 'Device',
      id: 'd1',
      meta: { tag: [{ system: 'urn:test', code: 'kept' }] },
      manufacturer: 'ACME',
    },
    provenance('prov1', '2024-01-01T00:00:00Z', 'Observation/o1', 'Observation/o2'),
    provenance('prov2', '2024-06-01T00:00:00Z', 'Observation/o1'),
    provenance('prov3', '2024-03-01T00:00:00Z', 'Patient/p1'),
    provenance('prov4', '2024-01-01T00:00:00Z', 'Organization/org1'),
    provenance('prov5', '2024-02-01T00:00:00Z', 'https://elsewhere.example/fhir/Observation/o3/_history/1'),
    provenance('prov6', '2024-09-01T00:00:00Z', 'Observation/o2'),
  ];
}

async function setup(
  makeStorage: () => Promise<Storage> = () => Promise.resolve(fixtureStorage({ dir: tempDir() })),
) {
  const storage = await makeStorage();
  afterTest(() => storage.close());
  return bulkTestApp({ storage, seed: conformanceResources() });
}

type App = Parameters<typeof request>[0];

/** A kick-off by GET (query) or POST (the same parameters as a Parameters body). */
function kick(app: App, auth: string, method: 'get' | 'post', target: string, params: [string, string][]) {
  const query = new URLSearchParams(params).toString();
  const agent = request(app);
  const req =
    method === 'get'
      ? agent.get(`${BASE}${target}${query ? `?${query}` : ''}`)
      : agent
          .post(`${BASE}${target}`)
          .set('Content-Type', 'application/fhir+json')
          .send(
            JSON.stringify({
              resourceType: 'Parameters',
              parameter: params.map(([name, value]) => ({ name, valueString: value })),
            }),
          );
  return req.set('Authorization', auth).set('Accept', 'application/fhir+json').set('Prefer', 'respond-async');
}

function issuesOf(outcomes: FhirResource[]) {
  return outcomes.flatMap(
    (o) => o.issue as { severity: string; code: string; expression: string[]; details: { text: string } }[],
  );
}

async function errorIssues(app: App, auth: string, manifest: Manifest) {
  const outcomes = (
    await Promise.all(manifest.error.map((e) => download(app as express.Express, auth, e.url)))
  ).flat();
  expect(outcomes.every((o) => o.resourceType === 'OperationOutcome')).toBe(true);
  return issuesOf(outcomes);
}

describe('_since in the future', () => {
  it('is 400 with an OperationOutcome, GET and POST, at every level, even under lenient handling', async () => {
    const { app, auth } = await setup();
    for (const target of ['/$export', '/Patient/$export', '/Group/g1/$export']) {
      for (const method of ['get', 'post'] as const) {
        const res = await kick(app, auth, method, target, [['_since', '2057-01-01T00:00:00+05:00']]);
        expect(res.status, `${method} ${target}`).toBe(400);
        expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
        expect(res.body.resourceType).toBe('OperationOutcome');
        expect(res.body.issue[0]).toMatchObject({ code: 'invalid', expression: ['_since'] });
      }
      const lenient = await kick(app, auth, 'get', target, [['_since', '2057-01-01T00:00:00Z']]).set(
        'Prefer',
        'respond-async, handling=lenient',
      );
      expect(lenient.status).toBe(400);
    }
    // Now (within the allowed clock skew) is accepted.
    const now = await kick(app, auth, 'get', '/$export', [['_since', new Date().toISOString()]]);
    expect(now.status).toBe(202);
  });
});

describe('_type at Patient and Group level', () => {
  it('exports the compartment types and reports the others in the error file', async () => {
    const { app, auth } = await setup();
    for (const target of ['/Patient/$export', '/Group/g1/$export']) {
      const m = await exportManifest(app, auth, `${target}?_type=Account&_type=ActivityDefinition`);
      expect(keysOf(await downloadAll(app, auth, m))).toEqual(['Account/a1']);
      expect(m.error).toHaveLength(1);
      const issues = await errorIssues(app, auth, m);
      expect(issues).toHaveLength(1);
      expect(issues[0]).toMatchObject({ severity: 'warning', code: 'not-supported', expression: ['_type'] });
      expect(issues[0]!.details.text).toContain('ActivityDefinition');
      expect(issues[0]!.details.text).not.toContain('Account');
    }
  });

  it('is 400 when none of the types is in the compartment', async () => {
    const { app, auth } = await setup();
    for (const target of ['/Patient/$export', '/Group/g1/$export']) {
      const res = await kick(app, auth, 'get', target, [['_type', 'ActivityDefinition,Organization']]);
      expect(res.status).toBe(400);
      expect(res.body.issue[0]).toMatchObject({ code: 'not-supported', expression: ['_type'] });
    }
  });
});

describe('_elements', () => {
  it('tags SUBSETTED (merged with existing tags) and keeps mandatory elements', async () => {
    // The file store keeps the tags given on write (the fixture store does not).
    const { app, auth } = await setup(() => fileStorage({ dir: tempDir(), durability: 'write' }));
    const m = await exportManifest(
      app,
      auth,
      '/$export?_type=Observation,Patient,Device&_elements=id,Device.meta',
    );
    const byType = await downloadAll(app, auth, m);
    const tags = (r: FhirResource) =>
      ((r.meta as { tag: { system: string; code: string }[] }).tag ?? []).map((t) => `${t.system}|${t.code}`);
    const subsetted = 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue|SUBSETTED';
    // Observation.status and Observation.code are 1..1.
    for (const o of byType.get('Observation')!) {
      expect(Object.keys(o).sort()).toEqual(['code', 'id', 'meta', 'resourceType', 'status']);
      expect(tags(o)).toEqual([subsetted]);
    }
    expect(byType.get('Observation')).toHaveLength(4);
    for (const p of byType.get('Patient')!) {
      expect(Object.keys(p).sort()).toEqual(['id', 'meta', 'resourceType']);
      expect(tags(p)).toEqual([subsetted]);
      expect((p.meta as { versionId?: string }).versionId).toBeTruthy();
    }
    const [device] = byType.get('Device')!;
    expect(Object.keys(device!).sort()).toEqual(['id', 'meta', 'resourceType']);
    expect(tags(device!)).toEqual(['urn:test|kept', subsetted]);
  });
});

const stores: [string, () => Promise<Storage>][] = [
  ['fixture store, worker threads', () => Promise.resolve(fixtureStorage({ dir: tempDir() }))],
  ['memoryStorage (main thread)', () => Promise.resolve(memoryStorage())],
  ['fileStorage (worker threads)', () => fileStorage({ dir: tempDir(), durability: 'write' })],
];

describe.each(stores)('includeAssociatedData, %s', (_name, makeStorage) => {
  const provenanceOf = async (app: express.Express, auth: string, target: string) => {
    const m = await exportManifest(app, auth, target);
    const byType = await downloadAll(app, auth, m);
    return { m, byType, ids: (byType.get('Provenance') ?? []).map((r) => r.id).sort() };
  };

  it('system level: Relevant adds every Provenance targeting an exported resource, Latest the latest per resource', async () => {
    const { app, auth } = await setup(makeStorage);
    const relevant = await provenanceOf(
      app,
      auth,
      '/$export?_type=Observation&includeAssociatedData=RelevantProvenanceResources',
    );
    expect(relevant.ids).toEqual(['prov1', 'prov2', 'prov5', 'prov6']);
    expect(relevant.byType.get('Observation')).toHaveLength(4);
    expect(relevant.m.output.filter((o) => o.type === 'Provenance').reduce((n, o) => n + o.count, 0)).toBe(4);
    // o1: prov2 (later than prov1); o2: prov6 (later than prov1); o3: prov5.
    const latest = await provenanceOf(
      app,
      auth,
      '/$export?_type=Observation&includeAssociatedData=LatestProvenanceResources',
    );
    expect(latest.ids).toEqual(['prov2', 'prov5', 'prov6']);
    // Both: the least restrictive applies.
    const both = await provenanceOf(
      app,
      auth,
      '/$export?_type=Observation&includeAssociatedData=LatestProvenanceResources&includeAssociatedData=RelevantProvenanceResources',
    );
    expect(both.ids).toEqual(['prov1', 'prov2', 'prov5', 'prov6']);
    // No resource of a type with Provenance: nothing added.
    const none = await provenanceOf(
      app,
      auth,
      '/$export?_type=Condition&includeAssociatedData=RelevantProvenanceResources',
    );
    expect(none.ids).toEqual([]);
  });

  it('Group and Patient level: Provenance found by target, each once, joined to the compartment ones', async () => {
    const { app, auth } = await setup(makeStorage);
    // g1: p1 and p3, so o1 and o3.
    const relevant = await provenanceOf(
      app,
      auth,
      '/Group/g1/$export?_type=Observation&includeAssociatedData=RelevantProvenanceResources',
    );
    expect(relevant.ids).toEqual(['prov1', 'prov2', 'prov5']);
    const latest = await provenanceOf(
      app,
      auth,
      '/Group/g1/$export?_type=Observation&includeAssociatedData=LatestProvenanceResources',
    );
    expect(latest.ids).toEqual(['prov2', 'prov5']);
    // Provenance in the compartment (prov3 targets Patient/p1) and associated ones share one output.
    const withType = await provenanceOf(
      app,
      auth,
      '/Group/g1/$export?_type=Patient,Provenance,Observation&includeAssociatedData=RelevantProvenanceResources',
    );
    expect(withType.ids).toEqual(['prov1', 'prov2', 'prov3', 'prov5']);
    expect(withType.m.output.filter((o) => o.type === 'Provenance')).toHaveLength(1);
    const patientLevel = await provenanceOf(
      app,
      auth,
      '/Patient/$export?_type=Condition,Encounter&includeAssociatedData=RelevantProvenanceResources',
    );
    expect(patientLevel.ids).toEqual([]);
    const patients = await provenanceOf(
      app,
      auth,
      '/Patient/$export?_type=Patient&includeAssociatedData=LatestProvenanceResources',
    );
    expect(patients.ids).toEqual(['prov3']);
  });

  it('with _elements, the added Provenance are subsetted too (target, recorded and agent kept)', async () => {
    const { app, auth } = await setup(makeStorage);
    const { byType } = await provenanceOf(
      app,
      auth,
      '/$export?_type=Observation&_elements=id&includeAssociatedData=LatestProvenanceResources',
    );
    for (const p of byType.get('Provenance')!) {
      expect(Object.keys(p).sort()).toEqual(['agent', 'id', 'meta', 'recorded', 'resourceType', 'target']);
      expect((p.meta as { tag: { code: string }[] }).tag.map((t) => t.code)).toEqual(['SUBSETTED']);
    }
  });
});

describe('includeAssociatedData values', () => {
  it('an unknown value is 400, or under lenient handling an issue in the error file', async () => {
    const { app, auth } = await setup();
    const strict = await kick(app, auth, 'get', '/$export', [
      ['includeAssociatedData', 'RelevantProvenanceResources,Nope'],
    ]);
    expect(strict.status).toBe(400);
    expect(strict.body.issue[0]).toMatchObject({
      code: 'not-supported',
      expression: ['includeAssociatedData'],
    });
    const m = await exportManifest(
      app,
      auth,
      '/$export?_type=Observation&includeAssociatedData=Nope,RelevantProvenanceResources',
      { prefer: 'respond-async, handling=lenient' },
    );
    const issues = await errorIssues(app, auth, m);
    expect(issues.map((i) => [i.code, i.expression[0]])).toEqual([
      ['not-supported', 'includeAssociatedData'],
    ]);
    const provenance = (await downloadAll(app, auth, m)).get('Provenance') ?? [];
    expect(provenance.map((p) => p.id).sort()).toEqual(['prov1', 'prov2', 'prov5', 'prov6']);
  });

  it('needs a token covering Provenance', async () => {
    const { app } = await setup();
    const auth = token('proj-a', { scopes: ['system/Observation.read'] });
    const res = await kick(app, auth, 'get', '/$export', [
      ['_type', 'Observation'],
      ['includeAssociatedData', 'LatestProvenanceResources'],
    ]);
    expect(res.status).toBe(403);
    expect(res.body.issue[0]).toMatchObject({ code: 'forbidden', expression: ['includeAssociatedData'] });
  });
});

describe('requireAsyncHeaders', () => {
  async function appWith(requireAsyncHeaders?: boolean) {
    const { app } = await bulkTestApp(requireAsyncHeaders === undefined ? {} : { requireAsyncHeaders });
    return app;
  }

  it('on: a kick-off without Prefer: respond-async or without Accept is 400; with both 202', async () => {
    const app = await appWith(true);
    const auth = token('proj-a');
    const noPrefer = await request(app)
      .get(`${BASE}/$export`)
      .set('Authorization', auth)
      .set('Accept', 'application/fhir+json');
    expect(noPrefer.status).toBe(400);
    expect(noPrefer.headers['content-type']).toMatch(/^application\/fhir\+json/);
    expect(noPrefer.body.issue[0]).toMatchObject({ code: 'required', expression: ['Prefer'] });
    const noAccept = await request(app)
      .post(`${BASE}/Patient/$export`)
      .set('Authorization', auth)
      .set('Prefer', 'respond-async');
    expect(noAccept.status).toBe(400);
    expect(noAccept.body.issue[0]).toMatchObject({ code: 'required', expression: ['Accept'] });
    const both = await request(app)
      .get(`${BASE}/Group/g1/$export`)
      .set('Authorization', auth)
      .set('Accept', 'application/fhir+json')
      .set('Prefer', 'respond-async');
    expect(both.status).toBe(202);
  });

  it('off (the default): a kick-off without either header is accepted', async () => {
    for (const option of [undefined, false]) {
      const app = await appWith(option);
      const res = await request(app).get(`${BASE}/$export`).set('Authorization', token('proj-a'));
      expect(res.status).toBe(202);
    }
  });

  it('is validated when the router is created, and passed through fhirPlatform', async () => {
    const storage = memoryStorage();
    expect(() =>
      bulkExportRouter({
        storage,
        authenticate: testAuthenticate,
        requireAsyncHeaders: 'yes' as unknown as boolean,
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }));
    const platform = fhirPlatform({
      storage,
      authenticate: testAuthenticate,
      exportDir: tempDir(),
      bulk: { requireAsyncHeaders: true },
    });
    afterTest(() => platform.close());
    const app = express().use(platform.router);
    const res = await request(app)
      .get(`${BASE}/$export`)
      .set('Authorization', token('proj-a'))
      .set('Accept', 'application/fhir+json');
    expect(res.status).toBe(400);
    expect(res.body.issue[0]).toMatchObject({ code: 'required', expression: ['Prefer'] });
  });
});
