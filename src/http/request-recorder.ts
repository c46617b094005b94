import type { Request, Response } from 'express';
import { getPrincipal } from './authenticate.js';
import type { AuditBase, AuditRecord } from '../audit/events.js';
import { requestParty } from './request-actor.js';
import type { AuditTrail } from '../audit/trail.js';

/** What a router says of an event: its kind and fields, without who, where and when (`AuditBase`). */
export type AuditDetails = AuditRecord extends infer R
  ? R extends AuditRecord
    ? Omit<R, keyof AuditBase>
    : never
  : never;

/** Records events of requests: see {@link requestRecorder}. */
export type RequestRecorder = (req: Request, res: Response, details: AuditDetails) => void;

/**
 * The recorder of a router: adds the request's principal (`actor`, `projectId`) and address to
 * each event. Undefined without a trail or when it is disabled, so that `audit?.(req, res, {…})`
 * costs nothing then (the details are not even built).
 */
export function requestRecorder(
  trail: AuditTrail | undefined,
  onError: (error: unknown, req?: Request) => void,
): RequestRecorder | undefined {
  if (!trail?.enabled) return undefined;
  return (req, res, details) => {
    try {
      trail.record({ ...details, ...requestParty(getPrincipal(res), req) });
    } catch (error) {
      onError(error, req);
    }
  };
}
