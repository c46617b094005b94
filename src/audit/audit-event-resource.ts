/** The R4 `AuditEvent` resource as `buildAuditEvent` writes it (https://hl7.org/fhir/R4/auditevent.html). */
import type { FhirResource } from '../storage/types.js';
import type { AuditAction, AuditOutcomeCode, Coding } from './codes.js';

/** An R4 `Reference` as the builder writes it. */
export interface AuditReference {
  reference?: string;
  identifier?: { system: string; value: string };
  display?: string;
}

export interface AuditEventAgent {
  type: { coding: Coding[] };
  who?: AuditReference;
  altId?: string;
  name?: string;
  requestor: boolean;
  network?: { address: string; type: '1' | '2' };
}

export interface AuditEventEntity {
  what?: AuditReference;
  type?: Coding;
  role?: Coding;
  description?: string;
  /** base64 of the query string (R4 `entity.query`). */
  query?: string;
  detail?: { type: string; valueString: string }[];
}

/** The R4 `AuditEvent` the builder produces. */
export interface AuditEventResource extends FhirResource {
  resourceType: 'AuditEvent';
  id?: string;
  type: Coding;
  subtype?: Coding[];
  action: AuditAction;
  /** When the refusals an event counts came (the first, the last). */
  period?: { start: string; end: string };
  recorded: string;
  outcome: AuditOutcomeCode;
  outcomeDesc?: string;
  agent: AuditEventAgent[];
  source: { site: string; observer: { display: string }; type: Coding[] };
  entity?: AuditEventEntity[];
}
