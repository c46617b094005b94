import { AUDIT_EVENT_TYPE } from '../../audit/codes.js';
import type { Principal } from '../../http/principal.js';
import { parseResourceScope, type ScopeAction } from './scopes.js';

/**
 * Who may see the audit trail: read and search of `AuditEvent` need an administrator (a token with
 * `project:admin`, or the super admin) whose scopes name `AuditEvent` itself (`system/AuditEvent.rs`,
 * `.read`, `.*`, …): a wildcard such as `system/*.rs` never covers it, so an admin's ordinary data
 * token does not read the trail. As in `canAccess`, a host-built admin with no scopes at all may.
 * Nobody writes it through the API (the trail writes through storage).
 */
export function auditEventAccess(principal: Principal, action: ScopeAction): boolean {
  if (action !== 'r' && action !== 's') return false;
  if (!principal.admin && !principal.superAdmin) return false;
  if (principal.scopes.length === 0) return true;
  return principal.scopes.some((text) => {
    const scope = parseResourceScope(text);
    return scope?.resourceType === AUDIT_EVENT_TYPE && scope.actions.has(action);
  });
}
