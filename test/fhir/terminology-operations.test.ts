import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { r4Terminology } from '../../src/terminology/r4-terminology.js';
import type { Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// The terminology operations over HTTP, on each store: R4 value sets, a project's own code system
// and value set, isolation between projects, scopes, and bad inputs.
const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
const other = testToken({ projectId: 'p2', scopes: ['system/*.*'] });
const GENDER = 'http://hl7.org/fhir/ValueSet/administrative-gender';
const COLORS = 'http://example.org/fhir/CodeSystem/colors';
const REDS = 'http://example.org/fhir/ValueSet/reds';

type Json = Record<string, unknown>;
interface Parameter {
  name: string;
  valueBoolean?: boolean;
  valueString?: string;
  valueCode?: string;
  part?: Parameter[];
}
interface Expanded {
  resourceType: string;
  expansion: { total?: number; offset?: number; contains?: { system: string; code: string }[] };
}

/** Colors: `color` > `red` > `crimson`, `color` > `blue`. */
const colors = {
  resourceType: 'CodeSystem',
  id: 'colors',
  url: COLORS,
  version: '1',
  name: 'Colors',
  status: 'active',
  content: 'complete',
  hierarchyMeaning: 'is-a',
  concept: [
    {
      code: 'color',
      display: 'Color',
      concept: [
        { code: 'red', display: 'Red', concept: [{ code: 'crimson', display: 'Crimson' }] },
        { code: 'blue', display: 'Blue' },
      ],
    },
  ],
};

/** The reds: `red` and what it subsumes. */
const reds = {
  resourceType: 'ValueSet',
  id: 'reds',
  url: REDS,
  status: 'active',
  compose: { include: [{ system: COLORS, filter: [{ property: 'concept', op: 'is-a', value: 'red' }] }] },
};

async function appOver(
  open: () => Storage | Promise<Storage>,
  options: Partial<FhirRouterOptions> = {},
): Promise<express.Express> {
  const storage = await open();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
  afterTest(() => storage.close());
  const app = express();
  app.use(
    BASE,
    fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  for (const resource of [colors, reds]) {
    const res = await request(app)
      .put(`${BASE}/${resource.resourceType}/${resource.id}`)
      .set('Authorization', auth)
      .type(FHIR_JSON)
      .send(JSON.stringify(resource));
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  }
  return app;
}

const get = (app: express.Express, path: string, token = auth) =>
  request(app).get(`${BASE}/${path}`).set('Authorization', token);

const post = (app: express.Express, path: string, body: unknown, token = auth) =>
  request(app).post(`${BASE}/${path}`).set('Authorization', token).type(FHIR_JSON).send(JSON.stringify(body));

const parameters = (...parameter: Json[]) => ({ resourceType: 'Parameters', parameter });

function codesOf(res: request.Response): string[] {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const body = res.body as Expanded;
  expect(body.resourceType).toBe('ValueSet');
  return (body.expansion.contains ?? []).map((c) => c.code);
}

function valueOf(res: request.Response, name: string): Parameter | undefined {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.resourceType).toBe('Parameters');
  return (res.body.parameter as Parameter[]).find((p) => p.name === name);
}

function propertiesOf(res: request.Response, code: string): string[] {
  return (res.body.parameter as Parameter[])
    .filter((p) => p.name === 'property' && p.part?.[0]?.valueCode === code)
    .map((p) => p.part?.[1]?.valueCode ?? '');
}

function expectOutcome(res: request.Response, status: number, code: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.resourceType).toBe('OperationOutcome');
  expect(res.body.issue[0].code).toBe(code);
}

function suite(store: string, open: () => Storage | Promise<Storage>): void {
  describe(`terminology operations (${store})`, () => {
    it('expands an R4 value set: whole, paged, filtered, and by POST', async () => {
      const app = await appOver(open);
      const whole = await get(app, `ValueSet/$expand?url=${GENDER}`);
      expect(codesOf(whole).sort()).toEqual(['female', 'male', 'other', 'unknown']);
      const page = await get(app, `ValueSet/$expand?url=${GENDER}&count=2&offset=1`);
      expect(codesOf(page)).toHaveLength(2);
      expect((page.body as Expanded).expansion).toMatchObject({ total: 4, offset: 1 });
      expect(codesOf(page)).toEqual(codesOf(whole).slice(1, 3));
      expect(codesOf(await get(app, `ValueSet/%24expand?url=${GENDER}&filter=unk`))).toEqual(['unknown']);
      const posted = await post(app, 'ValueSet/$expand', parameters({ name: 'url', valueUri: GENDER }));
      expect(codesOf(posted).sort()).toEqual(['female', 'male', 'other', 'unknown']);
    });

    it("expands a project's value set by url, by id, and given whole", async () => {
      const app = await appOver(open);
      expect(codesOf(await get(app, `ValueSet/$expand?url=${REDS}`)).sort()).toEqual(['crimson', 'red']);
      expect(codesOf(await get(app, 'ValueSet/reds/$expand')).sort()).toEqual(['crimson', 'red']);
      const given = {
        resourceType: 'ValueSet',
        status: 'active',
        compose: { include: [{ system: COLORS, concept: [{ code: 'blue' }] }] },
      };
      const res = await post(app, 'ValueSet/$expand', parameters({ name: 'valueSet', resource: given }));
      expect(codesOf(res)).toEqual(['blue']);
    });

    it("looks up a project's code: display, parent and children", async () => {
      const app = await appOver(open);
      const red = await get(app, `CodeSystem/$lookup?system=${COLORS}&code=red`);
      expect(valueOf(red, 'display')?.valueString).toBe('Red');
      expect(propertiesOf(red, 'parent')).toEqual(['color']);
      expect(propertiesOf(red, 'child')).toEqual(['crimson']);
      const crimson = await post(
        app,
        'CodeSystem/$lookup',
        parameters({ name: 'coding', valueCoding: { system: COLORS, code: 'crimson' } }),
      );
      expect(valueOf(crimson, 'display')?.valueString).toBe('Crimson');
      expect(propertiesOf(crimson, 'parent')).toEqual(['red']);
      const gender = await get(
        app,
        'CodeSystem/$lookup?system=http://hl7.org/fhir/administrative-gender&code=male',
      );
      expect(valueOf(gender, 'display')?.valueString).toBe('Male');
    });

    it('validates codes against a value set and a code system, true and false', async () => {
      const app = await appOver(open);
      const result = (res: request.Response) => valueOf(res, 'result')?.valueBoolean;
      expect(
        result(await get(app, `ValueSet/$validate-code?url=${REDS}&system=${COLORS}&code=crimson`)),
      ).toBe(true);
      const blue = await get(app, `ValueSet/$validate-code?url=${REDS}&system=${COLORS}&code=blue`);
      expect(result(blue)).toBe(false);
      expect(valueOf(blue, 'message')?.valueString).toBeTruthy();
      expect(result(await get(app, `ValueSet/reds/$validate-code?system=${COLORS}&code=red`))).toBe(true);
      const concept = parameters(
        { name: 'url', valueUri: GENDER },
        {
          name: 'codeableConcept',
          valueCodeableConcept: {
            coding: [{ system: 'http://hl7.org/fhir/administrative-gender', code: 'female' }],
          },
        },
      );
      expect(result(await post(app, 'ValueSet/$validate-code', concept))).toBe(true);
      expect(result(await get(app, `CodeSystem/$validate-code?url=${COLORS}&code=blue`))).toBe(true);
      expect(result(await get(app, `CodeSystem/$validate-code?url=${COLORS}&code=purple`))).toBe(false);
      expect(result(await get(app, 'CodeSystem/colors/$validate-code?code=crimson'))).toBe(true);
    });

    it('answers subsumption both ways, and not-subsumed', async () => {
      const app = await appOver(open);
      const outcome = async (query: string) =>
        valueOf(await get(app, `CodeSystem/$subsumes?system=${COLORS}&${query}`), 'outcome')?.valueCode;
      expect(await outcome('codeA=red&codeB=crimson')).toBe('subsumes');
      expect(await outcome('codeA=crimson&codeB=color')).toBe('subsumed-by');
      expect(await outcome('codeA=red&codeB=blue')).toBe('not-subsumed');
      expect(await outcome('codeA=red&codeB=red')).toBe('equivalent');
      const codings = parameters(
        { name: 'codingA', valueCoding: { system: COLORS, code: 'color' } },
        { name: 'codingB', valueCoding: { system: COLORS, code: 'blue' } },
      );
      expect(valueOf(await post(app, 'CodeSystem/$subsumes', codings), 'outcome')?.valueCode).toBe(
        'subsumes',
      );
      const instance = await get(app, 'CodeSystem/colors/$subsumes?codeA=blue&codeB=color');
      expect(valueOf(instance, 'outcome')?.valueCode).toBe('subsumed-by');
    });

    it("keeps a project's resources to that project: 404 as unknown", async () => {
      const app = await appOver(open);
      expectOutcome(await get(app, `ValueSet/$expand?url=${REDS}`, other), 404, 'not-found');
      expectOutcome(await get(app, 'ValueSet/reds/$expand', other), 404, 'not-found');
      expectOutcome(await get(app, `CodeSystem/$lookup?system=${COLORS}&code=red`, other), 404, 'not-found');
      expectOutcome(await get(app, 'CodeSystem/colors/$validate-code?code=red', other), 404, 'not-found');
      // The R4 definitions are everyone's.
      expect(codesOf(await get(app, `ValueSet/$expand?url=${GENDER}`, other))).toHaveLength(4);
    });

    it('needs search on the type at the type level and read at the instance level', async () => {
      const app = await appOver(open);
      const observations = testToken({ projectId: 'p1', scopes: ['system/Observation.rs'] });
      expectOutcome(await get(app, `ValueSet/$expand?url=${GENDER}`, observations), 403, 'forbidden');
      // The right comes first: bad parameters from a caller without it are a 403 too.
      expectOutcome(await get(app, 'ValueSet/$expand?count=-1&nope=1', observations), 403, 'forbidden');
      expectOutcome(await get(app, 'ValueSet/reds/$expand', observations), 403, 'forbidden');
      expectOutcome(
        await get(app, `CodeSystem/$lookup?system=${COLORS}&code=red`, observations),
        403,
        'forbidden',
      );
      expectOutcome(
        await get(app, `CodeSystem/$subsumes?system=${COLORS}&codeA=red&codeB=red`, observations),
        403,
        'forbidden',
      );
      const readOnly = testToken({ projectId: 'p1', scopes: ['system/ValueSet.r', 'system/CodeSystem.rs'] });
      expectOutcome(await get(app, `ValueSet/$expand?url=${REDS}`, readOnly), 403, 'forbidden');
      expect(codesOf(await get(app, 'ValueSet/reds/$expand', readOnly)).sort()).toEqual(['crimson', 'red']);
    });

    it('answers 400 too-costly for an expansion past the limit, and a page of it', async () => {
      const app = await appOver(open, { terminology: r4Terminology({ maxExpansionSize: 2 }) });
      expectOutcome(await get(app, `ValueSet/$expand?url=${GENDER}`), 400, 'too-costly');
      expect(codesOf(await get(app, `ValueSet/$expand?url=${GENDER}&count=2`))).toHaveLength(2);
    });

    it('answers bad inputs with a 400 (or 404 for an unknown value set)', async () => {
      const app = await appOver(open);
      expectOutcome(await get(app, 'ValueSet/$expand'), 400, 'required');
      expectOutcome(await get(app, 'ValueSet/$expand?url=http://example.org/none'), 404, 'not-found');
      expectOutcome(await get(app, `ValueSet/$expand?url=${GENDER}&count=-1`), 400, 'invalid');
      expectOutcome(await get(app, `ValueSet/$expand?url=${GENDER}&offset=x`), 400, 'invalid');
      expectOutcome(await get(app, `ValueSet/$expand?url=${GENDER}&activeOnly=yes`), 400, 'invalid');
      expectOutcome(
        await get(app, `ValueSet/$expand?url=${GENDER}&displayLanguage=fr`),
        400,
        'not-supported',
      );
      expectOutcome(await get(app, `ValueSet/$expand?url=${GENDER}&url=${REDS}`), 400, 'invalid');
      expectOutcome(await post(app, 'ValueSet/$expand', { resourceType: 'Patient' }), 400, 'invalid');
      expectOutcome(await post(app, 'ValueSet/$expand', parameters({ valueUri: GENDER })), 400, 'invalid');
      expectOutcome(
        await post(
          app,
          'ValueSet/$expand',
          parameters({ name: 'valueSet', resource: { resourceType: 'Patient' } }),
        ),
        400,
        'invalid',
      );
      expectOutcome(await get(app, 'CodeSystem/$lookup?code=red'), 400, 'required');
      expectOutcome(await get(app, `CodeSystem/$lookup?system=${COLORS}&code=nope`), 404, 'not-found');
      expectOutcome(await get(app, `CodeSystem/$lookup?coding=${COLORS}|red`), 400, 'invalid');
      expectOutcome(await get(app, `ValueSet/$validate-code?url=${REDS}&code=red`), 400, 'required');
      expectOutcome(await get(app, `ValueSet/$validate-code?url=${REDS}`), 400, 'required');
      expectOutcome(await get(app, `CodeSystem/$subsumes?system=${COLORS}&codeA=red`), 400, 'required');
      expectOutcome(await get(app, 'ValueSet/bad id!/$expand'), 400, 'invalid');
      expectOutcome(await get(app, 'ValueSet/reds/$expand?url=x'), 400, 'invalid');
      expectOutcome(
        await request(app).delete(`${BASE}/ValueSet/$expand`).set('Authorization', auth),
        405,
        'not-supported',
      );
      expectOutcome(
        await get(app, `ValueSet/$expand?url=${GENDER}`).set('Accept', 'application/fhir+xml'),
        406,
        'not-supported',
      );
    });
  });
}

forEachStore('terminology operations', suite);
