import { beforeAll, describe, expect, it } from 'vitest';
import { SearchParameterError } from '../../src/search/search-error.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { parseSearchRequest, type ParseSearchRequestOptions } from '../../src/search/parse.js';
import type { ParameterFilter, SearchFilter } from '../../src/storage/search-request.js';

let registry: SearchRegistry;
beforeAll(async () => {
  registry = await loadSearchRegistry();
});

const NOW = Date.parse('2025-01-01T00:00:00Z');
const ms = (iso: string) => Date.parse(iso);

function parse(type: string, query: string, options: ParseSearchRequestOptions = {}) {
  return parseSearchRequest(registry, type, new URLSearchParams(query), { now: NOW, ...options });
}

/** The single filter of a one-parameter query. */
function only(type: string, query: string): SearchFilter {
  const { request } = parse(type, query);
  expect(request.filters).toHaveLength(1);
  return request.filters[0]!;
}

const values = (type: string, query: string) => (only(type, query) as ParameterFilter).values;

function expect400(fn: () => unknown, expression: string, code?: string): void {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(SearchParameterError);
  expect((caught as SearchParameterError).parameter).toBe(expression);
  if (code) expect((caught as SearchParameterError).issueCode).toBe(code);
}

describe('parseSearchRequest: values by type', () => {
  it('string: OR values, unescaped, normalized', () => {
    expect(values('Patient', 'name=Müller,O\\,Brien')).toEqual([
      { type: 'string', value: 'Müller', normalized: 'muller' },
      { type: 'string', value: 'O,Brien', normalized: 'o,brien' },
    ]);
    expect(only('Patient', 'name:exact=Ann')).toMatchObject({ modifier: 'exact' });
    expect(only('Patient', 'family:contains=nn')).toMatchObject({ modifier: 'contains' });
  });

  it('token: code, system|code, |code, system|, escaped bars', () => {
    expect(values('Observation', 'code=1234,http://loinc.org|8480-6,|x,urn:s|,a\\|b|c')).toEqual([
      { type: 'token', code: '1234' },
      { type: 'token', system: 'http://loinc.org', code: '8480-6' },
      { type: 'token', system: null, code: 'x' },
      { type: 'token', system: 'urn:s' },
      { type: 'token', system: 'a|b', code: 'c' },
    ]);
    expect(
      values('Patient', 'identifier:of-type=http://terminology.hl7.org/CodeSystem/v2-0203|MR|446053'),
    ).toEqual([
      {
        type: 'token',
        typeSystem: 'http://terminology.hl7.org/CodeSystem/v2-0203',
        typeCode: 'MR',
        code: '446053',
      },
    ]);
    expect(values('Observation', 'code:text=Blöod')).toEqual([{ type: 'token', text: 'blood' }]);
    expect(only('Observation', 'status:not=final')).toMatchObject({ modifier: 'not' });
    expect400(() => parse('Observation', 'code=|'), 'code', 'invalid');
    expect400(() => parse('Observation', 'code=a|b|c'), 'code', 'invalid');
    expect400(() => parse('Patient', 'identifier:of-type=MR|1'), 'identifier:of-type', 'invalid');
    expect400(() => parse('Observation', 'code:of-type=a|b|c'), 'code:of-type', 'not-supported');
  });

  it('date: prefixes and precision ranges, time zones', () => {
    expect(values('Patient', 'birthdate=2020')).toEqual([
      {
        type: 'date',
        prefix: 'eq',
        start: ms('2020-01-01T00:00:00Z'),
        end: ms('2021-01-01T00:00:00Z'),
        value: '2020',
      },
    ]);
    for (const prefix of ['eq', 'ne', 'gt', 'lt', 'ge', 'le', 'sa', 'eb']) {
      expect(values('Patient', `birthdate=${prefix}2020-03`)).toEqual([
        {
          type: 'date',
          prefix,
          start: ms('2020-03-01T00:00:00Z'),
          end: ms('2020-04-01T00:00:00Z'),
          value: '2020-03',
        },
      ]);
    }
    expect(values('Observation', 'date=2020-03-01T10:00:00%2B02:00')).toMatchObject([
      { start: ms('2020-03-01T08:00:00Z'), end: ms('2020-03-01T08:00:01Z') },
    ]);
    // ap: widened by 10% of the distance to now (2025-01-01): about 5 years → about half a year.
    const [ap] = values('Patient', 'birthdate=ap2020-01-01') as { start: number; end: number }[];
    expect(ap!.start).toBeLessThan(ms('2019-07-15T00:00:00Z'));
    expect(ap!.end).toBeGreaterThan(ms('2020-06-15T00:00:00Z'));
    expect400(() => parse('Patient', 'birthdate=2020-13'), 'birthdate', 'invalid');
    expect400(() => parse('Patient', 'birthdate=xx2020'), 'birthdate', 'invalid');
    expect400(() => parse('Patient', 'birthdate=2020-01-01T10'), 'birthdate', 'invalid');
  });

  it('number: prefixes and implicit precision', () => {
    expect(values('RiskAssessment', 'probability=100')).toEqual([
      { type: 'number', prefix: 'eq', value: 100, low: 99.5, high: 100.5 },
    ]);
    expect(values('RiskAssessment', 'probability=gt0.80')).toEqual([
      { type: 'number', prefix: 'gt', value: 0.8, low: 0.795, high: 0.805 },
    ]);
    expect(values('RiskAssessment', 'probability=1e2')).toEqual([
      { type: 'number', prefix: 'eq', value: 100, low: 95, high: 105 },
    ]);
    expect400(() => parse('RiskAssessment', 'probability=abc'), 'probability', 'invalid');
  });

  it('quantity: number|system|code', () => {
    expect(values('Observation', 'value-quantity=le5.4|http://unitsofmeasure.org|mg,5.4||mg,5')).toEqual([
      {
        type: 'quantity',
        prefix: 'le',
        value: 5.4,
        low: 5.35,
        high: 5.45,
        system: 'http://unitsofmeasure.org',
        code: 'mg',
      },
      { type: 'quantity', prefix: 'eq', value: 5.4, low: 5.35, high: 5.45, code: 'mg' },
      { type: 'quantity', prefix: 'eq', value: 5, low: 4.5, high: 5.5 },
    ]);
    expect400(() => parse('Observation', 'value-quantity=mg'), 'value-quantity', 'invalid');
  });

  it('reference: Type/id, bare id, absolute URL, :Type, :identifier', () => {
    expect(
      values('Observation', 'subject=Patient/1,2,http://x.org/fhir/Group/3/_history/2,Patient/4/_history/1'),
    ).toEqual([
      { type: 'reference', resourceType: 'Patient', id: '1' },
      { type: 'reference', id: '2' },
      { type: 'reference', url: 'http://x.org/fhir/Group/3/_history/2', resourceType: 'Group', id: '3' },
      { type: 'reference', resourceType: 'Patient', id: '4' },
    ]);
    // One target type: a bare id is an id of that type.
    expect(values('Observation', 'patient=7')).toEqual([
      { type: 'reference', resourceType: 'Patient', id: '7' },
    ]);
    expect(only('Observation', 'subject:Patient=7')).toEqual({
      kind: 'parameter',
      code: 'subject',
      type: 'reference',
      targetType: 'Patient',
      values: [{ type: 'reference', resourceType: 'Patient', id: '7' }],
    });
    expect(values('Observation', 'subject:identifier=urn:mrn|12')).toEqual([
      { type: 'reference', identifier: { system: 'urn:mrn', value: '12' } },
    ]);
    expect(values('QuestionnaireResponse', 'questionnaire=http://q.org/Questionnaire/a|2.0')).toEqual([
      {
        type: 'reference',
        url: 'http://q.org/Questionnaire/a',
        version: '2.0',
        resourceType: 'Questionnaire',
        id: 'a',
      },
    ]);
    expect400(() => parse('Observation', 'subject=not a ref'), 'subject', 'invalid');
    expect400(() => parse('Observation', 'subject:Patient=Group/1'), 'subject:Patient', 'invalid');
    expect400(() => parse('Observation', 'subject:Medication=1'), 'subject:Medication', 'invalid');
  });

  it('uri: :below and :above', () => {
    expect(only('ValueSet', 'url:below=http://acme.org/fhir/')).toEqual({
      kind: 'parameter',
      code: 'url',
      type: 'uri',
      modifier: 'below',
      values: [{ type: 'uri', value: 'http://acme.org/fhir/' }],
    });
    expect(only('ValueSet', 'url:above=http://acme.org/fhir/ValueSet/1')).toMatchObject({
      modifier: 'above',
    });
  });

  it("token: :in and :not-in keep the value sets' canonical URLs, a |version included", () => {
    expect(only('Observation', 'status:in=http://hl7.org/fhir/ValueSet/observation-status')).toEqual({
      kind: 'parameter',
      code: 'status',
      type: 'token',
      modifier: 'in',
      values: [{ type: 'uri', value: 'http://hl7.org/fhir/ValueSet/observation-status' }],
    });
    expect(only('Observation', 'code:not-in=http://acme.org/vs|2.0,urn:oid:1.2.3')).toEqual({
      kind: 'parameter',
      code: 'code',
      type: 'token',
      modifier: 'not-in',
      values: [
        { type: 'uri', value: 'http://acme.org/vs|2.0' },
        { type: 'uri', value: 'urn:oid:1.2.3' },
      ],
    });
    expect400(() => parse('Observation', 'code:in=observation-status'), 'code:in', 'invalid');
    expect400(() => parse('Observation', 'code:in=http://a b'), 'code:in', 'invalid');
    // Not a token: the modifier is not one of the parameter's.
    expect400(() => parse('Patient', 'name:in=http://acme.org/vs'), 'name:in', 'not-supported');
  });

  it('token: :below and :above take system|code, the system required', () => {
    expect(only('Condition', 'code:below=http://snomed.info/sct|404684003,urn:s|a\\,b')).toEqual({
      kind: 'parameter',
      code: 'code',
      type: 'token',
      modifier: 'below',
      values: [
        { type: 'token', system: 'http://snomed.info/sct', code: '404684003' },
        { type: 'token', system: 'urn:s', code: 'a,b' },
      ],
    });
    expect(only('Condition', 'code:above=urn:s|child')).toMatchObject({
      modifier: 'above',
      values: [{ type: 'token', system: 'urn:s', code: 'child' }],
    });
    for (const bad of ['404684003', '|404684003', 'urn:s|', 'a|b|c']) {
      expect400(() => parse('Condition', `code:below=${encodeURIComponent(bad)}`), 'code:below', 'invalid');
      expect400(() => parse('Condition', `code:above=${encodeURIComponent(bad)}`), 'code:above', 'invalid');
    }
  });

  it('terminology modifiers in chains and _has, and under lenient handling', () => {
    expect(
      only('Observation', 'subject:Patient.gender:in=http://hl7.org/fhir/ValueSet/administrative-gender'),
    ).toMatchObject({
      kind: 'chain',
      filter: { code: 'gender', modifier: 'in', values: [{ type: 'uri' }] },
    });
    expect(only('Patient', '_has:Observation:patient:code:below=urn:s|p')).toMatchObject({
      kind: 'has',
      filter: { code: 'code', modifier: 'below', values: [{ type: 'token', system: 'urn:s', code: 'p' }] },
    });
    // A malformed value is a 400 even when lenient.
    expect400(() => parse('Condition', 'code:below=p', { lenient: true }), 'code:below', 'invalid');
  });

  it('composite: $-joined components, each parsed by its own type', () => {
    expect(values('Observation', 'code-value-quantity=http://loinc.org|8480-6$gt100,1234$5||mmHg')).toEqual([
      {
        type: 'composite',
        components: [
          { type: 'token', system: 'http://loinc.org', code: '8480-6' },
          { type: 'quantity', prefix: 'gt', value: 100, low: 99.5, high: 100.5 },
        ],
      },
      {
        type: 'composite',
        components: [
          { type: 'token', code: '1234' },
          { type: 'quantity', prefix: 'eq', value: 5, low: 4.5, high: 5.5, code: 'mmHg' },
        ],
      },
    ]);
    expect400(() => parse('Observation', 'code-value-quantity=1234'), 'code-value-quantity', 'invalid');
  });

  it(':missing on every type', () => {
    expect(only('Patient', 'birthdate:missing=true')).toEqual({
      kind: 'parameter',
      code: 'birthdate',
      type: 'date',
      modifier: 'missing',
      missing: true,
      values: [],
    });
    expect(only('Observation', 'subject:missing=false')).toMatchObject({ missing: false });
    expect400(() => parse('Patient', 'gender:missing=yes'), 'gender:missing', 'invalid');
  });

  it('common parameters of every type: _id, _lastUpdated, _tag, _profile, _security, _source', () => {
    expect(values('Patient', '_id=a,b')).toEqual([
      { type: 'token', code: 'a' },
      { type: 'token', code: 'b' },
    ]);
    expect400(() => parse('Patient', '_id=a,b_c'), '_id', 'invalid');
    expect(only('Encounter', '_lastUpdated=gt2024-05')).toMatchObject({ type: 'date' });
    expect(only('Encounter', '_tag=urn:t|x')).toMatchObject({ type: 'token' });
    expect(only('Encounter', '_security=R')).toMatchObject({ type: 'token' });
    expect(only('Encounter', '_profile=http://p.org/sd')).toMatchObject({ type: 'uri' });
    expect(only('Encounter', '_source=http://src.org')).toMatchObject({ type: 'uri' });
  });
});

describe('parseSearchRequest: combining, chains, reverse chains', () => {
  it('a repeated parameter is another filter (AND)', () => {
    const { request } = parse('Patient', 'name=a,b&name=c');
    expect(request.filters.map((f) => (f as ParameterFilter).values.length)).toEqual([2, 1]);
  });

  it('chains one and two references deep', () => {
    expect(only('Observation', 'subject:Patient.name=Smith')).toEqual({
      kind: 'chain',
      code: 'subject',
      targetTypes: ['Patient'],
      filter: {
        kind: 'parameter',
        code: 'name',
        type: 'string',
        values: [{ type: 'string', value: 'Smith', normalized: 'smith' }],
      },
    });
    // Without a type: every target of subject (Patient, Group, Device, Location) with a `name`.
    expect((only('Observation', 'subject.name=x') as { targetTypes: string[] }).targetTypes.sort()).toEqual([
      'Location',
      'Patient',
    ]);
    expect(only('Observation', 'subject:Patient.organization.name:exact=Acme')).toMatchObject({
      kind: 'chain',
      targetTypes: ['Patient'],
      filter: {
        kind: 'chain',
        code: 'organization',
        targetTypes: ['Organization'],
        filter: { modifier: 'exact' },
      },
    });
    expect400(() => parse('Observation', 'subject:Patient.nope=x'), 'subject:Patient.nope', 'invalid');
    expect400(() => parse('Observation', 'code.name=x'), 'code.name', 'invalid');
    expect400(
      () => parse('Observation', 'subject:Patient.organization.partof.name=x'),
      'subject:Patient.organization.partof.name',
      'not-supported',
    );
  });

  it('_has, nested', () => {
    expect(only('Patient', '_has:Observation:patient:code=1234')).toEqual({
      kind: 'has',
      resourceType: 'Observation',
      referenceParam: 'patient',
      filter: { kind: 'parameter', code: 'code', type: 'token', values: [{ type: 'token', code: '1234' }] },
    });
    expect(only('Patient', '_has:Observation:patient:_has:AuditEvent:entity:type=rest')).toMatchObject({
      kind: 'has',
      filter: { kind: 'has', resourceType: 'AuditEvent', referenceParam: 'entity' },
    });
    expect400(
      () => parse('Patient', '_has:Observation:code:code=1'),
      '_has:Observation:code:code',
      'invalid',
    );
    expect400(() => parse('Patient', '_has:Observation:patient=1'), '_has:Observation:patient', 'invalid');
    expect400(() => parse('Patient', '_has:Nope:patient:code=1'), '_has:Nope:patient:code', 'invalid');
  });
});

describe('parseSearchRequest: result parameters', () => {
  it('_count (capped), _offset, _summary, _elements, _total', () => {
    expect(parse('Patient', '').request).toMatchObject({ count: 20, offset: 0 });
    expect(parse('Patient', '_count=5000', { maxCount: 100 }).request.count).toBe(100);
    expect(parse('Patient', '_count=0&_offset=40').request).toMatchObject({ count: 0, offset: 40 });
    expect(parse('Patient', '_summary=count').request).toMatchObject({ count: 0, summary: 'count' });
    expect(parse('Patient', '_summary=data').request.summary).toBe('data');
    expect(parse('Patient', '_elements=name,Patient.birthDate').request.elements).toEqual([
      'name',
      'birthDate',
    ]);
    expect(parse('Patient', '_total=accurate').request.total).toBe('accurate');
    expect400(() => parse('Patient', '_count=-1'), '_count');
    expect400(() => parse('Patient', '_offset=x'), '_offset');
    expect400(() => parse('Patient', '_summary=maybe'), '_summary');
    expect400(() => parse('Patient', '_elements=a b'), '_elements');
    expect400(() => parse('Patient', '_total=all'), '_total');
  });

  it('_sort on several keys', () => {
    expect(parse('Patient', '_sort=-birthdate,name,_lastUpdated').request.sort).toEqual([
      { code: 'birthdate', type: 'date', descending: true },
      { code: 'name', type: 'string', descending: false },
      { code: '_lastUpdated', type: 'date', descending: false },
    ]);
    expect400(() => parse('Patient', '_sort=nope'), '_sort', 'invalid');
  });

  it('_include and _revinclude, with :iterate', () => {
    const { request } = parse(
      'MedicationRequest',
      '_include=MedicationRequest:patient&_include:iterate=Patient:general-practitioner:Practitioner&_revinclude=Provenance:target',
    );
    expect(request.include).toEqual([
      { resourceType: 'MedicationRequest', searchParam: 'patient', iterate: false },
      {
        resourceType: 'Patient',
        searchParam: 'general-practitioner',
        targetType: 'Practitioner',
        iterate: true,
      },
    ]);
    expect(request.revinclude).toEqual([
      { resourceType: 'Provenance', searchParam: 'target', iterate: false },
    ]);
    expect400(() => parse('Patient', '_include=Patient:name'), '_include', 'invalid');
    expect400(() => parse('Patient', '_include=Observation:subject'), '_include', 'invalid');
    expect(parse('Patient', '_include=*').request.include).toEqual([
      { resourceType: 'Patient', searchParam: '*', iterate: false },
    ]);
    expect(parse('Patient', '_include=Patient:*:Organization').request.include).toEqual([
      { resourceType: 'Patient', searchParam: '*', targetType: 'Organization', iterate: false },
    ]);
    expect(parse('Patient', '_revinclude=Observation:*').request.revinclude).toEqual([
      { resourceType: 'Observation', searchParam: '*', iterate: false },
    ]);
    expect400(() => parse('Patient', '_revinclude=*'), '_revinclude', 'not-supported');
    expect400(() => parse('Patient', '_revinclude=Observation:encounter'), '_revinclude', 'invalid');
    expect(parse('Patient', '_revinclude:iterate=Observation:encounter').request.revinclude).toHaveLength(1);
  });

  it('refuses _elements with _summary=true, text or data', () => {
    expect400(() => parse('Patient', '_elements=name&_summary=true'), '_elements', 'invalid');
    expect(parse('Patient', '_elements=name&_summary=count').request.count).toBe(0);
  });
});

describe('parseSearchRequest: unknown and unsupported parameters', () => {
  it('answers 400 naming the parameter, unless lenient', () => {
    expect400(() => parse('Patient', 'nope=1'), 'nope', 'invalid');
    expect400(() => parse('Patient', 'name:below=x'), 'name:below', 'not-supported');
    expect400(() => parse('Observation', 'code:of-type=a|b|c'), 'code:of-type', 'not-supported');
    expect400(() => parse('Patient', '_text=x'), '_text', 'not-supported');
    expect400(() => parse('Location', 'near=1|2|3|km'), 'near', 'not-supported');
    const lenient = parse('Patient', 'nope=1&name=a&name:below=x&_text=y&_count=5&_format=json', {
      lenient: true,
    });
    expect(lenient.ignored).toEqual([
      { name: 'nope', reason: 'not-supported' },
      { name: 'name:below', reason: 'not-supported' },
      { name: '_text', reason: 'not-supported' },
    ]);
    expect(lenient.applied).toEqual([['name', 'a']]);
    expect(lenient.request.filters).toHaveLength(1);
  });

  it('a malformed value is a 400 even when lenient', () => {
    expect400(() => parse('Patient', 'birthdate=soon', { lenient: true }), 'birthdate', 'invalid');
  });

  it('ignores a parameter without a value, and says why: it has none (not that it is unsupported)', () => {
    const { request, ignored } = parse('Patient', 'name=&gender=male');
    expect(ignored).toEqual([{ name: 'name', reason: 'no-value' }]);
    expect(request.filters).toHaveLength(1);
    // Under lenient handling both reasons appear, each for its own parameter.
    expect(parse('Patient', 'nope=1&name=', { lenient: true }).ignored).toEqual([
      { name: 'nope', reason: 'not-supported' },
      { name: 'name', reason: 'no-value' },
    ]);
  });

  it('answers plain, structured-cloneable data', () => {
    const { request } = parse(
      'Observation',
      'subject:Patient.name=a&_has:Provenance:target:agent=Practitioner/1&code-value-quantity=1$2&date=ap2020&_sort=-date&_include=Observation:subject',
    );
    expect(structuredClone(request)).toEqual(request);
    expect(JSON.parse(JSON.stringify(request))).toEqual(request);
  });
});
