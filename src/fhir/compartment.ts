import type { FhirResource } from '../storage/types.js';

// PROVISIONAL: the FHIR data plane work replaces this table with the full R4 Patient
// CompartmentDefinition. The signature of `patientCompartmentIds` is the contract storage uses.

/** Resource type -> top-level elements whose references place it in a patient's compartment. */
const PROVISIONAL_PATHS: Record<string, string[]> = {
  Observation: ['subject', 'performer'],
  Condition: ['subject', 'asserter'],
  Encounter: ['subject'],
  Procedure: ['subject', 'performer'],
  MedicationRequest: ['subject'],
  Immunization: ['patient'],
  AllergyIntolerance: ['patient', 'recorder', 'asserter'],
  DiagnosticReport: ['subject'],
  CarePlan: ['subject'],
  Claim: ['patient', 'payee'],
  ExplanationOfBenefit: ['patient', 'payee'],
};

function referencedPatientIds(value: unknown, out: Set<string>): void {
  if (Array.isArray(value)) {
    for (const item of value) referencedPatientIds(item, out);
    return;
  }
  if (typeof value !== 'object' || value === null) return;
  const reference = (value as { reference?: unknown }).reference;
  if (typeof reference === 'string') {
    const match = /^(?:.*\/)?Patient\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/.*)?$/.exec(reference);
    if (match?.[1]) out.add(match[1]);
  }
  const actor = (value as { actor?: unknown }).actor;
  if (actor) referencedPatientIds(actor, out);
}

/**
 * Ids of the patients in whose compartment `resource` is (a Patient is in its own compartment).
 * FHIR R4 CompartmentDefinition "Patient".
 */
export function patientCompartmentIds(resource: FhirResource): string[] {
  const out = new Set<string>();
  if (resource.resourceType === 'Patient' && typeof resource.id === 'string') out.add(resource.id);
  for (const path of PROVISIONAL_PATHS[resource.resourceType] ?? []) {
    referencedPatientIds(resource[path], out);
  }
  return [...out];
}
