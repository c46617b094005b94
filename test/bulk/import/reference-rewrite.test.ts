import { describe, expect, it } from 'vitest';
import { referenceRewriter } from '../../../src/bulk/import/reference-rewrite.js';
import type { FhirResource } from '../../../src/storage/types.js';

describe('referenceRewriter', () => {
  const rewrite = referenceRewriter('https://src.example/fhir/')!;

  it('makes references to the source relative at any depth, and leaves the others alone', () => {
    const resource = {
      resourceType: 'Observation',
      id: 'o1',
      subject: { reference: 'https://src.example/fhir/Patient/p1' },
      performer: [
        { reference: 'https://other.example/fhir/Practitioner/x' },
        { reference: 'https://src.example/fhir/Practitioner/y/_history/2' },
      ],
      contained: [{ resourceType: 'Device', note: [{ text: 'https://src.example/fhir/Patient/p1' }] }],
      focus: [{ reference: 'https://src.example/fhir/not a reference' }],
      hasMember: [{ reference: 'Observation/o2' }],
    };
    const before = structuredClone(resource);
    expect(rewrite(resource as unknown as FhirResource)).toEqual({
      ...before,
      subject: { reference: 'Patient/p1' },
      performer: [before.performer[0], { reference: 'Practitioner/y/_history/2' }],
    });
  });

  it('is undefined without a source base', () => {
    expect(referenceRewriter(undefined)).toBeUndefined();
  });
});
