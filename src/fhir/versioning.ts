import { FhirError } from '../http/http-error.js';

/** The weak ETag of a version: `W/"<versionId>"`. @see https://hl7.org/fhir/R4/http.html#versioning */
export function etagOf(versionId: string): string {
  return `W/"${versionId}"`;
}

/**
 * The version id an `If-Match` header asks for (`W/"3"`, `"3"`); undefined when the header is
 * absent. A malformed or multi-valued header is a 400.
 */
export function parseIfMatch(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const m =
    /^\s*(?:W\/)?"([A-Za-z0-9\-.]{1,64})"\s*$/.exec(header) ?? /^\s*([A-Za-z0-9\-.]{1,64})\s*$/.exec(header);
  if (!m)
    throw new FhirError(400, 'invalid', 'If-Match must be one ETag such as W/"1"', {
      expression: ['If-Match'],
    });
  return m[1];
}
