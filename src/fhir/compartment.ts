import type { FhirResource, PatientCompartment } from '../storage/types.js';

/**
 * The FHIR R4 Patient compartment.
 *
 * For each resource type the CompartmentDefinition "Patient" (4.0.1) names the search parameters
 * whose references place a resource in a patient's compartment; each parameter is mapped here to the
 * element paths of its R4 SearchParameter expression (a `.where(resolve() is Patient)` filter becomes
 * "the reference points at a Patient", which is checked for every path anyway).
 *
 * @see https://hl7.org/fhir/R4/compartmentdefinition-patient.html
 * @see https://hl7.org/fhir/R4/searchparameter-registry.html
 */
const PATIENT_COMPARTMENT: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>> = {
  Account: { subject: ['subject'] },
  AdverseEvent: { subject: ['subject'] },
  AllergyIntolerance: { patient: ['patient'], recorder: ['recorder'], asserter: ['asserter'] },
  Appointment: { actor: ['participant.actor'] },
  AppointmentResponse: { actor: ['actor'] },
  AuditEvent: { patient: ['agent.who', 'entity.what'] },
  Basic: { patient: ['subject'], author: ['author'] },
  BodyStructure: { patient: ['patient'] },
  CarePlan: { patient: ['subject'], performer: ['activity.detail.performer'] },
  CareTeam: { patient: ['subject'], participant: ['participant.member'] },
  ChargeItem: { subject: ['subject'] },
  Claim: { patient: ['patient'], payee: ['payee.party'] },
  ClaimResponse: { patient: ['patient'] },
  ClinicalImpression: { subject: ['subject'] },
  Communication: { subject: ['subject'], sender: ['sender'], recipient: ['recipient'] },
  CommunicationRequest: {
    subject: ['subject'],
    sender: ['sender'],
    recipient: ['recipient'],
    requester: ['requester'],
  },
  Composition: { subject: ['subject'], author: ['author'], attester: ['attester.party'] },
  Condition: { patient: ['subject'], asserter: ['asserter'] },
  Consent: { patient: ['patient'] },
  Coverage: {
    'policy-holder': ['policyHolder'],
    subscriber: ['subscriber'],
    beneficiary: ['beneficiary'],
    payor: ['payor'],
  },
  CoverageEligibilityRequest: { patient: ['patient'] },
  CoverageEligibilityResponse: { patient: ['patient'] },
  DetectedIssue: { patient: ['patient'] },
  DeviceRequest: { subject: ['subject'], performer: ['performer'] },
  DeviceUseStatement: { subject: ['subject'] },
  DiagnosticReport: { subject: ['subject'] },
  DocumentManifest: { subject: ['subject'], author: ['author'], recipient: ['recipient'] },
  DocumentReference: { subject: ['subject'], author: ['author'] },
  Encounter: { patient: ['subject'] },
  EnrollmentRequest: { subject: ['candidate'] },
  EpisodeOfCare: { patient: ['patient'] },
  ExplanationOfBenefit: { patient: ['patient'], payee: ['payee.party'] },
  FamilyMemberHistory: { patient: ['patient'] },
  Flag: { patient: ['subject'] },
  Goal: { patient: ['subject'] },
  Group: { member: ['member.entity'] },
  ImagingStudy: { patient: ['subject'] },
  Immunization: { patient: ['patient'] },
  ImmunizationEvaluation: { patient: ['patient'] },
  ImmunizationRecommendation: { patient: ['patient'] },
  Invoice: { subject: ['subject'], patient: ['subject'], recipient: ['recipient'] },
  List: { subject: ['subject'], source: ['source'] },
  MeasureReport: { patient: ['subject'] },
  Media: { subject: ['subject'] },
  MedicationAdministration: { patient: ['subject'], performer: ['performer.actor'], subject: ['subject'] },
  MedicationDispense: { subject: ['subject'], patient: ['subject'], receiver: ['receiver'] },
  MedicationRequest: { subject: ['subject'] },
  MedicationStatement: { subject: ['subject'] },
  MolecularSequence: { patient: ['patient'] },
  NutritionOrder: { patient: ['patient'] },
  Observation: { subject: ['subject'], performer: ['performer'] },
  Patient: { link: ['link.other'] },
  Person: { patient: ['link.target'] },
  Procedure: { patient: ['subject'], performer: ['performer.actor'] },
  Provenance: { patient: ['target'] },
  QuestionnaireResponse: { subject: ['subject'], author: ['author'] },
  RelatedPerson: { patient: ['patient'] },
  RequestGroup: { subject: ['subject'], participant: ['action.participant'] },
  ResearchSubject: { individual: ['individual'] },
  RiskAssessment: { subject: ['subject'] },
  Schedule: { actor: ['actor'] },
  ServiceRequest: { subject: ['subject'], performer: ['performer'] },
  Specimen: { subject: ['subject'] },
  SupplyDelivery: { patient: ['patient'] },
  SupplyRequest: { subject: ['deliverTo'] },
  VisionPrescription: { patient: ['patient'] },
};

/**
 * R4 `patient` / `subject` search parameters of compartment types that are not compartment criteria
 * themselves but select by the same references (`Observation?patient=…` is what clients send).
 */
const EXTRA_PATIENT_PARAMS: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>> = {
  Account: { patient: ['subject'] },
  Appointment: { patient: ['participant.actor'] },
  AppointmentResponse: { patient: ['actor'] },
  Basic: { subject: ['subject'] },
  CarePlan: { subject: ['subject'] },
  CareTeam: { subject: ['subject'] },
  ChargeItem: { patient: ['subject'] },
  ClinicalImpression: { patient: ['subject'] },
  Communication: { patient: ['subject'] },
  CommunicationRequest: { patient: ['subject'] },
  Composition: { patient: ['subject'] },
  Condition: { subject: ['subject'] },
  Coverage: { patient: ['beneficiary'] },
  DeviceRequest: { patient: ['subject'] },
  DeviceUseStatement: { patient: ['subject'] },
  DiagnosticReport: { patient: ['subject'] },
  DocumentManifest: { patient: ['subject'] },
  DocumentReference: { patient: ['subject'] },
  Encounter: { subject: ['subject'] },
  EnrollmentRequest: { patient: ['candidate'] },
  Flag: { subject: ['subject'] },
  Goal: { subject: ['subject'] },
  ImagingStudy: { subject: ['subject'] },
  List: { patient: ['subject'] },
  MeasureReport: { subject: ['subject'] },
  Media: { patient: ['subject'] },
  MedicationRequest: { patient: ['subject'] },
  MedicationStatement: { patient: ['subject'] },
  Observation: { patient: ['subject'] },
  Procedure: { subject: ['subject'] },
  QuestionnaireResponse: { patient: ['subject'] },
  RequestGroup: { patient: ['subject'] },
  ResearchSubject: { patient: ['individual'] },
  RiskAssessment: { patient: ['subject'] },
  ServiceRequest: { patient: ['subject'] },
  Specimen: { patient: ['subject'] },
};

type Path = readonly string[];

interface CompiledType {
  /** Compartment criteria parameter names, in definition order. */
  compartmentParams: readonly string[];
  /** Union of every compartment parameter's paths, deduplicated (what membership walks). */
  memberPaths: readonly Path[];
  /** Every patient-reference search parameter (criteria and extras) -> its paths. */
  searchParams: ReadonlyMap<string, readonly Path[]>;
}

function compile(): ReadonlyMap<string, CompiledType> {
  const out = new Map<string, CompiledType>();
  for (const [type, params] of Object.entries(PATIENT_COMPARTMENT)) {
    const seen = new Set<string>();
    const memberPaths: Path[] = [];
    const searchParams = new Map<string, readonly Path[]>();
    for (const [param, paths] of Object.entries(params)) {
      searchParams.set(
        param,
        paths.map((p) => p.split('.')),
      );
      for (const p of paths) {
        if (seen.has(p)) continue;
        seen.add(p);
        memberPaths.push(p.split('.'));
      }
    }
    for (const [param, paths] of Object.entries(EXTRA_PATIENT_PARAMS[type] ?? {})) {
      searchParams.set(
        param,
        paths.map((p) => p.split('.')),
      );
    }
    out.set(type, { compartmentParams: Object.keys(params), memberPaths, searchParams });
  }
  return out;
}

// Immutable after construction: shared safely by every mount.
const COMPILED = compile();
const COMPARTMENT_TYPES: readonly string[] = Object.freeze([...COMPILED.keys()]);

/** `Patient/<id>` at the end of a relative or absolute reference, optionally with `/_history/<vid>`. */
const PATIENT_REFERENCE = /(?:^|\/)Patient\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/** The patient id a reference string points at, or undefined. */
export function patientIdOfReference(reference: string): string | undefined {
  // Cheap pre-check keeps the regex off the many non-Patient references.
  if (!reference.includes('Patient/')) return undefined;
  return PATIENT_REFERENCE.exec(reference)?.[1];
}

function collect(value: unknown, path: Path, index: number, out: string[]): void {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const item of value) collect(item, path, index, out);
    return;
  }
  if (index === path.length) {
    const reference = (value as { reference?: unknown }).reference;
    if (typeof reference === 'string') {
      const id = patientIdOfReference(reference);
      if (id !== undefined && !out.includes(id)) out.push(id);
    }
    return;
  }
  collect((value as Record<string, unknown>)[path[index]!], path, index + 1, out);
}

/**
 * Ids of the patients in whose compartment `resource` is: a Patient is in its own compartment, and
 * any resource is in the compartment of each Patient its compartment parameters reference.
 * Runs on every write, so it walks only the precompiled paths of the resource's type.
 * FHIR R4 CompartmentDefinition "Patient".
 */
export function patientCompartmentIds(resource: FhirResource): string[] {
  const out: string[] = [];
  if (resource.resourceType === 'Patient' && typeof resource.id === 'string') out.push(resource.id);
  const compiled = COMPILED.get(resource.resourceType);
  if (!compiled) return out;
  for (const path of compiled.memberPaths) collect(resource[path[0]!], path, 1, out);
  return out;
}

/** The resource types that may be in a patient's compartment (what a Patient/Group export reads). */
export function patientCompartmentTypes(): string[] {
  return [...COMPARTMENT_TYPES];
}

/** Whether resources of `resourceType` may be in a patient's compartment (Patient included). */
export function isPatientCompartmentType(resourceType: string): boolean {
  return COMPILED.has(resourceType);
}

/** The compartment parameters (inclusion criteria) of `resourceType`; empty when never in it. */
export function compartmentParams(resourceType: string): string[] {
  return [...(COMPILED.get(resourceType)?.compartmentParams ?? [])];
}

/**
 * The FHIR R4 Patient compartment as storage takes it (`PatientCompartment`): the default of
 * `fileStorage`, `memoryStorage` and `postgresStorage`.
 */
export const R4_PATIENT_COMPARTMENT: PatientCompartment = Object.freeze({
  types: COMPARTMENT_TYPES,
  params: compartmentParams,
  patientIds: patientCompartmentIds,
});

/**
 * Every search parameter of `resourceType` that selects by a reference to a Patient: the
 * compartment parameters plus the R4 `patient` / `subject` parameters over the same elements.
 */
export function patientSearchParams(resourceType: string): string[] {
  return [...(COMPILED.get(resourceType)?.searchParams.keys() ?? [])];
}

/**
 * Ids of the patients referenced by `resource` through one search parameter of
 * `patientSearchParams`; undefined when the type has no such parameter.
 */
export function patientIdsForParam(resource: FhirResource, param: string): string[] | undefined {
  const paths = COMPILED.get(resource.resourceType)?.searchParams.get(param);
  if (!paths) return undefined;
  const out: string[] = [];
  for (const path of paths) collect(resource[path[0]!], path, 1, out);
  return out;
}

function collectReferences(value: unknown, path: Path, index: number, out: string[]): void {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const item of value) collectReferences(item, path, index, out);
    return;
  }
  if (index === path.length) {
    const reference = (value as { reference?: unknown }).reference;
    if (typeof reference === 'string') out.push(reference);
    return;
  }
  collectReferences((value as Record<string, unknown>)[path[index]!], path, index + 1, out);
}

/**
 * Every reference string (of any target type) found at the elements of one search parameter of
 * `patientSearchParams`; undefined when the type has no such parameter.
 */
export function referencesForParam(resource: FhirResource, param: string): string[] | undefined {
  const paths = COMPILED.get(resource.resourceType)?.searchParams.get(param);
  if (!paths) return undefined;
  const out: string[] = [];
  for (const path of paths) collectReferences(resource[path[0]!], path, 1, out);
  return out;
}
