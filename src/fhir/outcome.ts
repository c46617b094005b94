import type { ErrorRequestHandler } from 'express';
import { randomUUID } from 'node:crypto';
import { defaultErrorLogger, fhirErrorHandler, type ErrorLogger } from '../http/error-rendering.js';
import { FhirError, HttpError } from '../http/http-error.js';
import { StorageError } from '../storage/errors.js';

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

/** An OperationOutcome with the given issues. */
export function outcomeOf(issues: OutcomeIssue[]): OperationOutcome {
  return { resourceType: 'OperationOutcome', id: randomUUID(), issue: issues };
}

/**
 * A FHIR error that carries several issues (validation against the structure definitions reports
 * every problem at once). Rendered whole by {@link fhirOutcomeErrorHandler}.
 */
export class FhirOutcomeError extends FhirError {
  readonly issues: OutcomeIssue[];
  constructor(status: number, issues: OutcomeIssue[], options?: { headers?: Record<string, string> }) {
    const first = issues.find((i) => i.severity === 'error' || i.severity === 'fatal') ?? issues[0];
    super(status, first?.code ?? 'invalid', first?.details?.text ?? 'Invalid resource', {
      ...(first?.expression ? { expression: first.expression } : {}),
      ...(options?.headers ? { headers: options.headers } : {}),
    });
    this.issues = issues;
  }
}

const ISSUE_CODES: Record<number, string> = {
  401: 'login',
  403: 'forbidden',
  404: 'not-found',
  405: 'not-supported',
  409: 'conflict',
  410: 'deleted',
  412: 'conflict',
  413: 'too-costly',
  415: 'not-supported',
};

/**
 * An error as an OperationOutcome plus its HTTP status (for batch entries and upload lines). Server
 * errors (5xx) are passed to `log` and their details hidden.
 */
export function errorOutcome(
  error: unknown,
  log: ErrorLogger = defaultErrorLogger,
): { status: number; outcome: OperationOutcome } {
  const mapped = normaliseFhirError(error);
  if (mapped instanceof FhirOutcomeError) return { status: mapped.status, outcome: outcomeOf(mapped.issues) };
  if (mapped instanceof HttpError && mapped.status < 500) {
    const code =
      mapped instanceof FhirError ? mapped.issueCode : (ISSUE_CODES[mapped.status] ?? 'processing');
    const expression = mapped instanceof FhirError ? mapped.expression : undefined;
    return {
      status: mapped.status,
      outcome: outcomeOf([
        { severity: 'error', code, details: { text: mapped.message }, ...(expression ? { expression } : {}) },
      ]),
    };
  }
  log(error);
  return {
    status: 500,
    outcome: outcomeOf([
      { severity: 'fatal', code: 'exception', details: { text: 'Internal server error' } },
    ]),
  };
}

/**
 * Maps errors the shared renderer does not know to FHIR errors: an `InvalidRecordError` from storage is
 * the client's fault (400); storage not-found / conflict / precondition errors get FHIR issue codes.
 */
export function normaliseFhirError(error: unknown): unknown {
  if (error instanceof FhirError) return error;
  if (error instanceof StorageError) {
    switch (error.code) {
      case 'ERR_STORAGE_INVALID':
        return new FhirError(400, 'invalid', error.message, { cause: error });
      case 'ERR_STORAGE_NOT_FOUND': {
        const deleted = (error as StorageError & { deleted?: boolean }).deleted === true;
        return new FhirError(deleted ? 410 : 404, deleted ? 'deleted' : 'not-found', error.message, {
          cause: error,
        });
      }
      case 'ERR_STORAGE_CONFLICT':
        return new FhirError(409, 'conflict', error.message, { cause: error });
      case 'ERR_STORAGE_PRECONDITION_FAILED':
        return new FhirError(412, 'conflict', error.message, { cause: error });
      default:
        return error;
    }
  }
  return error;
}

/**
 * The FHIR router's error renderer: multi-issue errors are rendered whole, everything else through
 * the shared `fhirErrorHandler` (one issue, `application/fhir+json`).
 */
export function fhirOutcomeErrorHandler(log: ErrorLogger = defaultErrorLogger): ErrorRequestHandler {
  const single = fhirErrorHandler(log);
  return (err: unknown, req, res, next) => {
    if (res.headersSent) return next(err);
    const error = normaliseFhirError(err);
    if (error instanceof FhirOutcomeError) {
      for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
      res
        .status(error.status)
        .type('application/fhir+json')
        .send(JSON.stringify(outcomeOf(error.issues)));
      return;
    }
    single(error, req, res, next);
  };
}
