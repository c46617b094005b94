import { describe, expect, it } from 'vitest';
import request from 'supertest';
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
} from '../helpers/bulk-export.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

async function expect400(
  app: Parameters<typeof request>[0],
  auth: string,
  target: string,
  headers: Record<string, string> = {},
) {
  const res = await request(app).get(`${BASE}${target}`).set('Authorization', auth).set(headers);
  expectOperationOutcome(res, 400);
  return res;
}

describe('kick-off parameters', () => {
  it('_outputFormat: the three NDJSON spellings, anything else 400', async () => {
    const { app, auth } = await bulkTestApp();
    for (const format of ['application/fhir+ndjson', 'application/ndjson', 'ndjson']) {
      const m = await exportManifest(
        app,
        auth,
        `/$export?_type=Organization&_outputFormat=${encodeURIComponent(format)}`,
      );
      expect(m.output).toHaveLength(1);
    }
    await expect400(app, auth, '/$export?_outputFormat=text/csv');
  });

  it('_type: comma lists and repeats merge; unknown types 400', async () => {
    const { app, auth } = await bulkTestApp();
    const m = await exportManifest(app, auth, '/$export?_type=Patient,Condition&_type=Organization');
    expect(m.output.map((o) => o.type).sort()).toEqual(['Condition', 'Organization', 'Patient']);
    await expect400(app, auth, '/$export?_type=Patient,NotAType');
    await expect400(app, auth, '/$export?_type=patient');
    // At Patient level a type outside the compartment is refused.
    await expect400(app, auth, '/Patient/$export?_type=Organization');
  });

  it('_since: only resources changed after it, deletions as transaction Bundles', async () => {
    const { storage, app, auth } = await bulkTestApp();
    // The fixture clock stamps writes strictly after its last value, and _since exports what
    // changed strictly after it.
    const since = new Date(storage.state.clock).toISOString();
    await storage.writeResources('proj-a', [
      {
        op: 'update',
        resource: {
          resourceType: 'Observation',
          id: 'o1',
          status: 'amended',
          code: { text: 'a' },
          subject: { reference: 'Patient/p1' },
        },
      },
      { op: 'delete', resourceType: 'Observation', id: 'o2' },
    ]);
    const m = await exportManifest(
      app,
      auth,
      `/$export?_type=Observation&_since=${encodeURIComponent(since)}`,
    );
    const byType = await downloadAll(app, auth, m);
    expect(keysOf(byType)).toEqual(['Observation/o1']);
    expect(m.deleted).toHaveLength(1);
    const bundles = await download(app, auth, m.deleted![0]!.url);
    expect(bundles).toHaveLength(1);
    expect(bundles[0]).toMatchObject({
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [{ request: { method: 'DELETE', url: 'Observation/o2' } }],
    });
    // An unencoded "+" offset arrives as a space and is still understood.
    const offset = since.replace('Z', '+00:00');
    const m2 = await exportManifest(app, auth, `/$export?_type=Observation&_since=${offset}`);
    expect(m2.output.reduce((n, o) => n + o.count, 0)).toBe(1);
    await expect400(app, auth, '/$export?_since=yesterday');
    await expect400(app, auth, '/$export?_since=2020-01-01');
  });

  it('_since at Group level: members added after it get their whole compartment', async () => {
    const { storage, app, auth } = await bulkTestApp();
    const since = new Date(storage.state.clock).toISOString();
    await storage.writeResources('proj-a', [
      {
        op: 'update',
        resource: {
          resourceType: 'Group',
          id: 'g3',
          type: 'person',
          actual: true,
          member: [
            { entity: { reference: 'Patient/p1' }, period: { start: '2000-01-01T00:00:00Z' } },
            {
              entity: { reference: 'Patient/p2' },
              period: { start: new Date(Date.now() + 1000).toISOString() },
            },
          ],
        },
      },
      {
        op: 'update',
        resource: {
          resourceType: 'Condition',
          id: 'c1',
          subject: { reference: 'Patient/p1' },
          note: [{ text: 'x' }],
        },
      },
    ]);
    const m = await exportManifest(
      app,
      auth,
      `/Group/g3/$export?_type=Patient,Observation,Condition,Encounter&_since=${encodeURIComponent(since)}`,
    );
    const keys = keysOf(await downloadAll(app, auth, m));
    // p1: only what changed after _since; p2 (new member): everything.
    expect(keys).toEqual(['Condition/c1', 'Encounter/e1', 'Observation/o2', 'Patient/p2']);
  });

  it('_elements keeps the listed elements and tags SUBSETTED', async () => {
    const { app, auth } = await bulkTestApp();
    const m = await exportManifest(
      app,
      auth,
      '/$export?_type=Patient,Observation&_elements=Patient.name,status',
    );
    const byType = await downloadAll(app, auth, m);
    for (const p of byType.get('Patient')!) {
      expect(Object.keys(p).sort()).toEqual(['id', 'meta', 'name', 'resourceType']);
      expect((p.meta as { tag: { code: string }[] }).tag.map((t) => t.code)).toContain('SUBSETTED');
    }
    // Observation.code is mandatory (1..1): kept although not listed.
    for (const o of byType.get('Observation')!)
      expect(Object.keys(o).sort()).toEqual(['code', 'id', 'meta', 'resourceType', 'status']);
    await expect400(app, auth, '/$export?_elements=Foo.bar');
    await expect400(app, auth, '/$export?_elements=name.given');
  });

  it('_typeFilter: filters its type only; several filters are ORed', async () => {
    const { app, auth } = await bulkTestApp();
    const filters = [
      `Observation?${new URLSearchParams({ subject: 'Patient/p1' }).toString()}`,
      `Observation?_id=o3`,
    ];
    const m = await exportManifest(
      app,
      auth,
      `/$export?_type=Observation,Condition&_typeFilter=${filters.map(encodeURIComponent).join(',')}`,
    );
    expect(keysOf(await downloadAll(app, auth, m))).toEqual([
      'Condition/c1',
      'Observation/o1',
      'Observation/o3',
    ]);
  });

  it('_typeFilter: every search parameter of the type (Observation?code=1234, ?category=laboratory)', async () => {
    const category = (code: string) => [
      { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/observation-category', code }] },
    ];
    const loinc = (code: string) => ({ coding: [{ system: 'http://loinc.org', code }] });
    const { app, auth } = await bulkTestApp({
      seed: [
        ...sampleResources(),
        {
          resourceType: 'Observation',
          id: 'lab1',
          status: 'final',
          category: category('laboratory'),
          code: loinc('1234'),
          subject: { reference: 'Patient/p1' },
          effectiveDateTime: '2021-05-01',
        },
        {
          resourceType: 'Observation',
          id: 'lab2',
          status: 'final',
          category: category('laboratory'),
          code: loinc('5678'),
          subject: { reference: 'Patient/p2' },
          effectiveDateTime: '2019-05-01',
        },
        {
          resourceType: 'Observation',
          id: 'vs1',
          status: 'final',
          category: category('vital-signs'),
          code: loinc('1234'),
          subject: { reference: 'Patient/p3' },
        },
      ],
    });
    const exported = async (target: string, ...filters: string[]) =>
      keysOf(
        await downloadAll(
          app,
          auth,
          await exportManifest(
            app,
            auth,
            `${target}${target.includes('?') ? '&' : '?'}${filters
              .map((f) => `_typeFilter=${encodeURIComponent(f)}`)
              .join('&')}`,
          ),
        ),
      );
    // The CLI's help example, and a category.
    expect(await exported('/$export?_type=Observation', 'Observation?code=1234')).toEqual([
      'Observation/lab1',
      'Observation/vs1',
    ]);
    expect(await exported('/$export?_type=Observation,Condition', 'Observation?category=laboratory')).toEqual(
      ['Condition/c1', 'Observation/lab1', 'Observation/lab2'],
    );
    // Two filters (repeated _typeFilter): ORed; two parameters of one filter: ANDed.
    expect(
      await exported(
        '/$export?_type=Observation',
        'Observation?code=1234',
        'Observation?category=laboratory',
      ),
    ).toEqual(['Observation/lab1', 'Observation/lab2', 'Observation/vs1']);
    expect(
      await exported(
        '/$export?_type=Observation',
        `Observation?${new URLSearchParams({ code: 'http://loinc.org|1234', category: 'laboratory' }).toString()}`,
      ),
    ).toEqual(['Observation/lab1']);
    // Prefixes and modifiers; a comma in the query (encoded inside the filter) ORs values.
    expect(
      await exported(
        '/$export?_type=Observation,Patient',
        `Observation?${new URLSearchParams({ date: 'ge2020', 'code:not': '5678' }).toString()}`,
        `Patient?${new URLSearchParams({ name: 'p2,p4' }).toString()}`,
      ),
    ).toEqual(['Observation/lab1', 'Patient/p2', 'Patient/p4']);
    // Within a Group's compartments (members p1 and p3).
    expect(await exported('/Group/g1/$export?_type=Observation', 'Observation?category=laboratory')).toEqual([
      'Observation/lab1',
    ]);
  });

  it('_typeFilter: result parameters, unknown parameters and types answer 400 naming _typeFilter', async () => {
    const { app, auth } = await bulkTestApp();
    for (const filter of [
      'Observation?_sort=_id',
      'Observation?_include=Observation:subject',
      'Observation?_count=10',
      'Observation?nope=1',
      'Observation?subject:Patient.nope=1',
      'Patient?_has:Observation:nope:code=1234',
      'Observation?code:in=http://x',
      'Observation?date=tomorrow',
      'Nope?_id=1',
    ]) {
      const res = await expect400(app, auth, `/$export?_typeFilter=${encodeURIComponent(filter)}`);
      expect(res.body.issue[0].expression, filter).toEqual(['_typeFilter']);
    }
  });

  it('patient: POST only, Patient and Group level; unknown ones are reported, not refused', async () => {
    const { app, auth } = await bulkTestApp();
    await expect400(app, auth, '/Patient/$export?patient=Patient/p1');
    const post = (target: string, refs: string[], prefer = 'respond-async') =>
      request(app)
        .post(`${BASE}${target}`)
        .set('Authorization', auth)
        .set('Prefer', prefer)
        .set('Content-Type', 'application/fhir+json')
        .send(
          JSON.stringify({
            resourceType: 'Parameters',
            parameter: refs.map((r) => ({ name: 'patient', valueReference: { reference: r } })),
          }),
        );
    expect((await post('/$export', ['Patient/p1'])).status).toBe(400);
    // A patient that does not exist (Patient level) or is not a member (Group level): the export
    // runs for the others and the error file names it.
    const patients = (refs: string[]) => ({
      method: 'post' as const,
      body: {
        resourceType: 'Parameters',
        parameter: refs.map((r) => ({ name: 'patient', valueReference: { reference: r } })),
      },
    });
    for (const [target, refs, unknown, exported] of [
      ['/Patient/$export?_type=Patient', ['Patient/nobody', 'Patient/p2'], 'Patient/nobody', ['Patient/p2']],
      ['/Group/g1/$export?_type=Patient', ['Patient/p2', 'Patient/p3'], 'Patient/p2', ['Patient/p3']],
      ['/Patient/$export?_type=Patient', ['Patient/nobody'], 'Patient/nobody', []],
    ] as const) {
      const m = await exportManifest(app, auth, target, patients([...refs]));
      expect(keysOf(await downloadAll(app, auth, m))).toEqual(exported);
      expect(m.error).toHaveLength(1);
      const outcomes = await download(app, auth, m.error[0]!.url);
      expect(outcomes).toHaveLength(1);
      const issue = (
        outcomes[0]!.issue as { code: string; expression: string[]; details: { text: string } }[]
      )[0]!;
      expect(issue.code).toBe('not-found');
      expect(issue.expression).toEqual(['patient']);
      expect(issue.details.text).toContain(unknown);
    }
    const m = await exportManifest(app, auth, '/Group/g1/$export?_type=Patient,Observation', {
      method: 'post',
      body: {
        resourceType: 'Parameters',
        parameter: [{ name: 'patient', valueReference: { reference: 'Patient/p3' } }],
      },
    });
    expect(keysOf(await downloadAll(app, auth, m))).toEqual(['Observation/o3', 'Patient/p3']);
    // Malformed bodies.
    const bad = await request(app)
      .post(`${BASE}/$export`)
      .set('Authorization', auth)
      .set('Content-Type', 'application/fhir+json')
      .send('{"resourceType":"Patient"}');
    expect(bad.status).toBe(400);
    const notJson = await request(app)
      .post(`${BASE}/$export`)
      .set('Authorization', auth)
      .set('Content-Type', 'application/fhir+json')
      .send('{');
    expect(notJson.status).toBe(400);
    const wrongType = await request(app)
      .post(`${BASE}/$export`)
      .set('Authorization', auth)
      .set('Content-Type', 'text/plain')
      .send('x');
    expect(wrongType.status).toBe(415);
  });

  it('includeAssociatedData: unknown values 400', async () => {
    const { app, auth } = await bulkTestApp();
    await expect400(app, auth, '/$export?includeAssociatedData=LatestProvenanceResources,Nope');
    await expect400(app, auth, '/$export?includeAssociatedData=_custom');
  });

  it('unknown parameters and Prefer handling values 400', async () => {
    const { app, auth } = await bulkTestApp();
    await expect400(app, auth, '/$export?_foo=1');
    await expect400(app, auth, '/$export', { Prefer: 'respond-async, handling=sloppy' });
  });

  it('handling=lenient: problems are ignored and reported in the error files', async () => {
    const { app, auth } = await bulkTestApp();
    const m = await exportManifest(
      app,
      auth,
      '/$export?_type=Patient,NotAType&_outputFormat=csv&includeAssociatedData=NotAValue&_typeFilter=Observation%3Fnope%3D1&_foo=1',
      { prefer: 'respond-async, handling=lenient' },
    );
    expect(m.output.map((o) => o.type)).toEqual(['Patient']);
    expect(m.error).toHaveLength(1);
    expect(m.error[0]!.type).toBe('OperationOutcome');
    expect(m.error[0]!.count).toBe(5);
    const outcomes = await download(app, auth, m.error[0]!.url);
    expect(outcomes.every((o) => o.resourceType === 'OperationOutcome')).toBe(true);
    const expressions = outcomes.map((o) => (o.issue as { expression: string[] }[])[0]!.expression[0]).sort();
    expect(expressions).toEqual(['_foo', '_outputFormat', '_type', '_typeFilter', 'includeAssociatedData']);
  });

  it('an unknown Group is 404, an invalid Group id too', async () => {
    const { app, auth } = await bulkTestApp();
    const res = await request(app).get(`${BASE}/Group/nope/$export`).set('Authorization', auth);
    expect(res.status).toBe(404);
    expect(res.body.resourceType).toBe('OperationOutcome');
    expect(
      (
        await request(app)
          .get(`${BASE}/Group/${'x'.repeat(70)}/$export`)
          .set('Authorization', auth)
      ).status,
    ).toBe(404);
  });

  it('429 with Retry-After when too many exports run for the project', async () => {
    const { app, auth, storage } = await bulkTestApp({
      storage: fixtureStorage({ dir: tempDir(), delayMs: 200 }),
      maxRunningExports: 1,
    });
    const first = await request(app).get(`${BASE}/$export`).set('Authorization', auth);
    expect(first.status).toBe(202);
    const second = await request(app).get(`${BASE}/$export`).set('Authorization', auth);
    expect(second.status).toBe(429);
    expect(second.headers['retry-after']).toMatch(/^\d+$/);
    expect(second.body.issue[0].code).toBe('throttled');
    // Concurrent kick-offs cannot both pass the limit.
    await storage.writeResources('proj-c', [
      { op: 'update', resource: { resourceType: 'Patient', id: 'c1' } },
    ]);
    const other2 = token('proj-c');
    const both = await Promise.all(
      [1, 2, 3].map(() => request(app).get(`${BASE}/$export`).set('Authorization', other2)),
    );
    expect(both.map((r) => r.status).sort()).toEqual([202, 429, 429]);
    // Another project is not throttled.
    const other = await request(app).get(`${BASE}/$export`).set('Authorization', token('proj-b'));
    expect(other.status).toBe(202);
  });
});
