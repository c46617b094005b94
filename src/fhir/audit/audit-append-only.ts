import { FhirError } from '../../http/http-error.js';
import { AUDIT_EVENT_TYPE } from '../../audit/codes.js';

/**
 * The audit trail is append-only: no API creates, updates or deletes an `AuditEvent` (plain
 * requests, batch and transaction entries, NDJSON upload lines). A 405 `not-supported`
 * OperationOutcome with `Allow: GET` (the interaction is not supported on this type, as the FHIR
 * REST API answers an unsupported interaction), before any access check: nobody may, so nobody
 * needs to be told about scopes. Only the trail writes them, through storage.
 * @see https://hl7.org/fhir/R4/http.html
 */
export function refuseAuditEventWrite(resourceType: string, action: string): void {
  if (resourceType !== AUDIT_EVENT_TYPE) return;
  if (action === 'read' || action === 'search') return;
  throw new FhirError(405, 'not-supported', `AuditEvent is append-only: ${action} is not supported`, {
    headers: { Allow: 'GET' },
  });
}
