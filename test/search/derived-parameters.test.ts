import { describe, expect, it } from 'vitest';
import { R4_RESOURCE_TYPES } from '../../src/common/resource-types.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import { derivedParameters } from '../../src/search/derived-parameters.js';
import { loadR4Indexer } from '../../src/search/index-resource.js';
import { keptEntries } from '../../src/storage/postgres/index-rows.js';

describe('derivedParameters (R4)', () => {
  it('finds the Observation unions, restrictions and composites whose values are other parameters', async () => {
    const registry = await loadSearchRegistry();
    const observation = Object.fromEntries(derivedParameters(registry, 'Observation'));
    expect(observation).toEqual({
      'combo-code': { kind: 'union', parts: ['code', 'component-code'] },
      'combo-value-quantity': { kind: 'union', parts: ['component-value-quantity', 'value-quantity'] },
      'combo-value-concept': { kind: 'union', parts: ['component-value-concept', 'value-concept'] },
      'combo-data-absent-reason': {
        kind: 'union',
        parts: ['component-data-absent-reason', 'data-absent-reason'],
      },
      patient: { kind: 'union', parts: ['subject'], targetType: 'Patient' },
      'code-value-concept': { kind: 'composite', alternatives: [{ and: ['code', 'value-concept'] }] },
      'combo-code-value-concept': {
        kind: 'composite',
        alternatives: [{ and: ['code', 'value-concept'] }, { composite: 'component-code-value-concept' }],
      },
      // `value-quantity` also reads valueSampledData, which gives no quantity (next test).
      'code-value-quantity': { kind: 'composite', alternatives: [{ and: ['code', 'value-quantity'] }] },
      'combo-code-value-quantity': {
        kind: 'composite',
        alternatives: [{ and: ['code', 'value-quantity'] }, { composite: 'component-code-value-quantity' }],
      },
    });
  });

  it('leaves alone what differs from its would-be parts', async () => {
    const registry = await loadSearchRegistry();
    const observation = derivedParameters(registry, 'Observation');
    // `value-string` also reads valueCodeableConcept.text, the component valueString only;
    // `value-date` is a date (its rows carry its own hull).
    for (const code of ['code-value-string', 'code-value-date']) expect(observation.has(code)).toBe(false);
    // `code-value-quantity` is `code` and `value-quantity` only because a valueSampledData, which
    // `value-quantity` reads and its component does not, gives the indexer no quantity.
    const indexer = await loadR4Indexer();
    const sampled = indexer.index({
      resourceType: 'Observation',
      id: 's',
      code: { coding: [{ code: 'c' }] },
      valueSampledData: {
        origin: { value: 1, system: 'http://unitsofmeasure.org', code: 'mV' },
        period: 10,
        dimensions: 1,
        lowerLimit: 0,
        upperLimit: 5,
        data: '1 2 3',
      },
    });
    expect(sampled['value-quantity'] ?? []).toEqual([]);
    // The composite's element lacks its quantity: no composite value (and no PostgreSQL rows).
    expect(sampled['code-value-quantity']).toEqual([
      { type: 'composite', components: [[{ type: 'token', code: 'c' }], []] },
    ]);
    // The other R4 types have reference restrictions only (`patient`, `practitioner`, `location`
    // of a wider reference); every part is a parameter of the type that is not derived itself.
    const restrictions: string[] = [];
    for (const type of R4_RESOURCE_TYPES) {
      const derived = derivedParameters(registry, type);
      for (const [code, d] of derived) {
        if (type === 'Observation') continue;
        expect(d.kind === 'union' && d.targetType !== undefined, `${type} ${code}`).toBe(true);
        restrictions.push(`${type}.${code}`);
      }
      for (const d of derived.values()) {
        const parts =
          d.kind === 'union' ? d.parts : d.alternatives.flatMap((a) => ('and' in a ? a.and : [a.composite]));
        for (const part of parts) {
          expect(registry.get(type, part)).toBeDefined();
          expect(derived.has(part)).toBe(false);
        }
      }
    }
    expect(restrictions).toEqual(
      expect.arrayContaining([
        'Condition.patient',
        'Encounter.patient',
        'Encounter.practitioner',
        'AuditEvent.patient',
      ]),
    );
    expect(restrictions.length).toBe(47);
    // A reference of its own element is no restriction: Immunization.patient, Claim.patient.
    expect(derivedParameters(registry, 'Immunization').has('patient')).toBe(false);
    expect(derivedParameters(registry, 'Claim').has('patient')).toBe(false);
  });

  it('is what the R4 indexer reports', async () => {
    const indexer = await loadR4Indexer();
    expect([...indexer.derived!('Observation').keys()].sort()).toEqual(
      [...derivedParameters(await loadSearchRegistry(), 'Observation').keys()].sort(),
    );
    expect(indexer.derived!('Patient').size).toBe(0);
  });

  it('lets PostgreSQL ask the indexer for the parameters it keeps rows of only', async () => {
    const indexer = await loadR4Indexer();
    const observation = {
      resourceType: 'Observation',
      id: 'o',
      status: 'final',
      code: { coding: [{ system: 'http://loinc.org', code: '2345-7' }] },
      subject: { reference: 'Patient/p' },
      valueQuantity: { value: 5, system: 'http://unitsofmeasure.org', code: 'mg' },
      component: [{ code: { coding: [{ code: 'c' }] }, valueCodeableConcept: { coding: [{ code: 'v' }] } }],
    };
    const all = indexer.index(observation);
    const kept = keptEntries(indexer, observation);
    const derived = indexer.derived!('Observation');
    for (const code of ['combo-code', 'patient', 'combo-code-value-quantity', 'code-value-quantity'])
      expect(all[code], code).toBeDefined();
    expect(Object.keys(kept).sort()).toEqual(
      Object.keys(all)
        .filter((c) => !derived.has(c))
        .sort(),
    );
    for (const code of Object.keys(kept)) expect(kept[code]).toEqual(all[code]);
    expect(indexer.codes!('Observation').has('combo-code')).toBe(true);
    // A type without derived parameters: everything, as `index` answers.
    const patient = { resourceType: 'Patient', id: 'p', name: [{ family: 'Smith' }], gender: 'female' };
    expect(keptEntries(indexer, patient)).toEqual(indexer.index(patient));
  });
});
