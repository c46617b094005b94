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

/**
 * True when a conditional read may answer 304 Not Modified: `If-None-Match` names the current
 * version (`W/"3"`, `"3"`, a list of them, or `*`); or, without `If-None-Match`, the resource was
 * last updated no later than `If-Modified-Since` (HTTP dates have whole seconds: `lastUpdated` is
 * compared at that precision; an unreadable date is ignored).
 * @see https://hl7.org/fhir/R4/http.html#cread
 * @see https://www.rfc-editor.org/rfc/rfc9110#section-13.2.2
 */
export function notModified(
  resource: { meta: { versionId: string; lastUpdated: string } },
  ifNoneMatch: string | undefined,
  ifModifiedSince: string | undefined,
): boolean {
  if (ifNoneMatch !== undefined) {
    return ifNoneMatch.split(',').some((tag) => {
      const value = tag.trim();
      if (value === '*') return true;
      const m = /^(?:W\/)?"([^"]*)"$/.exec(value) ?? /^([A-Za-z0-9\-.]+)$/.exec(value);
      return m?.[1] === resource.meta.versionId;
    });
  }
  if (ifModifiedSince === undefined) return false;
  const since = Date.parse(ifModifiedSince);
  const modified = Date.parse(resource.meta.lastUpdated);
  if (Number.isNaN(since) || Number.isNaN(modified)) return false;
  return Math.floor(modified / 1000) * 1000 <= since;
}
