import express from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { allReads } from '../helpers/search-reads.js';
import { createPlatformApp } from '../helpers/platform-app.js';

const BASE = '/api/fhir/R4';
const registry = await loadSearchRegistry();

interface SearchParamEntry {
  name: string;
  type: string;
  definition?: string;
  documentation?: string;
}

interface ResourceEntry {
  type: string;
  searchParam: SearchParamEntry[];
}

/** A syntactically valid value of each parameter type. */
const SAMPLE: Record<string, string> = {
  string: 'a',
  token: 'a',
  date: '2020',
  number: '1',
  quantity: '1',
  reference: 'x',
  uri: 'http://a.example',
};

let storage: Storage;
let app: express.Express;
let resources: Map<string, ResourceEntry>;
let statement: { rest: { searchParam: SearchParamEntry[] }[] };

beforeAll(async () => {
  storage = memoryStorage();
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  // One resource of each sampled type, so that each parameter is evaluated on something.
  const subject = { reference: 'Patient/x' };
  const code = { coding: [{ system: 'http://a.example', code: 'a' }], text: 'a' };
  await storage.writeResources(
    'p1',
    [
      { resourceType: 'Patient', id: 'x', name: [{ family: 'a' }], gender: 'female', birthDate: '2020' },
      { resourceType: 'Observation', status: 'final', code, subject, valueQuantity: { value: 1 } },
      { resourceType: 'Condition', code, subject, onsetDateTime: '2020-01-01' },
      { resourceType: 'Encounter', status: 'finished', class: { code: 'a' }, subject },
      { resourceType: 'MedicationRequest', status: 'active', intent: 'order', subject },
      { resourceType: 'Group', type: 'person', actual: true, member: [{ entity: subject }] },
    ].map((resource) => ({ op: 'create' as const, resource })),
  );
  app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  const res = await request(app).get(`${BASE}/metadata`);
  expect(res.status).toBe(200);
  statement = res.body;
  resources = new Map(
    (res.body.rest[0].resource as ResourceEntry[]).map((entry) => [entry.type, entry] as const),
  );
});

afterAll(() => storage.close());

/** A value `entry` parses: a sample of its type, or one per component of a composite, joined by `$`. */
function valueOf(entry: SearchParamEntry, components: () => string[]): string {
  return entry.type === 'composite' ? components().join('$') : SAMPLE[entry.type]!;
}

describe('the CapabilityStatement lists the search parameters of each type', () => {
  it('Patient: name, birthdate, gender, identifier and the common ones, with definition and type', () => {
    const byName = new Map(resources.get('Patient')!.searchParam.map((p) => [p.name, p]));
    expect(byName.get('name')).toEqual({
      name: 'name',
      type: 'string',
      definition: 'http://hl7.org/fhir/SearchParameter/Patient-name',
      documentation: expect.stringContaining('HumanName'),
    });
    expect(byName.get('birthdate')).toEqual({
      name: 'birthdate',
      type: 'date',
      definition: 'http://hl7.org/fhir/SearchParameter/individual-birthdate',
      // The Patient line of a description shared with Person and RelatedPerson.
      documentation: "The patient's date of birth",
    });
    expect(byName.get('gender')).toMatchObject({
      type: 'token',
      definition: 'http://hl7.org/fhir/SearchParameter/individual-gender',
    });
    expect(byName.get('identifier')).toMatchObject({
      type: 'token',
      definition: 'http://hl7.org/fhir/SearchParameter/Patient-identifier',
    });
    for (const [name, url] of [
      ['_id', 'Resource-id'],
      ['_lastUpdated', 'Resource-lastUpdated'],
      ['_tag', 'Resource-tag'],
      ['_profile', 'Resource-profile'],
      ['_security', 'Resource-security'],
      ['_source', 'Resource-source'],
    ]) {
      expect(byName.get(name!)?.definition).toBe(`http://hl7.org/fhir/SearchParameter/${url}`);
    }
  });

  it('lists nothing the server refuses', async () => {
    for (const entry of resources.values()) {
      const names = entry.searchParam.map((p) => p.name);
      for (const refused of ['_text', '_content', '_query', '_list', '_filter', 'near']) {
        expect(names, entry.type).not.toContain(refused);
      }
      expect(new Set(names).size, entry.type).toBe(names.length);
      for (const p of entry.searchParam) {
        expect(p.definition, `${entry.type}.${p.name}`).toMatch(
          /^http:\/\/hl7\.org\/fhir\/SearchParameter\//,
        );
      }
    }
    // Observation: composites whose components the module parses.
    const observation = resources.get('Observation')!.searchParam.map((p) => p.name);
    expect(observation).toEqual(expect.arrayContaining(['code', 'category', 'code-value-quantity']));
    // Every result parameter listed at the server level parses.
    for (const name of statement.rest[0]!.searchParam.map((p) => p.name)) {
      const value = {
        _count: '5',
        _offset: '0',
        _sort: '-_lastUpdated',
        _summary: 'count',
        _elements: 'id',
        _total: 'none',
        _include: 'Observation:subject',
        _revinclude: 'Observation:subject',
      }[name];
      if (value === undefined) continue;
      await expect(
        parseSearch(name === '_revinclude' ? 'Patient' : 'Observation', [[name, value]], {}, allReads()),
        name,
      ).resolves.toBeDefined();
    }
  });

  it('every listed parameter of every type parses with a valid value', async () => {
    let count = 0;
    for (const [type, entry] of resources) {
      for (const p of entry.searchParam) {
        const value = valueOf(p, () => compositeSample(type, p.name));
        await expect(
          parseSearch(type, [[p.name, value]], {}, allReads()),
          `${type}?${p.name}=${value}`,
        ).resolves.toBeDefined();
        count += 1;
      }
    }
    expect(count).toBeGreaterThan(2000);
  });

  it('each listed parameter of a sample of types answers a search (no 400)', async () => {
    const token = testToken({ projectId: 'p1', scopes: ['system/*.*'] });
    let count = 0;
    for (const type of ['Patient', 'Observation', 'Condition', 'Encounter', 'MedicationRequest', 'Group']) {
      for (const p of resources.get(type)!.searchParam) {
        const value = valueOf(p, () => compositeSample(type, p.name));
        const res = await request(app)
          .get(`${BASE}/${type}`)
          .query({ [p.name]: value })
          .set('Authorization', token);
        expect(res.status, `${type}?${p.name}=${value}: ${JSON.stringify(res.body)}`).toBe(200);
        expect(res.body.resourceType).toBe('Bundle');
        count += 1;
      }
    }
    expect(count).toBeGreaterThan(150);
  });
});

/** Sample values of the components of a composite, from its R4 definition. */
function compositeSample(type: string, code: string): string[] {
  const definition = registry.get(type, code);
  return (definition?.components ?? []).map((c) => SAMPLE[c.type]!);
}

describe('the CapabilityStatement, built once per base URL', () => {
  it('answers the same statement again, and each Host its own base URL', async () => {
    const first = await request(app).get(`${BASE}/metadata`).set('Host', 'one.example');
    const again = await request(app).get(`${BASE}/metadata`).set('Host', 'one.example');
    const other = await request(app).get(`${BASE}/metadata`).set('Host', 'two.example');
    expect(again.text).toBe(first.text);
    expect(first.body.implementation.url).toBe('http://one.example/api/fhir/R4');
    expect(other.body.implementation.url).toBe('http://two.example/api/fhir/R4');
    // Many Hosts: the cache stays bounded and each answer still names its own.
    for (let i = 0; i < 20; i++) {
      const res = await request(app).get(`${BASE}/metadata`).set('Host', `h${i}.example`);
      expect(res.body.implementation.url).toBe(`http://h${i}.example/api/fhir/R4`);
    }
  });
});

describe('the CapabilityStatement lists includes', () => {
  it('lists the reference parameters as _include and _revinclude values, and they answer', async () => {
    const observation = resources.get('Observation') as ResourceEntry & { searchInclude: string[] };
    const patient = resources.get('Patient') as ResourceEntry & { searchRevInclude: string[] };
    expect(observation.searchInclude).toEqual(expect.arrayContaining(['*', 'Observation:subject']));
    expect(patient.searchRevInclude).toEqual(expect.arrayContaining(['Observation:subject']));
    const included = await request(app)
      .get(`${BASE}/Observation?_include=Observation:subject`)
      .set('Authorization', testToken({ projectId: 'p1' }));
    expect(included.status).toBe(200);
    expect(included.body.entry.map((e: { search: { mode: string } }) => e.search.mode)).toEqual(
      expect.arrayContaining(['match', 'include']),
    );
    const revIncluded = await request(app)
      .get(`${BASE}/Patient?_revinclude=Observation:subject`)
      .set('Authorization', testToken({ projectId: 'p1' }));
    expect(revIncluded.status).toBe(200);
    expect(revIncluded.body.entry).toHaveLength(2);
  });
});

describe('the CapabilityStatement states the search limits', () => {
  const limitsOf = async (options: Parameters<typeof fhirRouter>[0]) => {
    const limited = express();
    limited.use(BASE, fhirRouter(options));
    const res = await request(limited).get(`${BASE}/metadata`);
    expect(res.status).toBe(200);
    const rest = res.body.rest[0] as { documentation: string; searchParam: SearchParamEntry[] };
    const doc = (name: string) => rest.searchParam.find((p) => p.name === name)?.documentation ?? '';
    return { rest, doc };
  };

  it("in rest.documentation and the result parameters' documentation, as the router is set", async () => {
    const defaults = await limitsOf({ storage, authenticate: testAuthenticate });
    expect(defaults.rest.documentation).toContain('up to 100,000 matches');
    expect(defaults.rest.documentation).toContain('`_count`: 20 when absent, at most 1,000');
    expect(defaults.doc('_total')).toMatch(
      /^none \(the default.*at most 100,000 matches, else 400 too-costly/,
    );
    expect(defaults.doc('_count')).toMatch(/^Page size: 20 when absent, at most 1,000\./);

    const set = await limitsOf({
      storage,
      authenticate: testAuthenticate,
      defaultCount: 10,
      maxCount: 50,
      searchLimits: { maxAccurateTotal: 5000, maxSortKeys: 2, maxOffset: 300, maxIncluded: 40 },
    });
    expect(set.rest.documentation).toContain('up to 5,000 matches');
    expect(set.rest.documentation).toContain('`_count`: 10 when absent, at most 50');
    expect(set.rest.documentation).toContain('At most 2 `_sort` keys, 30 search parameters');
    expect(set.rest.documentation).toContain('an `_offset` of 300');
    expect(set.rest.documentation).toContain('at most 40 resources a page');
    expect(set.doc('_total')).toContain('at most 5,000 matches');
    expect(set.doc('_sort')).toContain('at most 2 keys');
    expect(set.doc('_include')).toContain('at most 40 a page');

    const unbounded = await limitsOf({
      storage,
      authenticate: testAuthenticate,
      searchLimits: { maxAccurateTotal: Infinity },
    });
    expect(unbounded.rest.documentation).toContain('is counted whatever the number of matches');
    expect(unbounded.doc('_total')).toContain('no bound');
  });
});

describe('the CapabilityStatement lists the operations', () => {
  type Operation = { name: string; definition: string };
  const operationsOf = (type: string): Operation[] =>
    ((resources.get(type) as ResourceEntry & { operation?: Operation[] }).operation ?? []).map((o) => ({
      name: o.name,
      definition: o.definition,
    }));
  const R4 = 'http://hl7.org/fhir/OperationDefinition';

  it('$validate on every type but the append-only AuditEvent, with the R4 Resource-validate definition', () => {
    expect(resources.size).toBeGreaterThan(140);
    const validate = { name: 'validate', definition: `${R4}/Resource-validate` };
    for (const type of resources.keys()) {
      if (type === 'AuditEvent') expect(operationsOf(type)).not.toContainEqual(validate);
      else expect(operationsOf(type), type).toContainEqual(validate);
    }
  });

  it('the terminology operations on ValueSet and CodeSystem, with their R4 definitions', () => {
    expect(operationsOf('ValueSet')).toEqual(
      expect.arrayContaining([
        { name: 'expand', definition: `${R4}/ValueSet-expand` },
        { name: 'validate-code', definition: `${R4}/ValueSet-validate-code` },
      ]),
    );
    expect(operationsOf('CodeSystem')).toEqual(
      expect.arrayContaining([
        { name: 'lookup', definition: `${R4}/CodeSystem-lookup` },
        { name: 'validate-code', definition: `${R4}/CodeSystem-validate-code` },
        { name: 'subsumes', definition: `${R4}/CodeSystem-subsumes` },
      ]),
    );
    expect(operationsOf('Patient').map((o) => o.name)).not.toContain('expand');
  });

  it('says JSON is the only format', () => {
    expect((statement as unknown as { format: string[] }).format).toEqual(['json', 'application/fhir+json']);
  });
});

describe('GET metadata with _summary and _elements', () => {
  const SUBSETTED = {
    system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue',
    code: 'SUBSETTED',
  };
  const metadata = (query: string) =>
    request(app).get(`${BASE}/metadata${query}`).set('Host', 'fhir.example');

  it('_summary=true answers the summary elements at every depth, a small fraction of the whole', async () => {
    const full = await metadata('');
    const summary = await metadata('?_summary=true');
    expect(summary.status).toBe(200);
    expect(summary.headers['content-type']).toMatch(/^application\/fhir\+json/);
    const body = summary.body as Record<string, unknown> & {
      meta: { tag: unknown[] };
      rest: Record<string, unknown>[];
    };
    expect(body.meta.tag).toEqual([SUBSETTED]);
    expect(body).toMatchObject({
      resourceType: 'CapabilityStatement',
      status: 'active',
      kind: 'instance',
      fhirVersion: '4.0.1',
      format: ['json', 'application/fhir+json'],
      software: full.body.software,
      implementation: full.body.implementation,
    });
    const rest = body.rest[0]!;
    // `mode`, `resource`, `operation` and `security` are summary elements; `documentation`,
    // `interaction` and `searchParam` are not.
    expect(Object.keys(rest).sort()).toEqual(['mode', 'resource']);
    const patient = (rest.resource as Record<string, unknown>[]).find((r) => r.type === 'Patient')!;
    expect(Object.keys(patient).sort()).toEqual(['operation', 'profile', 'type']);
    expect(patient.operation).toContainEqual({
      name: 'everything',
      definition: 'http://hl7.org/fhir/OperationDefinition/Patient-everything',
    });
    expect(summary.text).not.toContain('searchParam');
    expect(summary.text.length).toBeLessThan(full.text.length / 10);
    console.info(`GET metadata: ${full.text.length} bytes; ?_summary=true: ${summary.text.length} bytes`);
  });

  it('_summary=false answers the whole statement', async () => {
    const full = await metadata('');
    const same = await metadata('?_summary=false');
    expect(same.status).toBe(200);
    expect(same.text === full.text, 'the same text').toBe(true);
  });

  it('_summary=text keeps id, meta, text and the mandatory elements; data all but text', async () => {
    const text = await metadata('?_summary=text');
    expect(text.status).toBe(200);
    expect(Object.keys(text.body).sort()).toEqual(
      ['date', 'fhirVersion', 'format', 'kind', 'meta', 'resourceType', 'status'].sort(),
    );
    expect(text.body.meta.tag).toEqual([SUBSETTED]);
    const data = await metadata('?_summary=data');
    expect(data.status).toBe(200);
    expect(data.body.meta.tag).toEqual([SUBSETTED]);
    expect(data.body.rest[0].resource.length).toBe(resources.size);
  });

  it('_elements keeps the named elements and the mandatory ones', async () => {
    const res = await metadata('?_elements=software,CapabilityStatement.implementation');
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(
      [
        'date',
        'fhirVersion',
        'format',
        'implementation',
        'kind',
        'meta',
        'resourceType',
        'software',
        'status',
      ].sort(),
    );
    expect(res.body.meta.tag).toEqual([SUBSETTED]);
  });

  it('refuses other values with 400', async () => {
    for (const query of [
      '?_summary=count',
      '?_summary=yes',
      '?_summary=true&_summary=false',
      '?_elements=software,bad-name',
      '?_elements=',
      '?_summary=true&_elements=software',
    ]) {
      const res = await metadata(query);
      expect(res.status, query).toBe(400);
      expect(res.body.resourceType).toBe('OperationOutcome');
      expect(res.body.issue[0].code).toBe('invalid');
    }
  });
});

describe("the platform's CapabilityStatement declares its security", () => {
  it('SMART App Launch and Backend Services, with the authorize, token, revoke and introspect URIs', async () => {
    const ctx = await createPlatformApp({
      fhir: { capabilities: [{ security: { cors: true, extension: [{ url: 'urn:example:mine' }] } }] },
    });
    try {
      const res = await request(ctx.app).get('/fhir/R4/metadata');
      expect(res.status).toBe(200);
      const security = res.body.rest[0].security as {
        cors: boolean;
        description: string;
        service: { coding: { code: string }[] }[];
        extension: { url: string; extension?: { url: string; valueUri: string }[] }[];
      };
      expect(security.description).toContain('SMART App Launch');
      expect(security.description).toContain('SMART Backend Services');
      expect(security.service[0]!.coding[0]!.code).toBe('SMART-on-FHIR');
      const uris = security.extension.find(
        (e) => e.url === 'http://fhir-registry.smarthealthit.org/StructureDefinition/oauth-uris',
      );
      expect(uris?.extension).toEqual([
        { url: 'authorize', valueUri: 'http://fhir.test/oauth2/authorize' },
        { url: 'token', valueUri: 'http://fhir.test/oauth2/token' },
        { url: 'revoke', valueUri: 'http://fhir.test/oauth2/revoke' },
        { url: 'introspect', valueUri: 'http://fhir.test/oauth2/introspect' },
      ]);
      // What another contribution declared is kept beside it.
      expect(security.cors).toBe(true);
      expect(security.extension).toContainEqual({ url: 'urn:example:mine' });
      // The authorize endpoint the statement names is the one the SMART configuration names.
      const smart = await request(ctx.app).get('/fhir/R4/.well-known/smart-configuration');
      expect(smart.body.authorization_endpoint).toBe('http://fhir.test/oauth2/authorize');
    } finally {
      await ctx.close();
    }
  });
});
