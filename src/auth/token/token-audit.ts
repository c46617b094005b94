/**
 * The audit events of one token request (docs/audit.md): a `token` event, granted or refused, in
 * the client's project; and for a refresh, or a used code or refresh token coming again, an
 * `authorization` event of the user too.
 */
import type { Request } from 'express';
import type { AuditRecord } from '../../audit/events.js';
import { recordSafely } from '../../audit/record-safely.js';
import type { AuditTrail } from '../../audit/trail.js';
import type { ErrorLogger } from '../../http/error-rendering.js';
import type { ClientRecord } from '../../storage/types.js';
import type { TokenRequest } from './token-endpoint.js';

/** Where a token request's events go, and what the request learned as it ran. */
export interface TokenAudit {
  trail: AuditTrail;
  logError: ErrorLogger;
  req: Request;
  seen: NonNullable<TokenRequest['seen']>;
}

/** How the request ended. */
export interface TokenOutcome {
  result: 'granted' | 'refused';
  scopes: string[];
  /** The OAuth error code of a refusal. */
  error?: string;
  /** The client a refused request named, when it could not authenticate (its project sees it). */
  named?: ClientRecord;
}

/**
 * A refresh (or one the roles of the user's groups refused, or a used refresh token or code coming
 * again) is also the user's event.
 */
function userAuthorizationEvent(audit: TokenAudit, outcome: TokenOutcome): AuditRecord | undefined {
  const { client, user } = audit.seen;
  if (!client?.projectId || !user || !(user.refresh || user.codeReuse || user.refusedByRoles))
    return undefined;
  const rotated = user.refresh === 'rotated';
  return {
    kind: 'authorization',
    action: rotated || user.refusedByRoles ? 'refresh' : 'reuse',
    clientId: client.id,
    clientName: client.name,
    result: rotated ? 'granted' : 'refused',
    ...(user.refusedByRoles ? { reason: 'roles' } : {}),
    ...(outcome.result === 'granted' ? { scopes: outcome.scopes } : {}),
    ...(user.roles ? { roles: user.roles } : {}),
    projectId: client.projectId,
    actor: {
      kind: user.userId ? 'user' : 'client',
      id: user.userId ?? client.id,
      ...(user.profile ? { profile: user.profile } : {}),
    },
    ...(audit.req.ip ? { address: audit.req.ip } : {}),
  };
}

function tokenEvent(audit: TokenAudit, outcome: TokenOutcome): AuditRecord {
  const { client, claimedClientId } = audit.seen;
  return {
    kind: 'token',
    result: outcome.result,
    scopes: outcome.scopes,
    ...(outcome.error ? { error: outcome.error } : {}),
    projectId: (client ?? outcome.named)?.projectId ?? null,
    actor: client
      ? { kind: client.projectId === null ? 'super-admin' : 'client', id: client.id, name: client.name }
      : { kind: 'anonymous', ...(claimedClientId ? { id: claimedClientId } : {}) },
    ...(audit.req.ip ? { address: audit.req.ip } : {}),
  };
}

/** Records the events of a token request that ended with `outcome`. */
export function auditTokenRequest(audit: TokenAudit, outcome: TokenOutcome): void {
  const onFailure = (failure: unknown) => audit.logError(failure, audit.req);
  const user = userAuthorizationEvent(audit, outcome);
  if (user) recordSafely(audit.trail, user, onFailure);
  recordSafely(audit.trail, tokenEvent(audit, outcome), onFailure);
}
