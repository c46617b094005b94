import type { ClientRecord } from '../storage/types.js';
import { splitScopes } from './scopes.js';

/**
 * The scopes a client may be granted: its registered `scope`, plus `system/*.*` for project admins
 * and the super admin, whose role already permits everything in their project (so a generic SMART
 * client asking such a client's token for `system/*.read` is not refused).
 */
export function allowedScopes(client: ClientRecord): string[] {
  const scopes = splitScopes(client.scope);
  if ((client.admin || client.superAdmin) && !scopes.includes('system/*.*')) scopes.push('system/*.*');
  return scopes;
}
