import { describe, expect, it } from 'vitest';
import {
  compartmentParams,
  patientCompartmentIds,
  patientCompartmentTypes,
  patientIdOfReference,
  patientIdsForParam,
  patientSearchParams,
} from '../../src/fhir/compartment.js';
import { isResourceType } from '../../src/common/resource-types.js';

describe('patientCompartmentIds', () => {
  it('puts a Patient in its own compartment and in those of patients it links to', () => {
    expect(patientCompartmentIds({ resourceType: 'Patient', id: 'p1' })).toEqual(['p1']);
    expect(
      patientCompartmentIds({
        resourceType: 'Patient',
        id: 'p1',
        link: [{ other: { reference: 'Patient/p2' }, type: 'seealso' }],
      }).sort(),
    ).toEqual(['p1', 'p2']);
  });

  it('reads top-level references (subject, performer) and keeps only Patient targets', () => {
    const ids = patientCompartmentIds({
      resourceType: 'Observation',
      subject: { reference: 'Patient/a' },
      performer: [{ reference: 'Practitioner/x' }, { reference: 'Patient/b' }],
    });
    expect(ids.sort()).toEqual(['a', 'b']);
  });

  it('reads nested and repeated paths', () => {
    expect(
      patientCompartmentIds({
        resourceType: 'CareTeam',
        participant: [{ member: { reference: 'Patient/m1' } }, { member: { reference: 'Patient/m2' } }],
      }).sort(),
    ).toEqual(['m1', 'm2']);
    expect(
      patientCompartmentIds({
        resourceType: 'CarePlan',
        activity: [{ detail: { performer: [{ reference: 'Patient/c1' }] } }],
      }),
    ).toEqual(['c1']);
    expect(
      patientCompartmentIds({
        resourceType: 'Procedure',
        subject: { reference: 'Patient/s' },
        performer: [{ actor: { reference: 'Patient/s' } }, { actor: { reference: 'Patient/t' } }],
      }),
    ).toEqual(['s', 't']);
    expect(
      patientCompartmentIds({
        resourceType: 'Provenance',
        target: [{ reference: 'Observation/o' }, { reference: 'Patient/pv' }],
      }),
    ).toEqual(['pv']);
    expect(
      patientCompartmentIds({
        resourceType: 'AuditEvent',
        agent: [{ who: { reference: 'Patient/w' } }],
        entity: [{ what: { reference: 'Patient/e' } }],
      }).sort(),
    ).toEqual(['e', 'w']);
    expect(
      patientCompartmentIds({ resourceType: 'Group', member: [{ entity: { reference: 'Patient/g1' } }] }),
    ).toEqual(['g1']);
    expect(
      patientCompartmentIds({
        resourceType: 'Claim',
        patient: { reference: 'Patient/x' },
        payee: { party: { reference: 'Patient/y' } },
      }),
    ).toEqual(['x', 'y']);
  });

  it('accepts absolute and versioned references, ignores others', () => {
    expect(patientIdOfReference('https://h.example/fhir/R4/Patient/abc')).toBe('abc');
    expect(patientIdOfReference('Patient/abc/_history/3')).toBe('abc');
    expect(patientIdOfReference('urn:uuid:1234')).toBeUndefined();
    expect(patientIdOfReference('MyPatient/abc')).toBeUndefined();
    expect(patientIdOfReference('Patient/')).toBeUndefined();
    expect(
      patientCompartmentIds({
        resourceType: 'Encounter',
        subject: { identifier: { value: 'x' } },
        participant: [{ individual: { reference: 'Patient/nope' } }],
      }),
    ).toEqual([]);
  });

  it('ignores malformed shapes without throwing', () => {
    for (const subject of [
      null,
      1,
      'Patient/x',
      [null, 2],
      { reference: 7 },
      [[{ reference: 'Patient/n' }]],
    ]) {
      expect(() => patientCompartmentIds({ resourceType: 'Observation', subject })).not.toThrow();
    }
    expect(patientCompartmentIds({ resourceType: 'Organization', id: 'o' })).toEqual([]);
    expect(patientCompartmentIds({ resourceType: 'NotAType' })).toEqual([]);
  });
});

describe('compartment table', () => {
  it('lists only R4 types, includes the common clinical ones and excludes definitional ones', () => {
    const types = patientCompartmentTypes();
    for (const t of types) expect(isResourceType(t)).toBe(true);
    for (const t of [
      'Patient',
      'Observation',
      'Encounter',
      'Condition',
      'Claim',
      'ExplanationOfBenefit',
      'Provenance',
    ]) {
      expect(types).toContain(t);
    }
    for (const t of ['Organization', 'Practitioner', 'Medication', 'Task', 'ValueSet'])
      expect(types).not.toContain(t);
    expect(types.length).toBe(66);
  });

  it('names the compartment parameters and the patient search parameters', () => {
    expect(compartmentParams('Coverage')).toEqual(['policy-holder', 'subscriber', 'beneficiary', 'payor']);
    expect(compartmentParams('Observation')).toEqual(['subject', 'performer']);
    expect(compartmentParams('Organization')).toEqual([]);
    expect(patientSearchParams('Observation').sort()).toEqual(['patient', 'performer', 'subject']);
    expect(patientSearchParams('Encounter').sort()).toEqual(['patient', 'subject']);
  });

  it('reads one parameter at a time', () => {
    const obs = {
      resourceType: 'Observation',
      subject: { reference: 'Patient/a' },
      performer: [{ reference: 'Patient/b' }],
    };
    expect(patientIdsForParam(obs, 'patient')).toEqual(['a']);
    expect(patientIdsForParam(obs, 'performer')).toEqual(['b']);
    expect(patientIdsForParam(obs, 'code')).toBeUndefined();
  });

  it('returns copies', () => {
    patientCompartmentTypes().push('X');
    expect(patientCompartmentTypes()).not.toContain('X');
  });
});
