import { beforeAll, describe, expect, it } from 'vitest';
import { createBindingCheck } from '../../../src/fhir/validation/binding-check.js';
import { BindingTable } from '../../../src/fhir/validation/binding-table.js';
import { loadMedplumR4 } from '../../../src/fhir/validation/medplum-r4.js';
import type { FhirResource } from '../../../src/storage/types.js';
import type { TerminologySource } from '../../../src/terminology/terminology-types.js';
import { countingTerminology } from '../../helpers/counting-terminology.js';

let table: BindingTable;
beforeAll(async () => {
  table = new BindingTable((await loadMedplumR4()).core);
});

const GENDER = 'http://hl7.org/fhir/ValueSet/administrative-gender';
const ISO3166 = 'urn:iso:std:iso:3166';

async function check(resource: Record<string, unknown>, source?: TerminologySource) {
  const terminology = await countingTerminology();
  return createBindingCheck(table, terminology)(resource as FhirResource, source);
}

/** A project source holding one code system (ISO 3166 with `US` only). */
function projectSource(): TerminologySource {
  const codeSystem = {
    resourceType: 'CodeSystem',
    url: ISO3166,
    content: 'complete',
    concept: [{ code: 'US' }],
  };
  return {
    key: 'p',
    find: (type, url) => Promise.resolve(type === 'CodeSystem' && url === ISO3166 ? codeSystem : undefined),
  };
}

describe('the binding table', () => {
  it('lists the bound coded elements of a resource, with strength and value set without version', () => {
    const patient = table.fields('Patient');
    expect(patient.get('gender')).toEqual({
      step: 'gender',
      binding: { strength: 'required', valueSet: GENDER },
      kind: 'code',
    });
    expect(patient.get('maritalStatus')?.binding?.strength).toBe('extensible');
    expect(patient.get('name')).toEqual({ step: 'name', walk: 'HumanName' });
    expect(table.fields('HumanName').get('use')?.binding?.strength).toBe('required');
    expect(patient.get('contained')).toEqual({ step: 'contained', resource: true });
  });

  it('walks data types with bound elements, choice elements by FHIRPath ofType, and leaves others out', () => {
    const observation = table.fields('Observation');
    expect(observation.get('valueQuantity')).toEqual({ step: 'value.ofType(Quantity)', walk: 'Quantity' });
    expect(observation.has('code')).toBe(false); // an example binding
    expect(observation.has('valueString')).toBe(false);
    expect(observation.has('effectiveDateTime')).toBe(false);
    for (const type of ['ContactPoint', 'Identifier', 'Address', 'Narrative'])
      expect(table.fields(type).size).toBeGreaterThan(0);
    expect(table.fields('Bundle').get('entry')?.walk).toBe('BundleEntry');
  });
});

describe('the binding check', () => {
  it('refuses a code outside a required value set, naming the element and the value set', async () => {
    const issues = await check({ resourceType: 'Patient', gender: 'mail' });
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatchObject({
      severity: 'error',
      code: 'code-invalid',
      expression: ['Patient.gender'],
    });
    expect(issues[0]!.details?.text).toContain(GENDER);
    expect(issues[0]!.details?.text).toContain('mail');
    expect(await check({ resourceType: 'Patient', gender: 'female' })).toEqual([]);
  });

  it('checks the bound elements of data types, backbone elements and choice values', async () => {
    const issues = await check({
      resourceType: 'Observation',
      status: 'finalized',
      code: { text: 'x' },
      valueQuantity: { value: 1, comparator: '~' },
      component: [{ code: { text: 'y' }, valueQuantity: { value: 2, comparator: '<' } }],
      identifier: [{ use: 'usual' }, { use: 'weird' }],
    });
    expect(issues.map((i) => i.expression?.[0])).toEqual([
      'Observation.status',
      'Observation.value.ofType(Quantity).comparator',
      'Observation.identifier[1].use',
    ]);
  });

  it('accepts codes of systems the server does not hold (LOINC in Observation.code)', async () => {
    const observation = {
      resourceType: 'Observation',
      status: 'final',
      code: { coding: [{ system: 'http://loinc.org', code: '8302-2' }] },
      interpretation: [{ coding: [{ system: 'http://snomed.info/sct', code: '281302008' }] }],
    };
    expect(await check(observation)).toEqual([]);
  });

  it('warns on extensible and preferred bindings when the system is held, never on example ones', async () => {
    const issues = await check({
      resourceType: 'Patient',
      maritalStatus: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', code: 'Q' }],
      },
    });
    expect(issues).toEqual([
      expect.objectContaining({
        severity: 'warning',
        expression: ['Patient.maritalStatus.coding[0]'],
      }),
    ]);
    const local = { coding: [{ system: 'http://example.org/local', code: 'Q' }] };
    expect(await check({ resourceType: 'Patient', maritalStatus: local })).toEqual([]);
  });

  it('errs on a CodeableConcept only when no coding is a member and none is undecided', async () => {
    const status = (coding: unknown[]) => ({
      resourceType: 'Condition',
      subject: { reference: 'Patient/1' },
      clinicalStatus: { coding },
    });
    const held = 'http://terminology.hl7.org/CodeSystem/condition-clinical';
    expect(await check(status([{ system: held, code: 'active' }]))).toEqual([]);
    expect(await check(status([{ system: held, code: 'nope' }]))).toEqual([
      expect.objectContaining({ severity: 'error', expression: ['Condition.clinicalStatus.coding[0]'] }),
    ]);
    const both = [
      { system: 'http://example.org/x', code: 'a' },
      { system: held, code: 'nope' },
    ];
    expect((await check(status(both)))[0]?.expression).toEqual(['Condition.clinicalStatus.coding[1]']);
    expect(await check(status([...both, { system: held, code: 'active' }]))).toEqual([]);
    expect(await check(status([{ system: 'http://example.org/x', code: 'a' }]))).toEqual([]);
  });

  it('checks contained resources and Bundle entries by their own type', async () => {
    const contained = await check({
      resourceType: 'Observation',
      status: 'final',
      code: { text: 'x' },
      contained: [{ resourceType: 'Patient', gender: 'mail' }],
    });
    expect(contained[0]?.expression).toEqual(['Observation.contained[0].ofType(Patient).gender']);
    const bundle = await check({
      resourceType: 'Bundle',
      type: 'collection',
      entry: [
        { resource: { resourceType: 'Patient' } },
        { resource: { resourceType: 'Patient', gender: 'x' } },
      ],
    });
    expect(bundle[0]?.expression).toEqual(['Bundle.entry[1].resource.ofType(Patient).gender']);
  });

  it('ignores values of the wrong shape (the structure check reports them)', async () => {
    expect(
      await check({ resourceType: 'Patient', gender: 5, name: [true, { use: 7 }], contained: [5] }),
    ).toEqual([]);
  });

  it("checks codings of a system the project uploaded against the project's code system, only then", async () => {
    const terminology = await countingTerminology();
    const run = createBindingCheck(table, terminology);
    const questionnaire = (code: string) =>
      ({
        resourceType: 'Questionnaire',
        status: 'active',
        jurisdiction: [{ coding: [{ system: ISO3166, code }] }],
      }) as FhirResource;
    expect(await run(questionnaire('XX'))).toEqual([]); // no project source: not held, never reported
    expect(await run(questionnaire('US'), projectSource())).toEqual([]);
    const issues = await run(questionnaire('XX'), projectSource());
    expect(issues).toEqual([
      expect.objectContaining({
        severity: 'warning', // an extensible binding
        expression: ['Questionnaire.jurisdiction[0].coding[0]'],
      }),
    ]);
    const calls = terminology.validateCodeCalls;
    await run({ resourceType: 'Patient', gender: 'male' }, projectSource());
    expect(terminology.validateCodeCalls).toBe(calls);
  });
});
