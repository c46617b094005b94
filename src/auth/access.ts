import type { Principal } from './principal.js';
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
 * resources of `resourceType` in its own project? Super admins and project admins may do anything in
 * the project they act in; other principals need a scope that covers the type and action.
 */
export function canAccess(principal: Principal, resourceType: string, action: ResourceAction): boolean {
  if (principal.superAdmin || principal.admin) return true;
  return scopesAllow(principal.scopes, resourceType, ACTION_LETTER[action]);
}
