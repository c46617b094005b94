import type { Request } from 'express';
import type { Principal } from './principal.js';
import type { AuditActor } from '../audit/events.js';

/** The `actor`, `projectId` and `address` of an event recorded for a request by `principal`. */
export function requestParty(
  principal: Principal,
  req: Request,
): { actor: AuditActor; projectId: string | null; address?: string } {
  return {
    actor: { kind: principal.kind, id: principal.id },
    projectId: principal.projectId,
    ...(req.ip ? { address: req.ip } : {}),
  };
}
