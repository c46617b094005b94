import type { ErrorRequestHandler } from 'express';
import { FhirError } from '../../http/http-error.js';
import { SearchParameterError } from '../../search/search-error.js';

/**
 * A search refused by src/search (`SearchParameterError`, protocol-free) as the FHIR answer: a 400
 * OperationOutcome with its issue code and text, the parameter at fault as `expression`. Any other
 * error is returned as it is.
 */
export function fhirErrorOfSearch(error: unknown): unknown {
  if (!(error instanceof SearchParameterError)) return error;
  return new FhirError(400, error.issueCode, error.message, {
    ...(error.parameter === undefined ? {} : { expression: [error.parameter] }),
    cause: error,
  });
}

/** Error middleware placed before a FHIR error renderer: refused searches become their `FhirError`. */
export const searchErrorsAsFhir: ErrorRequestHandler = (error, _req, _res, next) => {
  next(fhirErrorOfSearch(error));
};
