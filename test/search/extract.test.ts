import { beforeAll, describe, expect, it } from 'vitest';
import { R4_RESOURCE_TYPES } from '../../src/common/resource-types.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { extractComposite, extractValues } from '../../src/search/extract.js';
import type { FhirResource } from '../../src/storage/types.js';

let registry: SearchRegistry;
beforeAll(async () => {
  registry = await loadSearchRegistry();
});

const ms = (iso: string) => Date.parse(iso);

function extract(resource: FhirResource, code: string) {
  const definition = registry.get(resource.resourceType, code);
  if (!definition) throw new Error(`no ${resource.resourceType}.${code}`);
  return extractValues(registry, definition, resource);
}

describe('the search parameter registry', () => {
  it('is loaded once per process and frozen', async () => {
    expect(await loadSearchRegistry()).toBe(registry);
    expect(Object.isFrozen(registry)).toBe(true);
    expect(Object.isFrozen(registry.get('Patient', 'name'))).toBe(true);
  });

  it('gives every resource type the common parameters', () => {
    for (const type of R4_RESOURCE_TYPES) {
      for (const code of ['_id', '_lastUpdated', '_tag', '_profile', '_security', '_source']) {
        expect(registry.get(type, code), `${type}.${code}`).toBeDefined();
      }
    }
    expect(registry.get('Patient', '_lastUpdated')).toMatchObject({
      type: 'date',
      url: 'http://hl7.org/fhir/SearchParameter/Resource-lastUpdated',
      branches: [{ expression: 'Patient.meta.lastUpdated', valueTypes: ['instant'] }],
    });
  });

  it('keeps the branches of a shared expression that apply to the type', () => {
    expect(registry.get('Condition', 'code')?.branches).toEqual([
      { expression: 'Condition.code', valueTypes: ['CodeableConcept'] },
    ]);
    expect(registry.get('Observation', 'patient')).toMatchObject({
      type: 'reference',
      targets: ['Patient'],
      branches: [{ expression: 'Observation.subject', resolveIs: 'Patient', valueTypes: ['Reference'] }],
    });
    expect(registry.get('Patient', 'phone')?.branches[0]?.valueTypes).toEqual(['ContactPoint']);
    // A choice element's `.as(T)` / `as T` becomes its JSON name: exactly that type.
    expect(registry.get('Observation', 'value-quantity')?.branches).toEqual([
      { expression: 'Observation.valueQuantity', valueTypes: ['Quantity'] },
      { expression: 'Observation.valueSampledData', valueTypes: ['SampledData'] },
    ]);
    expect(registry.get('Condition', 'onset-date')?.branches.map((b) => b.expression)).toEqual([
      'Condition.onsetDateTime',
      'Condition.onsetPeriod',
    ]);
    expect(registry.get('Observation', 'component-code-value-quantity')?.components).toMatchObject([
      { code: 'component-code', type: 'token', expression: 'code', valueTypes: ['CodeableConcept'] },
      {
        code: 'component-value-quantity',
        type: 'quantity',
        expression: 'valueQuantity',
        valueTypes: ['Quantity'],
      },
    ]);
    expect(registry.parameters('Nope')).toEqual([]);
  });

  it('types every branch of every parameter it can answer', () => {
    for (const type of R4_RESOURCE_TYPES) {
      for (const definition of registry.parameters(type)) {
        for (const branch of definition.branches) {
          expect(
            branch.valueTypes.length,
            `${type}.${definition.code}: ${branch.expression}`,
          ).toBeGreaterThan(0);
        }
      }
    }
  });
});

describe('extractValues', () => {
  it('string: each part of a HumanName or Address, normalized and as written', () => {
    const patient = {
      resourceType: 'Patient',
      name: [{ family: 'Çelik', given: ['Ayşe', 'Nur'], prefix: ['Dr.'], text: 'Dr. Ayşe Çelik' }],
      address: [{ line: ['1 Rue Élysée'], city: 'Paris', postalCode: '75008', country: 'FR' }],
    };
    expect(extract(patient, 'family')).toEqual([{ type: 'string', normalized: 'celik', exact: 'Çelik' }]);
    expect(extract(patient, 'name').map((v) => (v as { normalized: string }).normalized)).toEqual([
      'celik',
      'ayse',
      'nur',
      'dr.',
      'dr. ayse celik',
    ]);
    expect(extract(patient, 'address').map((v) => (v as { exact: string }).exact)).toEqual([
      '1 Rue Élysée',
      'Paris',
      '75008',
      'FR',
    ]);
  });

  it('token: CodeableConcept, Coding, Identifier, ContactPoint, code, boolean', () => {
    const observation = {
      resourceType: 'Observation',
      status: 'final',
      code: {
        coding: [{ system: 'http://loinc.org', code: '8480-6', display: 'Systolic' }],
        text: 'Blood pressure',
      },
      identifier: [
        {
          system: 'urn:lab',
          value: 'A1',
          type: { text: 'Lab Nö', coding: [{ system: 'urn:v2', code: 'FILL' }] },
        },
      ],
      meta: { tag: [{ system: 'urn:tag', code: 't' }] },
    };
    expect(extract(observation, 'code')).toEqual([
      { type: 'token', system: 'http://loinc.org', code: '8480-6', text: 'systolic' },
      { type: 'token', text: 'blood pressure' },
    ]);
    expect(extract(observation, 'status')).toEqual([{ type: 'token', code: 'final' }]);
    expect(extract(observation, 'identifier')).toEqual([
      {
        type: 'token',
        system: 'urn:lab',
        code: 'A1',
        text: 'lab no',
        types: [{ system: 'urn:v2', code: 'FILL' }],
      },
    ]);
    expect(extract(observation, '_tag')).toEqual([{ type: 'token', system: 'urn:tag', code: 't' }]);
    const patient = {
      resourceType: 'Patient',
      active: true,
      telecom: [
        { system: 'phone', value: '555-1234', use: 'home' },
        { system: 'email', value: 'a@b.org' },
      ],
    };
    expect(extract(patient, 'phone')).toEqual([{ type: 'token', code: '555-1234' }]);
    expect(extract(patient, 'telecom')).toEqual([
      { type: 'token', code: '555-1234' },
      { type: 'token', code: 'a@b.org' },
    ]);
    expect(extract(patient, 'active')).toEqual([{ type: 'token', code: 'true' }]);
    expect(extract({ resourceType: 'Patient', deceasedDateTime: '2020-01-01' }, 'deceased')).toEqual([
      { type: 'token', code: 'true' },
    ]);
  });

  it('date: date, dateTime with a zone, instant, Period (open ends), Timing outer limits', () => {
    expect(extract({ resourceType: 'Patient', birthDate: '2020-06' }, 'birthdate')).toEqual([
      { type: 'date', start: ms('2020-06-01T00:00:00Z'), end: ms('2020-07-01T00:00:00Z') },
    ]);
    expect(
      extract({ resourceType: 'Observation', effectiveDateTime: '2020-03-01T10:00:00+02:00' }, 'date'),
    ).toEqual([{ type: 'date', start: ms('2020-03-01T08:00:00Z'), end: ms('2020-03-01T08:00:01Z') }]);
    expect(
      extract({ resourceType: 'Observation', effectiveInstant: '2020-03-01T10:00:00.123Z' }, 'date'),
    ).toEqual([{ type: 'date', start: ms('2020-03-01T10:00:00.123Z'), end: ms('2020-03-01T10:00:00.124Z') }]);
    expect(
      extract({ resourceType: 'Encounter', period: { start: '2020-03-01', end: '2020-03' } }, 'date'),
    ).toEqual([{ type: 'date', start: ms('2020-03-01T00:00:00Z'), end: ms('2020-04-01T00:00:00Z') }]);
    expect(extract({ resourceType: 'Encounter', period: { start: '2020-03-01' } }, 'date')).toEqual([
      { type: 'date', start: ms('2020-03-01T00:00:00Z') },
    ]);
    expect(
      extract(
        {
          resourceType: 'Observation',
          effectiveTiming: { event: ['2020-05-02', '2020-01-10', '2020-03-01'] },
        },
        'date',
      ),
    ).toEqual([{ type: 'date', start: ms('2020-01-10T00:00:00Z'), end: ms('2020-05-03T00:00:00Z') }]);
  });

  it('number and quantity: points, Ranges, units, Money', () => {
    expect(
      extract(
        {
          resourceType: 'RiskAssessment',
          prediction: [{ probabilityDecimal: 0.25 }, { probabilityRange: { low: { value: 1 } } }],
        },
        'probability',
      ),
    ).toEqual([
      { type: 'number', value: 0.25 },
      { type: 'number', low: 1 },
    ]);
    expect(
      extract(
        {
          resourceType: 'Observation',
          valueQuantity: { value: 5.4, unit: 'mg', system: 'http://unitsofmeasure.org', code: 'mg' },
        },
        'value-quantity',
      ),
    ).toEqual([
      { type: 'quantity', value: 5.4, system: 'http://unitsofmeasure.org', code: 'mg', unit: 'mg' },
    ]);
    expect(
      extract(
        {
          resourceType: 'Condition',
          onsetRange: {
            low: { value: 2, code: 'a', system: 'http://unitsofmeasure.org' },
            high: { value: 4 },
          },
        },
        'onset-age',
      ),
    ).toEqual([{ type: 'quantity', low: 2, high: 4, system: 'http://unitsofmeasure.org', code: 'a' }]);
    expect(
      extract(
        { resourceType: 'ChargeItem', priceOverride: { value: 10, currency: 'EUR' } },
        'price-override',
      ),
    ).toEqual([{ type: 'quantity', value: 10, system: 'urn:iso:std:iso:4217', code: 'EUR' }]);
  });

  it('reference: relative, absolute, logical, canonical, and only the target type of resolve() is X', () => {
    const observation = {
      resourceType: 'Observation',
      subject: { reference: 'https://other.org/fhir/Patient/p1/_history/3' },
      performer: [
        { reference: 'Practitioner/d1' },
        { type: 'Organization', identifier: { system: 'urn:org', value: 'o9' } },
      ],
    };
    expect(extract(observation, 'subject')).toEqual([
      {
        type: 'reference',
        resourceType: 'Patient',
        id: 'p1',
        url: 'https://other.org/fhir/Patient/p1/_history/3',
      },
    ]);
    expect(extract(observation, 'patient')).toHaveLength(1);
    expect(extract(observation, 'performer')).toEqual([
      { type: 'reference', resourceType: 'Practitioner', id: 'd1' },
      { type: 'reference', resourceType: 'Organization', identifier: { system: 'urn:org', value: 'o9' } },
    ]);
    expect(extract({ resourceType: 'Observation', subject: { reference: 'Group/g' } }, 'patient')).toEqual(
      [],
    );
    expect(extract({ resourceType: 'Observation', subject: { reference: '#contained' } }, 'subject')).toEqual(
      [],
    );
    expect(
      extract(
        { resourceType: 'QuestionnaireResponse', questionnaire: 'http://q.org/Questionnaire/a|2.0' },
        'questionnaire',
      ),
    ).toEqual([{ type: 'reference', url: 'http://q.org/Questionnaire/a', version: '2.0' }]);
  });

  it('uri', () => {
    expect(extract({ resourceType: 'ValueSet', url: 'http://acme.org/vs/1' }, 'url')).toEqual([
      { type: 'uri', value: 'http://acme.org/vs/1' },
    ]);
    expect(extract({ resourceType: 'Patient', meta: { profile: ['http://p.org/sd'] } }, '_profile')).toEqual([
      { type: 'uri', value: 'http://p.org/sd' },
    ]);
  });

  it('answers nothing for an absent element (what :missing=true matches)', () => {
    expect(extract({ resourceType: 'Patient' }, 'birthdate')).toEqual([]);
    expect(extract({ resourceType: 'Patient' }, 'name')).toEqual([]);
  });
});

describe('extractComposite', () => {
  it('gives each element with its components', () => {
    const observation = {
      resourceType: 'Observation',
      code: { coding: [{ system: 'http://loinc.org', code: '85354-9' }] },
      component: [
        { code: { coding: [{ system: 'http://loinc.org', code: '8480-6' }] }, valueQuantity: { value: 120 } },
        { code: { coding: [{ system: 'http://loinc.org', code: '8462-4' }] }, valueQuantity: { value: 80 } },
      ],
    };
    const definition = registry.get('Observation', 'component-code-value-quantity')!;
    expect(extractComposite(registry, definition, observation)).toEqual([
      {
        type: 'composite',
        components: [
          [{ type: 'token', system: 'http://loinc.org', code: '8480-6' }],
          [{ type: 'quantity', value: 120 }],
        ],
      },
      {
        type: 'composite',
        components: [
          [{ type: 'token', system: 'http://loinc.org', code: '8462-4' }],
          [{ type: 'quantity', value: 80 }],
        ],
      },
    ]);
  });
});
