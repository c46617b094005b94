/**
 * The code systems and codes an AuditEvent of this server uses: the R4 bindings of `AuditEvent`
 * (DICOM PS3.16 CID 400/401/402 "Audit Event ID / Type Code / Participant Role", FHIR
 * `restful-interaction`, and the HL7 terminology code systems of the other elements).
 * @see https://hl7.org/fhir/R4/auditevent.html
 */

/** The resource type of the audit trail. */
export const AUDIT_EVENT_TYPE = 'AuditEvent';

/** A FHIR `Coding`. */
export interface Coding {
  system: string;
  code: string;
  display?: string;
}

export const DICOM = 'http://dicom.nema.org/resources/ontology/DCM';
export const RESTFUL_INTERACTION = 'http://hl7.org/fhir/restful-interaction';
export const SOURCE_TYPE = 'http://terminology.hl7.org/CodeSystem/security-source-type';
export const ENTITY_TYPE = 'http://terminology.hl7.org/CodeSystem/audit-entity-type';
export const OBJECT_ROLE = 'http://terminology.hl7.org/CodeSystem/object-role';
export const RESOURCE_TYPES = 'http://hl7.org/fhir/resource-types';
export const SECURITY_ROLE = 'http://terminology.hl7.org/CodeSystem/extra-security-role-type';

/** Identifier systems of the records that are not FHIR resources (clients, users, projects, jobs). */
export const IDENTIFIER_SYSTEMS = {
  client: 'urn:fhir-platform-kit:client',
  user: 'urn:fhir-platform-kit:user',
  project: 'urn:fhir-platform-kit:project',
  exportJob: 'urn:fhir-platform-kit:export-job',
  importJob: 'urn:fhir-platform-kit:import-job',
} as const;

function dicom(code: string, display: string): Coding {
  return { system: DICOM, code, display };
}

/** `AuditEvent.type` (DICOM CID 400, Audit Event ID). */
export const EVENT_TYPE = {
  applicationActivity: dicom('110100', 'Application Activity'),
  export: dicom('110106', 'Export'),
  import: dicom('110107', 'Import'),
  patientRecord: dicom('110110', 'Patient Record'),
  query: dicom('110112', 'Query'),
  securityAlert: dicom('110113', 'Security Alert'),
  userAuthentication: dicom('110114', 'User Authentication'),
} as const;

/** `AuditEvent.subtype` codes of DICOM (CID 401, Audit Event Type Code). */
export const EVENT_SUBTYPE = {
  login: dicom('110122', 'Login'),
  securityConfiguration: dicom('110129', 'Security Configuration'),
  useOfRestrictedFunction: dicom('110132', 'Use of Restricted Function'),
  securityRolesChanged: dicom('110136', 'Security Roles Changed'),
  userSecurityAttributesChanged: dicom('110137', 'User Security Attributes Changed'),
} as const;

/** FHIR R4 RESTful interactions (`AuditEvent.subtype`). */
export type RestfulInteraction =
  'read' | 'vread' | 'update' | 'delete' | 'create' | 'search-type' | 'batch' | 'transaction' | 'operation';

export function restfulInteraction(code: RestfulInteraction): Coding {
  return { system: RESTFUL_INTERACTION, code };
}

/** `AuditEvent.agent.type`: a client application (DICOM CID 402) or a human user. */
export const AGENT_TYPE = {
  application: dicom('110150', 'Application'),
  humanUser: { system: SECURITY_ROLE, code: 'humanuser', display: 'human user' },
} as const;

/** `AuditEvent.source.type`: this server is an application server. */
export const APPLICATION_SERVER: Coding = { system: SOURCE_TYPE, code: '4', display: 'Application Server' };

/** `AuditEvent.entity.type` (audit-entity-type). */
export const ENTITY_KIND = {
  person: { system: ENTITY_TYPE, code: '1', display: 'Person' },
  systemObject: { system: ENTITY_TYPE, code: '2', display: 'System Object' },
} as const;

/** `AuditEvent.entity.role` (object-role). */
export const ENTITY_ROLE = {
  patient: { system: OBJECT_ROLE, code: '1', display: 'Patient' },
  domainResource: { system: OBJECT_ROLE, code: '4', display: 'Domain Resource' },
  securityUser: { system: OBJECT_ROLE, code: '11', display: 'Security User Entity' },
  securityResource: { system: OBJECT_ROLE, code: '13', display: 'Security Resource' },
  dataDestination: { system: OBJECT_ROLE, code: '16', display: 'Data Destination' },
  job: { system: OBJECT_ROLE, code: '20', display: 'Job' },
  query: { system: OBJECT_ROLE, code: '24', display: 'Query' },
} as const;

/** `AuditEvent.action` (audit-event-action): Create, Read, Update, Delete, Execute. */
export type AuditAction = 'C' | 'R' | 'U' | 'D' | 'E';

/** `AuditEvent.outcome` (audit-event-outcome): success, minor, serious or major failure. */
export type AuditOutcomeCode = '0' | '4' | '8' | '12';
