import { beforeAll, describe, expect, it } from 'vitest';
import { SearchParameterError } from '../../src/search/search-error.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { compileSearchPredicate, matchesFilters, type SearchResolver } from '../../src/search/match.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import type { FhirResource } from '../../src/storage/types.js';

let registry: SearchRegistry;
beforeAll(async () => {
  registry = await loadSearchRegistry();
});

const NOW = Date.parse('2025-01-01T00:00:00Z');

/** True when `resource` matches the query (of its own type). */
function matches(resource: FhirResource, query: string): boolean {
  const { request } = parseSearchRequest(registry, resource.resourceType, new URLSearchParams(query), {
    now: NOW,
  });
  return matchesFilters(registry, resource, request.filters);
}

/** The queries of `table` that `resource` matches and those it does not, for one readable assertion. */
function split(resource: FhirResource, queries: string[]): { yes: string[]; no: string[] } {
  const yes: string[] = [];
  const no: string[] = [];
  for (const q of queries) (matches(resource, q) ? yes : no).push(q);
  return { yes, no };
}

const patient: FhirResource = {
  resourceType: 'Patient',
  id: 'p1',
  meta: { lastUpdated: '2024-05-01T12:00:00.000Z', tag: [{ system: 'urn:t', code: 'x' }] },
  identifier: [
    {
      system: 'urn:mrn',
      value: 'M1',
      type: {
        text: 'Medical record',
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MR' }],
      },
    },
  ],
  active: true,
  name: [{ family: 'Smíth', given: ['Ann', 'Marie'] }],
  telecom: [{ system: 'phone', value: '555-1234' }],
  gender: 'female',
  birthDate: '2020-06-01',
  address: [{ city: 'Zürich', country: 'CH' }],
  generalPractitioner: [{ reference: 'https://other.org/fhir/Practitioner/d1' }],
};

describe('string', () => {
  it('matches the start of a part, case- and accent-insensitively; :contains anywhere; :exact as written', () => {
    expect(
      split(patient, [
        'name=smith',
        'name=SMI',
        'name=Ann',
        'name=mar',
        'name=mith',
        'name:contains=MIT',
        'name:exact=Smíth',
        'name:exact=Smith',
        'name:exact=smíth',
        'family=smíth',
        'address-city=zur',
        'address=ch',
        'given=ann,bob',
        'given=bob',
      ]),
    ).toEqual({
      yes: [
        'name=smith',
        'name=SMI',
        'name=Ann',
        'name=mar',
        'name:contains=MIT',
        'name:exact=Smíth',
        'family=smíth',
        'address-city=zur',
        'address=ch',
        'given=ann,bob',
      ],
      no: ['name=mith', 'name:exact=Smith', 'name:exact=smíth', 'given=bob'],
    });
  });
});

describe('token', () => {
  it('code, system|code, |code, system|, :not, :text, :of-type, :missing', () => {
    expect(
      split(patient, [
        'gender=female',
        'gender=Female',
        'gender:not=male',
        'gender:not=female',
        'identifier=M1',
        'identifier=urn:mrn|M1',
        'identifier=urn:mrn|',
        'identifier=|M1',
        'identifier=urn:other|M1',
        'identifier:of-type=http://terminology.hl7.org/CodeSystem/v2-0203|MR|M1',
        'identifier:of-type=http://terminology.hl7.org/CodeSystem/v2-0203|MR|M2',
        'identifier:text=medical',
        'identifier:text=record',
        'phone=555-1234',
        'phone=|555-1234',
        'active=true',
        'active=false',
        '_tag=urn:t|x',
        '_id=p1,p2',
        '_id=p2',
        'email:missing=true',
        'email:missing=false',
        'gender:missing=false',
      ]),
    ).toEqual({
      yes: [
        'gender=female',
        'gender:not=male',
        'identifier=M1',
        'identifier=urn:mrn|M1',
        'identifier=urn:mrn|',
        'identifier:of-type=http://terminology.hl7.org/CodeSystem/v2-0203|MR|M1',
        'identifier:text=medical',
        'phone=555-1234',
        'phone=|555-1234',
        'active=true',
        '_tag=urn:t|x',
        '_id=p1,p2',
        'email:missing=true',
        'gender:missing=false',
      ],
      no: [
        // Codes are case-sensitive (R4 search, token).
        'gender=Female',
        'gender:not=female',
        'identifier=|M1',
        'identifier=urn:other|M1',
        'identifier:of-type=http://terminology.hl7.org/CodeSystem/v2-0203|MR|M2',
        'identifier:text=record',
        'active=false',
        '_id=p2',
        'email:missing=false',
      ],
    });
  });

  it(':not also matches resources without the element', () => {
    expect(matches({ resourceType: 'Patient' }, 'gender:not=female')).toBe(true);
    expect(matches({ resourceType: 'Patient' }, 'gender=female')).toBe(false);
  });

  it('CodeableConcept codings and text', () => {
    const observation = {
      resourceType: 'Observation',
      code: {
        coding: [{ system: 'http://loinc.org', code: '8480-6', display: 'Systolic blood pressure' }],
        text: 'BP sys',
      },
    };
    expect(
      split(observation, [
        'code=8480-6',
        'code=http://loinc.org|8480-6',
        'code=http://snomed.info/sct|8480-6',
        'code:text=systolic',
        'code:text=bp',
        'code=BP sys',
      ]),
    ).toEqual({
      yes: ['code=8480-6', 'code=http://loinc.org|8480-6', 'code:text=systolic', 'code:text=bp'],
      no: ['code=http://snomed.info/sct|8480-6', 'code=BP sys'],
    });
  });
});

describe('date', () => {
  it('precision: a partial search date is a range, and so is a partial value', () => {
    expect(
      split(patient, [
        'birthdate=2020',
        'birthdate=2020-06',
        'birthdate=2020-06-01',
        'birthdate=2020-06-02',
        'birthdate=2020-06-01T00:00:00Z',
        'birthdate=ne2020',
        'birthdate=ne2021',
        'birthdate=gt2019',
        'birthdate=gt2020',
        'birthdate=ge2020',
        'birthdate=ge2020-06-01',
        'birthdate=lt2020-06-02',
        'birthdate=lt2020-06-01',
        'birthdate=le2020-06-01',
        'birthdate=sa2020-05',
        'birthdate=sa2020-06',
        'birthdate=eb2020-07',
        'birthdate=eb2020-06',
        'birthdate=ap2020-06-03',
        'birthdate=ap2010',
        'birthdate=2019,2020',
      ]),
    ).toEqual({
      yes: [
        'birthdate=2020',
        'birthdate=2020-06',
        'birthdate=2020-06-01',
        'birthdate=ne2021',
        'birthdate=gt2019',
        'birthdate=ge2020',
        'birthdate=ge2020-06-01',
        'birthdate=lt2020-06-02',
        'birthdate=le2020-06-01',
        'birthdate=sa2020-05',
        'birthdate=eb2020-07',
        'birthdate=ap2020-06-03',
        'birthdate=2019,2020',
      ],
      no: [
        'birthdate=2020-06-02',
        // A second does not contain a whole day.
        'birthdate=2020-06-01T00:00:00Z',
        'birthdate=ne2020',
        'birthdate=gt2020',
        'birthdate=lt2020-06-01',
        'birthdate=sa2020-06',
        'birthdate=eb2020-06',
        'birthdate=ap2010',
      ],
    });
  });

  it('Periods against date=ge2020-03 and friends, open ends included', () => {
    const encounter = (period: object) => ({ resourceType: 'Encounter', period });
    const q = [
      'date=ge2020-03',
      'date=le2020-03',
      'date=2020-03',
      'date=gt2020-03',
      'date=lt2020-03',
      'date=sa2020-02',
      'date=eb2020-04',
    ];
    expect(split(encounter({ start: '2020-02-15', end: '2020-04-10' }), q)).toEqual({
      yes: ['date=ge2020-03', 'date=le2020-03', 'date=gt2020-03', 'date=lt2020-03'],
      no: ['date=2020-03', 'date=sa2020-02', 'date=eb2020-04'],
    });
    expect(split(encounter({ start: '2020-03-05', end: '2020-03-20' }), q)).toEqual({
      yes: ['date=ge2020-03', 'date=le2020-03', 'date=2020-03', 'date=sa2020-02', 'date=eb2020-04'],
      no: ['date=gt2020-03', 'date=lt2020-03'],
    });
    // Ongoing (no end), started in March: nothing of it is below March, so not le.
    expect(split(encounter({ start: '2020-03-05' }), q)).toEqual({
      yes: ['date=ge2020-03', 'date=gt2020-03', 'date=sa2020-02'],
      no: ['date=le2020-03', 'date=2020-03', 'date=lt2020-03', 'date=eb2020-04'],
    });
    // Ends before March: not ge March (the R4 ge: above the search range, or within it).
    expect(split(encounter({ start: '2020-01-01', end: '2020-02-20' }), q)).toEqual({
      yes: ['date=le2020-03', 'date=lt2020-03', 'date=eb2020-04'],
      no: ['date=ge2020-03', 'date=2020-03', 'date=gt2020-03', 'date=sa2020-02'],
    });
  });

  it('instants across time zones', () => {
    const observation = { resourceType: 'Observation', effectiveDateTime: '2020-03-01T23:30:00-02:00' };
    expect(
      split(observation, [
        'date=2020-03-02',
        'date=2020-03-01',
        'date=2020-03-02T01:30:00Z',
        'date=2020-03-02T03:30:00%2B02:00',
        'date=2020-03-02T01:30',
        'date=gt2020-03-02T01:29:59Z',
        'date=lt2020-03-02T01:30:00Z',
      ]),
    ).toEqual({
      yes: [
        'date=2020-03-02',
        'date=2020-03-02T01:30:00Z',
        'date=2020-03-02T03:30:00%2B02:00',
        'date=2020-03-02T01:30',
        'date=gt2020-03-02T01:29:59Z',
      ],
      no: ['date=2020-03-01', 'date=lt2020-03-02T01:30:00Z'],
    });
  });

  it('_lastUpdated on meta.lastUpdated', () => {
    expect(
      split(patient, [
        '_lastUpdated=2024-05',
        '_lastUpdated=gt2024-05-01T11:59:59Z',
        '_lastUpdated=lt2024-05-01',
      ]),
    ).toEqual({
      yes: ['_lastUpdated=2024-05', '_lastUpdated=gt2024-05-01T11:59:59Z'],
      no: ['_lastUpdated=lt2024-05-01'],
    });
  });
});

describe('number and quantity', () => {
  const risk = { resourceType: 'RiskAssessment', prediction: [{ probabilityDecimal: 100.2 }] };
  it('number: implicit precision for eq and ne, the value itself for the others', () => {
    expect(
      split(risk, [
        'probability=100',
        'probability=100.0',
        'probability=100.2',
        'probability=ne100',
        'probability=gt100',
        'probability=lt100.3',
        'probability=ge100.2',
        'probability=le100.1',
        'probability=ap95',
        'probability=ap80',
        'probability=1e2',
      ]),
    ).toEqual({
      yes: [
        'probability=100',
        'probability=100.2',
        'probability=gt100',
        'probability=lt100.3',
        'probability=ge100.2',
        'probability=ap95',
        'probability=1e2',
      ],
      no: ['probability=100.0', 'probability=ne100', 'probability=le100.1', 'probability=ap80'],
    });
  });

  it('quantity: value|system|code, a code matching the unit without a system', () => {
    const observation = {
      resourceType: 'Observation',
      valueQuantity: { value: 5.4, unit: 'mg', system: 'http://unitsofmeasure.org', code: 'mg' },
    };
    expect(
      split(observation, [
        'value-quantity=5.4',
        'value-quantity=5.4|http://unitsofmeasure.org|mg',
        'value-quantity=5.4||mg',
        'value-quantity=5.4|http://unitsofmeasure.org|g',
        'value-quantity=gt5|http://unitsofmeasure.org|mg',
        'value-quantity=lt5',
        'value-quantity=5',
      ]),
    ).toEqual({
      yes: [
        'value-quantity=5.4',
        'value-quantity=5.4|http://unitsofmeasure.org|mg',
        'value-quantity=5.4||mg',
        'value-quantity=gt5|http://unitsofmeasure.org|mg',
        'value-quantity=5',
      ],
      no: ['value-quantity=5.4|http://unitsofmeasure.org|g', 'value-quantity=lt5'],
    });
    expect(matches({ resourceType: 'Observation', valueString: '5.4' }, 'value-quantity=5.4')).toBe(false);
  });
});

describe('reference', () => {
  const observation = {
    resourceType: 'Observation',
    subject: { reference: 'Patient/p1' },
    performer: [
      { reference: 'https://other.org/fhir/Practitioner/d1' },
      { identifier: { system: 'urn:npi', value: '42' } },
    ],
  };
  it('Type/id, bare id, absolute URL, :Type, :identifier, :missing', () => {
    expect(
      split(observation, [
        'subject=Patient/p1',
        'subject=p1',
        'subject:Patient=p1',
        'subject:Group=p1',
        'subject=Group/p1',
        'subject=http://here.org/fhir/Patient/p1',
        'patient=p1',
        'patient=p2,p1',
        'performer=Practitioner/d1',
        'performer=https://other.org/fhir/Practitioner/d1',
        'performer:identifier=urn:npi|42',
        'performer:identifier=urn:npi|43',
        'performer:identifier=42',
        'encounter:missing=true',
        'subject:missing=true',
      ]),
    ).toEqual({
      yes: [
        'subject=Patient/p1',
        'subject=p1',
        'subject:Patient=p1',
        'subject=http://here.org/fhir/Patient/p1',
        'patient=p1',
        'patient=p2,p1',
        'performer=Practitioner/d1',
        'performer=https://other.org/fhir/Practitioner/d1',
        'performer:identifier=urn:npi|42',
        'performer:identifier=42',
        'encounter:missing=true',
      ],
      no: ['subject:Group=p1', 'subject=Group/p1', 'performer:identifier=urn:npi|43', 'subject:missing=true'],
    });
    // patient is subject.where(resolve() is Patient): a Group subject is not a patient.
    expect(matches({ resourceType: 'Observation', subject: { reference: 'Group/p1' } }, 'patient=p1')).toBe(
      false,
    );
  });

  it('canonical references by URL and version', () => {
    const response = {
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'http://q.org/Questionnaire/a|2.0',
    };
    expect(
      split(response, [
        'questionnaire=http://q.org/Questionnaire/a',
        'questionnaire=http://q.org/Questionnaire/a|2.0',
        'questionnaire=http://q.org/Questionnaire/a|1.0',
      ]),
    ).toEqual({
      yes: ['questionnaire=http://q.org/Questionnaire/a', 'questionnaire=http://q.org/Questionnaire/a|2.0'],
      no: ['questionnaire=http://q.org/Questionnaire/a|1.0'],
    });
  });
});

describe('uri and composite', () => {
  it('uri: equal, :below, :above', () => {
    const vs = { resourceType: 'ValueSet', url: 'http://acme.org/fhir/ValueSet/123' };
    expect(
      split(vs, [
        'url=http://acme.org/fhir/ValueSet/123',
        'url=http://acme.org/fhir/',
        'url:below=http://acme.org/fhir/',
        'url:above=http://acme.org/fhir/ValueSet/123/_history/5',
        'url:above=http://acme.org/other',
      ]),
    ).toEqual({
      yes: [
        'url=http://acme.org/fhir/ValueSet/123',
        'url:below=http://acme.org/fhir/',
        'url:above=http://acme.org/fhir/ValueSet/123/_history/5',
      ],
      no: ['url=http://acme.org/fhir/', 'url:above=http://acme.org/other'],
    });
  });

  it('composite: every component on the same element', () => {
    const bp = {
      resourceType: 'Observation',
      code: { coding: [{ system: 'http://loinc.org', code: '85354-9' }] },
      component: [
        { code: { coding: [{ system: 'http://loinc.org', code: '8480-6' }] }, valueQuantity: { value: 120 } },
        { code: { coding: [{ system: 'http://loinc.org', code: '8462-4' }] }, valueQuantity: { value: 80 } },
      ],
    };
    expect(
      split(bp, [
        'component-code-value-quantity=http://loinc.org|8480-6$gt100',
        'component-code-value-quantity=http://loinc.org|8462-4$gt100',
        'component-code-value-quantity=8462-4$lt100,8480-6$lt100',
        'code-value-quantity=85354-9$gt0',
      ]),
    ).toEqual({
      yes: [
        'component-code-value-quantity=http://loinc.org|8480-6$gt100',
        'component-code-value-quantity=8462-4$lt100,8480-6$lt100',
      ],
      no: ['component-code-value-quantity=http://loinc.org|8462-4$gt100', 'code-value-quantity=85354-9$gt0'],
    });
  });
});

describe('combining', () => {
  it('comma is OR, a repeated parameter AND', () => {
    expect(matches(patient, 'gender=male,female')).toBe(true);
    expect(matches(patient, 'gender=male&gender=female')).toBe(false);
    expect(matches(patient, 'name=ann&name=smith&birthdate=2020')).toBe(true);
    expect(matches(patient, 'name=ann&name=bob')).toBe(false);
  });
});

describe('chains and _has', () => {
  const resources: FhirResource[] = [
    { resourceType: 'Organization', id: 'o1', name: 'Acme Health' },
    {
      resourceType: 'Patient',
      id: 'p1',
      name: [{ family: 'Smith' }],
      managingOrganization: { reference: 'Organization/o1' },
    },
    { resourceType: 'Patient', id: 'p2', name: [{ family: 'Jones' }] },
    {
      resourceType: 'Observation',
      id: 'x1',
      code: { coding: [{ code: '1234' }] },
      subject: { reference: 'Patient/p1' },
    },
    {
      resourceType: 'Observation',
      id: 'x2',
      code: { coding: [{ code: '999' }] },
      subject: { reference: 'Patient/p2' },
    },
  ];
  const resolver: SearchResolver = {
    async *resources(type) {
      await Promise.resolve();
      yield* resources.filter((r) => r.resourceType === type);
    },
  };
  async function ids(type: string, query: string): Promise<string[]> {
    const { request } = parseSearchRequest(registry, type, new URLSearchParams(query));
    const test = await compileSearchPredicate(registry, request.filters, resolver);
    return resources.filter((r) => r.resourceType === type && test(r)).map((r) => String(r.id));
  }

  it('one and two levels', async () => {
    expect(await ids('Observation', 'subject:Patient.name=smith')).toEqual(['x1']);
    expect(await ids('Observation', 'patient.name=jones')).toEqual(['x2']);
    expect(await ids('Observation', 'subject:Patient.organization.name=acme')).toEqual(['x1']);
    expect(await ids('Observation', 'subject:Patient.organization.name=other')).toEqual([]);
  });

  it('_has, and _has with a chain', async () => {
    expect(await ids('Patient', '_has:Observation:patient:code=1234')).toEqual(['p1']);
    expect(await ids('Patient', '_has:Observation:patient:code=999,1234')).toEqual(['p1', 'p2']);
    expect(await ids('Organization', '_has:Patient:organization:_has:Observation:patient:code=1234')).toEqual(
      ['o1'],
    );
    expect(await ids('Patient', '_has:Observation:subject:subject:Patient.name=jones')).toEqual(['p2']);
  });

  it('is a 400 not-supported without a resolver', async () => {
    const { request } = parseSearchRequest(registry, 'Observation', new URLSearchParams('patient.name=x'));
    await expect(compileSearchPredicate(registry, request.filters)).rejects.toBeInstanceOf(
      SearchParameterError,
    );
    expect(() => matchesFilters(registry, resources[3]!, request.filters)).toThrow(SearchParameterError);
  });
});
