import { randomUUID } from 'node:crypto';
import { FhirError, isFhirIssueCode } from './http-error.js';

/** One OperationOutcome issue. @see https://hl7.org/fhir/R4/operationoutcome.html */
export interface OutcomeIssue {
  severity: 'fatal' | 'error' | 'warning' | 'information';
  /** IssueType code (`invalid`, `structure`, `forbidden`, `not-found`, …). */
  code: string;
  details?: { text?: string };
  diagnostics?: string;
  expression?: string[];
  location?: string[];
}

/** An OperationOutcome resource. */
export interface OperationOutcome {
  resourceType: 'OperationOutcome';
  id?: string;
  issue: OutcomeIssue[];
}

/** An OperationOutcome with the given issues: the one builder every error answer goes through. */
export function outcomeOf(issues: OutcomeIssue[]): OperationOutcome {
  return { resourceType: 'OperationOutcome', id: randomUUID(), issue: issues };
}

/**
 * A FHIR error that carries several issues (validation against the structure definitions reports
 * every problem at once). Rendered whole by `toOperationOutcome`; its code follows the first error
 * issue (`ERR_FHIR_VALUE` for `value`, `ERR_FHIR_INVALID` for a code no `FhirError` carries).
 */
export class FhirOutcomeError extends FhirError {
  readonly issues: OutcomeIssue[];
  constructor(status: number, issues: OutcomeIssue[], options?: { headers?: Record<string, string> }) {
    const first = issues.find((i) => i.severity === 'error' || i.severity === 'fatal') ?? issues[0];
    const issueCode = first && isFhirIssueCode(first.code) ? first.code : 'invalid';
    super(status, issueCode, first?.details?.text ?? 'Invalid resource', {
      ...(first?.expression ? { expression: first.expression } : {}),
      ...(options?.headers ? { headers: options.headers } : {}),
    });
    this.issues = issues;
  }
}
