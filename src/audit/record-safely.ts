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
