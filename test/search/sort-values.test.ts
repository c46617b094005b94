import { beforeAll, describe, expect, it } from 'vitest';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { sortValuesOf } from '../../src/search/sort-values.js';
import type { FhirResource } from '../../src/storage/types.js';

let registry: SearchRegistry;
beforeAll(async () => {
  registry = await loadSearchRegistry();
});

const values = (resource: FhirResource, sort: string) =>
  sortValuesOf(
    registry,
    resource.resourceType,
    sort.split(',').map((key) => {
      const descending = key.startsWith('-');
      const code = descending ? key.slice(1) : key;
      return { code, type: registry.get(resource.resourceType, code)!.type, descending };
    }),
  )(resource);

describe('sortValuesOf', () => {
  it('takes the lowest value ascending and the highest descending, null when none', () => {
    const patient: FhirResource = {
      resourceType: 'Patient',
      name: [{ family: 'Östberg' }, { family: 'Adams' }],
      identifier: [
        { system: 'urn:b', value: '2' },
        { system: 'urn:a', value: '9' },
      ],
    };
    expect(values(patient, 'family,-family')).toEqual(['adams', 'ostberg']);
    expect(values(patient, 'identifier,-identifier')).toEqual(['urn:a\u00009', 'urn:b\u00002']);
    expect(values(patient, 'birthdate,-gender')).toEqual([null, null]);
  });

  it('sorts dates by the start of their range ascending and its end descending', () => {
    const encounter: FhirResource = {
      resourceType: 'Encounter',
      status: 'finished',
      class: { code: 'AMB' },
      period: { start: '2020-01-01', end: '2020-03' },
    };
    expect(values(encounter, 'date,-date')).toEqual([Date.parse('2020-01-01'), Date.parse('2020-04-01')]);
    const open: FhirResource = { ...encounter, period: { start: '2020-01-01' } };
    expect(values(open, '-date')).toEqual([Number.MAX_VALUE]);
  });

  it('sorts numbers and quantities by value, references by Type/id, tokens by system then code', () => {
    const observation: FhirResource = {
      resourceType: 'Observation',
      status: 'final',
      code: { coding: [{ system: 'http://loinc.org', code: '2' }, { code: '1' }] },
      subject: { reference: 'https://elsewhere.example/fhir/Patient/p1/_history/3' },
      valueQuantity: { value: 4.5, unit: 'mg' },
    };
    expect(values(observation, 'value-quantity,subject,code,-code')).toEqual([
      4.5,
      'Patient/p1',
      '\u00001',
      'http://loinc.org\u00002',
    ]);
    const risk: FhirResource = {
      resourceType: 'RiskAssessment',
      status: 'final',
      subject: { reference: 'Patient/p1' },
      prediction: [{ probabilityRange: { low: { value: 0.2 }, high: { value: 0.4 } } }],
    };
    expect(values(risk, 'probability,-probability')).toEqual([0.2, 0.4]);
  });
});
