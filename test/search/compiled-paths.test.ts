import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { generatePatients } from '../../bench/dataset.js';
import { readSynthea } from '../../bench/synthea.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { compilePath } from '../../src/search/compiled-paths.js';
import { createResourceIndexer, loadR4Indexer } from '../../src/search/index-resource.js';
import type { ResourceIndexer } from '../../src/storage/search-index.js';
import type { FhirResource } from '../../src/storage/types.js';

/*
 * The R4 indexer walks plain-path expressions on the JSON (src/search/compiled-paths.ts) instead
 * of running the FHIRPath interpreter: its entries must be exactly the interpreter's, for every
 * parameter of every type, over the shared Synthea sample and over generated and hand-made
 * resources (empty strings, nulls, several choice types, a choice under its plain name).
 */

const SYNTHEA = fileURLToPath(new URL('../../../shared/data/synthea-r4-100/', import.meta.url));
const hasSynthea = fs.existsSync(SYNTHEA);
/** Resources compared per type of the Synthea sample (the interpreter takes ms per resource). */
const PER_TYPE = 400;

let registry: SearchRegistry;
let compiled: ResourceIndexer;
let interpreted: ResourceIndexer;

beforeAll(async () => {
  registry = await loadSearchRegistry();
  compiled = await loadR4Indexer();
  interpreted = createResourceIndexer(registry, compiled.fingerprint);
});

function compare(resources: readonly FhirResource[]): void {
  for (const resource of resources) {
    const expected = interpreted.index(resource);
    const actual = compiled.index(resource);
    // One parameter at a time, so that a failure names it.
    for (const code of new Set([...Object.keys(expected), ...Object.keys(actual)])) {
      expect({
        resource: `${resource.resourceType}/${String(resource.id)}`,
        code,
        values: actual[code],
      }).toEqual({
        resource: `${resource.resourceType}/${String(resource.id)}`,
        code,
        values: expected[code],
      });
    }
  }
}

const edgeResources = (): FhirResource[] => [
  {
    resourceType: 'Patient',
    id: 'e1',
    gender: '',
    name: [null, { family: '', given: ['a', '', null] }, {}],
    birthDate: '2000',
  },
  {
    resourceType: 'Patient',
    id: 'e2',
    name: {},
    deceasedBoolean: false,
    multipleBirthInteger: 0,
    active: false,
    telecom: [{ value: '1' }],
  },
  {
    resourceType: 'Patient',
    id: 'e3',
    deceasedDateTime: '2020-01-01T10:00:00Z',
    address: [{ city: 'Köln', line: ['x', 'y'] }],
    link: [{ other: { reference: 'Patient/e1' } }],
  },
  {
    resourceType: 'Observation',
    id: 'e4',
    status: 'final',
    code: { text: 'only text' },
    valueAge: { value: 3, unit: 'a' },
    effectiveDateTime: '2020',
    effectivePeriod: { start: '2019' },
  },
  {
    resourceType: 'Observation',
    id: 'e5',
    status: 'final',
    code: { coding: [{ code: 'x' }] },
    value: { value: 1, unit: 'mg' },
    subject: { reference: 'https://x.org/fhir/Patient/1' },
  },
  {
    resourceType: 'Observation',
    id: 'e6',
    status: 'final',
    code: { coding: [] },
    valueCodeableConcept: { coding: [{ system: 's', code: 'c' }] },
    component: [
      { code: { coding: [{ code: 'k' }] }, valueQuantity: { value: 2 } },
      { code: {}, valueString: 'v' },
    ],
  },
  {
    resourceType: 'Observation',
    id: 'e7',
    status: 'final',
    code: { coding: [{ code: 'x' }] },
    valueRange: { low: { value: 1 }, high: { value: 2 } },
    effectiveTiming: { event: ['2020-01-01', '2021-01-01'] },
    subject: { reference: 'Group/1', type: 'Group' },
  },
  {
    resourceType: 'Encounter',
    id: 'e8',
    status: 'finished',
    class: { code: 'AMB' },
    period: { end: '2020-02' },
    length: { value: 30, unit: 'min' },
    subject: { identifier: { system: 's', value: 'v' } },
  },
  {
    resourceType: 'Condition',
    id: 'e9',
    subject: { reference: 'Patient/e1' },
    onsetAge: { value: 40 },
    abatementString: 'later',
    code: { coding: [{ system: 'http://snomed.info/sct', code: '1', display: 'Dísplay' }] },
  },
  {
    resourceType: 'MedicationRequest',
    id: 'e10',
    status: 'active',
    intent: 'order',
    subject: { reference: 'Patient/e1' },
    medicationReference: { reference: 'Medication/m' },
    authoredOn: '2020-03',
  },
  {
    resourceType: 'ValueSet',
    id: 'e11',
    status: 'active',
    url: 'http://x.org/vs',
    version: '1',
    useContext: [{ code: { code: 'focus' }, valueCodeableConcept: { coding: [{ code: 'c' }] } }],
  },
];

describe('compiled paths', () => {
  it('compile plain paths, choices and as, and nothing else', () => {
    const types = ['Quantity', 'dateTime'];
    expect(
      compilePath(
        'Patient.name.given',
        true,
        types,
      )?.({ resourceType: 'Patient', name: [{ given: ['a', 'b'] }, { given: 'c' }] }),
    ).toEqual(['a', 'b', 'c']);
    expect(
      compilePath(
        '(Observation.value as Quantity)',
        true,
        types,
      )?.({ resourceType: 'Observation', valueQuantity: { value: 1 } }),
    ).toEqual([{ value: 1 }]);
    expect(
      compilePath(
        'Observation.value.as(Quantity)',
        true,
        types,
      )?.({ resourceType: 'Observation', valueDateTime: '2020' }),
    ).toEqual([]);
    expect(
      compilePath(
        'Observation.value.as(Quantity)',
        true,
        types,
      )?.({ resourceType: 'Observation', value: {} }),
    ).toBeUndefined();
    expect(compilePath('Patient.name', true, types)?.({ resourceType: 'Person', name: [{}] })).toEqual([]);
    expect(compilePath('Patient.name.where(use.exists())', true, types)).toBeUndefined();
    const email = compilePath("Patient.telecom.where(system='email')", true, types);
    expect(
      email?.({ resourceType: 'Patient', telecom: [{ system: 'email', value: 'a' }, { value: 'b' }] }),
    ).toEqual([{ system: 'email', value: 'a' }]);
    expect(
      compilePath('valueDateTime | valuePeriod', false, types)?.({ valuePeriod: { start: '2020' } }),
    ).toEqual([{ start: '2020' }]);
    expect(
      compilePath('Patient.deceased.exists() and Patient.deceased != false', true, types),
    ).toBeUndefined();
    expect(compilePath('%resource.effective', false, types)).toBeUndefined();
  });

  it('leave composites out when asked (the embedded stores do not post them)', async () => {
    const observation = edgeResources().find((r) => r.id === 'e6')!;
    expect(Object.keys(compiled.index(observation))).toContain('combo-code-value-concept');
    const without = await loadR4Indexer({ composites: false });
    expect(without.fingerprint).not.toBe(compiled.fingerprint);
    const entries = without.index(observation);
    expect(Object.keys(entries)).not.toContain('combo-code-value-concept');
    expect(entries.code).toEqual(compiled.index(observation).code);
  });

  it('index only the parameters asked for, with the values of a full index', () => {
    const observation = edgeResources().find((r) => r.id === 'e6')!;
    const full = compiled.index(observation);
    const some = compiled.index(observation, new Set(['value-concept', 'status', 'no-such-parameter']));
    expect(Object.keys(some).sort()).toEqual(['status', 'value-concept']);
    for (const code of Object.keys(some)) expect(some[code]).toEqual(full[code]);
    expect(compiled.index(observation, new Set())).toEqual({});
  });

  it('index generated and hand-made resources exactly as the interpreter does', () => {
    compare([...(generatePatients(3, 7) as Iterable<FhirResource>), ...edgeResources()]);
  });

  it.runIf(hasSynthea || process.env.CI)('index the Synthea sample exactly as the interpreter does', () => {
    expect(hasSynthea, `the Synthea sample is missing at ${SYNTHEA}`).toBe(true);
    const byType = new Map<string, FhirResource[]>();
    for (const resource of readSynthea(SYNTHEA)) {
      const list = byType.get(resource.resourceType) ?? [];
      if (list.length < PER_TYPE) list.push(resource);
      byType.set(resource.resourceType, list);
    }
    expect(byType.size).toBeGreaterThan(10);
    for (const list of byType.values()) compare(list);
  });

  if (!hasSynthea && !process.env.CI) {
    it.skip(`the Synthea comparison: no sample at ${SYNTHEA}`, () => undefined);
  }
});
