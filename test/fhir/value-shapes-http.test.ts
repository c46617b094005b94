import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// Issue 43, item 7: a value whose JSON shape does not fit its element (`"name": [true]`) is refused
// in a strict project at every depth, and a FHIRPath Patch never writes a value that does not fit
// the element, in any project.
const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';

async function createApp(): Promise<{ app: express.Express; storage: Storage }> {
  const storage = memoryStorage();
  await storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
  await storage.createProject({ id: 'lenient', name: 'Lenient', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return { app, storage };
}

const auth = (project: string) => testToken({ projectId: project, scopes: ['system/*.*'] });

function post(app: express.Express, resource: Record<string, unknown>, project = 'strict') {
  return request(app)
    .post(`${BASE}/${String(resource.resourceType)}`)
    .set('Authorization', auth(project))
    .type(FHIR_JSON)
    .send(JSON.stringify(resource));
}

function patch(app: express.Express, url: string, body: unknown, project: string, type = FHIR_JSON) {
  return request(app)
    .patch(`${BASE}/${url}`)
    .set('Authorization', auth(project))
    .type(type)
    .send(JSON.stringify(body));
}

/** The `expression`s of an OperationOutcome's error issues. */
const expressions = (res: request.Response): string[] =>
  (res.body.issue as { severity: string; expression?: string[] }[])
    .filter((issue) => issue.severity === 'error')
    .flatMap((issue) => issue.expression ?? []);

const operation = (type: string, path: string, rest: Record<string, unknown>[]) => ({
  name: 'operation',
  part: [{ name: 'type', valueCode: type }, { name: 'path', valueString: path }, ...rest],
});
const parameters = (...operations: unknown[]) => ({ resourceType: 'Parameters', parameter: operations });
const name = (value: string) => ({ name: 'name', valueString: value });

const observation = (extra: Record<string, unknown>) => ({
  resourceType: 'Observation',
  status: 'final',
  code: { text: 'weight' },
  ...extra,
});

describe('strict projects: a value must have the JSON shape of its element, at every depth', () => {
  it('refuses primitives where an element is complex, naming the element (400)', async () => {
    const { app, storage } = await createApp();
    const cases: [Record<string, unknown>, string][] = [
      [{ resourceType: 'Patient', name: [true] }, 'Patient.name[0]'],
      [{ resourceType: 'Patient', name: [5] }, 'Patient.name[0]'],
      [{ resourceType: 'Patient', name: [{ family: 'A' }, 'B'] }, 'Patient.name[1]'],
      [{ resourceType: 'Patient', telecom: [true] }, 'Patient.telecom[0]'],
      [{ resourceType: 'Patient', contact: [{ name: true }] }, 'Patient.contact[0].name'],
      [{ resourceType: 'Patient', identifier: [{ period: 5 }] }, 'Patient.identifier[0].period'],
      [{ resourceType: 'Patient', contained: [5] }, 'Patient.contained[0]'],
      [
        { resourceType: 'Patient', contained: [{ resourceType: 'Patient', name: [true] }] },
        'Patient.contained[0].name[0]',
      ],
      [observation({ valueQuantity: 5 }), 'Observation.valueQuantity'],
      [observation({ code: true }), 'Observation.code'],
      [
        observation({ component: [{ code: { text: 'x' }, valueQuantity: true }] }),
        'Observation.component[0].valueQuantity',
      ],
      [
        { resourceType: 'Patient', extension: [{ url: 'http://example.org/x', valueHumanName: 5 }] },
        'Patient.extension[0].valueHumanName',
      ],
    ];
    for (const [resource, expression] of cases) {
      const res = await post(app, resource);
      expectOperationOutcome(res, 400);
      expect(expressions(res), JSON.stringify(resource)).toContain(expression);
    }
    expect((await storage.searchResources('strict', 'Patient', { count: 10 })).total).toBe(0);
    expect((await storage.searchResources('strict', 'Observation', { count: 10 })).total).toBe(0);
  });

  it("refuses an object or a list where an element is primitive, and a primitive's extension that is not an object", async () => {
    const { app } = await createApp();
    const cases: [Record<string, unknown>, string][] = [
      [{ resourceType: 'Patient', active: {} }, 'Patient.active'],
      [{ resourceType: 'Patient', name: [{ given: [{}] }] }, 'Patient.name[0].given[0]'],
      [{ resourceType: 'Patient', name: [{ given: [['Ann']] }] }, 'Patient.name[0].given[0]'],
      // `@medplum/core` threw on this one (a 500): the shape is the answer.
      [{ resourceType: 'Patient', active: true, _active: true }, 'Patient._active'],
      [
        { resourceType: 'Patient', name: [{ given: ['A', 'B'], _given: [null, 5] }] },
        'Patient.name[0]._given[1]',
      ],
    ];
    for (const [resource, expression] of cases) {
      const res = await post(app, resource);
      expectOperationOutcome(res, 400);
      expect(expressions(res), JSON.stringify(resource)).toContain(expression);
    }
  });

  it('accepts the same elements with their right shapes, and lenient projects keep storing what they are sent', async () => {
    const { app } = await createApp();
    const valid = await post(app, {
      resourceType: 'Patient',
      active: true,
      _active: { id: 'a' },
      name: [{ family: 'A', given: ['B'] }],
      contact: [{ name: { family: 'C' } }],
      identifier: [{ value: '1', period: { start: '2020-01-01' } }],
      contained: [{ resourceType: 'Patient', id: 'c', name: [{ family: 'D' }] }],
    });
    expect(valid.status, JSON.stringify(valid.body)).toBe(201);
    expect((await post(app, observation({ valueQuantity: { value: 5 } }))).status).toBe(201);
    // Not strict: stored as sent (docs/fhir.md, "Validation").
    expect((await post(app, { resourceType: 'Patient', name: [true] }, 'lenient')).status).toBe(201);
  });

  it('names the element inside a transaction entry', async () => {
    const { app } = await createApp();
    const res = await request(app)
      .post(BASE)
      .set('Authorization', auth('strict'))
      .type(FHIR_JSON)
      .send(
        JSON.stringify({
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            {
              resource: { resourceType: 'Patient', name: [true] },
              request: { method: 'POST', url: 'Patient' },
            },
          ],
        }),
      );
    expectOperationOutcome(res, 400);
    expect(expressions(res)).toContain('Bundle.entry[0].resource.name[0]');
  });

  it('refuses a JSON Patch that leaves a primitive in a complex element', async () => {
    const { app } = await createApp();
    const created = await post(app, { resourceType: 'Patient', name: [{ family: 'A' }] });
    expect(created.status).toBe(201);
    const res = await patch(
      app,
      `Patient/${created.body.id as string}`,
      [{ op: 'add', path: '/name/-', value: true }],
      'strict',
      'application/json-patch+json',
    );
    expectOperationOutcome(res, 400);
    expect(expressions(res)).toContain('Patient.name[1]');
  });
});

describe('FHIRPath Patch never writes a value whose type does not fit the element', () => {
  for (const project of ['strict', 'lenient']) {
    it(`refuses add, insert and replace of a misfit value with 422, and writes nothing (${project})`, async () => {
      const { app } = await createApp();
      const patient = await post(
        app,
        { resourceType: 'Patient', active: true, name: [{ family: 'A' }], deceasedBoolean: false },
        project,
      );
      const obs = await post(app, observation({ valueQuantity: { value: 5, unit: 'kg' } }), project);
      expect([patient.status, obs.status]).toEqual([201, 201]);
      const patientUrl = `Patient/${patient.body.id as string}`;
      const obsUrl = `Observation/${obs.body.id as string}`;
      const misfits: [string, unknown][] = [
        [patientUrl, operation('add', 'Patient', [name('name'), { name: 'value', valueBoolean: true }])],
        [patientUrl, operation('add', 'Patient', [name('name'), { name: 'value', valueString: 'Ann' }])],
        [patientUrl, operation('add', 'Patient', [name('telecom'), { name: 'value', valueInteger: 5 }])],
        [
          patientUrl,
          operation('add', 'Patient', [name('name'), { name: 'value', valueQuantity: { value: 5 } }]),
        ],
        [
          patientUrl,
          operation('add', 'Patient', [name('contact'), { name: 'value', valueHumanName: { family: 'B' } }]),
        ],
        [patientUrl, operation('add', 'Patient', [name('gender'), { name: 'value', valueBoolean: true }])],
        [
          patientUrl,
          operation('insert', 'Patient.name', [
            { name: 'index', valueInteger: 0 },
            { name: 'value', valueBoolean: true },
          ]),
        ],
        [patientUrl, operation('replace', 'Patient.name[0]', [{ name: 'value', valueString: 'A' }])],
        [
          patientUrl,
          operation('replace', 'Patient.active', [{ name: 'value', valueHumanName: { family: 'B' } }]),
        ],
        // A choice element takes only its own types.
        [
          patientUrl,
          operation('replace', 'Patient.deceased', [{ name: 'value', valueHumanName: { family: 'B' } }]),
        ],
        [
          patientUrl,
          operation('add', 'Patient', [name('multipleBirth'), { name: 'value', valueCoding: { code: 'x' } }]),
        ],
        [obsUrl, operation('replace', 'Observation.value', [{ name: 'value', valueQuantity: 5 }])],
        // Observation.value[x] has no Age: its key would be `valueAge`.
        [obsUrl, operation('replace', 'Observation.value', [{ name: 'value', valueAge: { value: 3 } }])],
        [obsUrl, operation('add', 'Observation', [name('component'), { name: 'value', valueBoolean: true }])],
      ];
      for (const [url, op] of misfits) {
        const res = await patch(app, url, parameters(op), project);
        expectOperationOutcome(res, 422, 'invalid');
        expect(res.body.issue[0].expression, JSON.stringify(op)).toEqual(['Parameters.parameter[0]']);
      }
      const after = await request(app).get(`${BASE}/${patientUrl}`).set('Authorization', auth(project));
      expect(after.body.meta.versionId).toBe('1');
      expect(after.body.name).toEqual([{ family: 'A' }]);
    });

    it(`still applies values that fit: complex, primitive, a choice element's types (${project})`, async () => {
      const { app } = await createApp();
      const patient = await post(app, { resourceType: 'Patient', name: [{ family: 'A' }] }, project);
      const obs = await post(app, observation({ valueQuantity: { value: 5, unit: 'kg' } }), project);
      const res = await patch(
        app,
        `Patient/${patient.body.id as string}`,
        parameters(
          operation('add', 'Patient', [name('name'), { name: 'value', valueHumanName: { family: 'B' } }]),
          operation('add', 'Patient', [name('gender'), { name: 'value', valueCode: 'female' }]),
          operation('add', 'Patient', [name('deceased'), { name: 'value', valueBoolean: false }]),
          operation('replace', 'Patient.deceased', [{ name: 'value', valueDateTime: '2020-01-01' }]),
          operation('insert', 'Patient.name', [
            { name: 'index', valueInteger: 0 },
            { name: 'value', valueHumanName: { family: 'C' } },
          ]),
          operation('add', 'Patient', [
            name('contact'),
            { name: 'value', part: [{ name: 'name', valueHumanName: { family: 'D' } }] },
          ]),
        ),
        project,
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toMatchObject({
        name: [{ family: 'C' }, { family: 'A' }, { family: 'B' }],
        gender: 'female',
        deceasedDateTime: '2020-01-01',
        contact: [{ name: { family: 'D' } }],
      });
      const value = await patch(
        app,
        `Observation/${obs.body.id as string}`,
        parameters(
          operation('replace', 'Observation.value', [{ name: 'value', valueBoolean: true }]),
          operation('replace', 'Observation.value', [
            { name: 'value', valueQuantity: { value: 3, unit: 'a' } },
          ]),
        ),
        project,
      );
      expect(value.status, JSON.stringify(value.body)).toBe(200);
      expect(value.body.valueQuantity).toEqual({ value: 3, unit: 'a' });
      expect(value.body.valueBoolean).toBeUndefined();
    });
  }
});
