import type { AuditRecord } from './events.js';
import type { AuditTrail } from './trail.js';

/**
 * Records `record` in `trail` without ever throwing: auditing never makes a request (or a job)
 * fail. A failure (the journal could not be written, the trail is closed) goes to `onError`.
 */
export function recordSafely(
  trail: AuditTrail,
  record: AuditRecord,
  onError: (error: unknown) => void,
): void {
  try {
    trail.record(record);
  } catch (error) {
    onError(error);
  }
}

/**
 * `trail`, whose `record` never throws: a failure goes to `onError` and answers undefined. What
 * `fhirPlatform` hands its routers, so that failures to record reach the trail's own error sink.
 */
export function safeAuditTrail(trail: AuditTrail, onError: (error: unknown) => void): AuditTrail {
  return {
    enabled: trail.enabled,
    record(record) {
      try {
        return trail.record(record);
      } catch (error) {
        onError(error);
        return undefined;
      }
    },
    flush: () => trail.flush(),
    sweep: (at) => trail.sweep(at),
    close: () => trail.close(),
  };
}
