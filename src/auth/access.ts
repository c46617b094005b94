import { AUDIT_EVENT_TYPE } from '../audit/codes.js';
import { auditEventAccess } from './audit-event-access.js';
import type { Principal } from '../http/principal.js';
import { scopesAllow, type ScopeAction } from './scopes.js';

/** FHIR interactions a router asks about. */
export type ResourceAction = 'create' | 'read' | 'update' | 'delete' | 'search';

const ACTION_LETTER: Record<ResourceAction, ScopeAction> = {
  create: 'c',
  read: 'r',
  update: 'u',
  delete: 'd',
  search: 's',
};

/**
 * The one access decision every FHIR-facing router asks: may `principal` perform `action` on
 * resources of `resourceType` in its own project? The principal's SMART scopes decide, for admins too
 * (an admin token narrowed to `system/Patient.read` only reads Patients). One exception, for
 * principals a host builds itself: an admin or super admin with no scopes at all may do anything in
 * the project it acts in. `bearerAuth` never produces one (its admins carry `project:admin`).
 * `AuditEvent` has its own rule (`auditEventAccess`: admins whose scopes name it; never written).
 * See docs/auth.md "Scopes" and docs/audit.md.
 */
export function canAccess(principal: Principal, resourceType: string, action: ResourceAction): boolean {
  if (resourceType === AUDIT_EVENT_TYPE) return auditEventAccess(principal, ACTION_LETTER[action]);
  if ((principal.superAdmin || principal.admin) && principal.scopes.length === 0) return true;
  return scopesAllow(principal.scopes, resourceType, ACTION_LETTER[action]);
}
