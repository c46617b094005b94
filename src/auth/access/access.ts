import { AUDIT_EVENT_TYPE } from '../../audit/codes.js';
import { auditEventAccess } from './audit-event-access.js';
import type { Principal } from '../../http/principal.js';
import { scopesAllow, type ScopeAction, type ScopeContext } from './scopes.js';

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
 *
 * A signed-in SMART user (see {@link isSmartUser}) counts only its `user/` scopes, and its `patient/`
 * scopes when it has a launch patient; its `system/` scopes are ignored. This is the type-level
 * answer: which resources of the type it reaches is `dataAccess`'s (src/auth/data-access.ts).
 * See docs/auth.md "Scopes" and docs/audit.md.
 */
export function canAccess(principal: Principal, resourceType: string, action: ResourceAction): boolean {
  if (resourceType === AUDIT_EVENT_TYPE) return auditEventAccess(principal, ACTION_LETTER[action]);
  if ((principal.superAdmin || principal.admin) && principal.scopes.length === 0) return true;
  const contexts = isSmartUser(principal) ? userContexts(principal) : undefined;
  return scopesAllow(principal.scopes, resourceType, ACTION_LETTER[action], contexts);
}

/** The letter of `action` in SMART v2 scope syntax. */
export function scopeAction(action: ResourceAction): ScopeAction {
  return ACTION_LETTER[action];
}

/**
 * A user signed in through a SMART app (a user access token): kind `user` with a `fhirUser`, and no
 * administration role (a user token never holds one). Its data is limited to what that user may
 * see. A user principal a host builds without `fhirUser`, or with an admin role, keeps the plain
 * scope rule of clients and reaches its project.
 */
export function isSmartUser(principal: Principal): principal is Principal & { fhirUser: string } {
  return (
    principal.kind === 'user' && principal.fhirUser !== undefined && !principal.admin && !principal.superAdmin
  );
}

const USER_ONLY: readonly ScopeContext[] = ['user'];
const USER_AND_PATIENT: readonly ScopeContext[] = ['user', 'patient'];

/** The scope contexts that count for a SMART user: `user/`, and `patient/` with a launch patient. */
export function userContexts(principal: Principal): readonly ScopeContext[] {
  return principal.patientId !== undefined ? USER_AND_PATIENT : USER_ONLY;
}
