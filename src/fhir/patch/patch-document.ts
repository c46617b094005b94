import { FhirError } from '../../http/http-error.js';
import { DEFAULT_MAX_JSON_DEPTH, valueNestingExceeds } from '../../http/json-depth.js';
import type { FhirResource } from '../../storage/types.js';
import { applyFhirPathPatch } from './fhirpath-patch.js';
import { applyJsonPatch } from './json-patch.js';
import { checkOperationCount, DEFAULT_PATCH_LIMITS, type PatchLimits } from './patch-limits.js';

/** The media type of a JSON Patch body. @see https://datatracker.ietf.org/doc/html/rfc6902 */
export const JSON_PATCH = 'application/json-patch+json';

/**
 * The body of a FHIR `patch` interaction: a JSON Patch, or a FHIRPath Patch `Parameters`, with the
 * bounds it is applied within.
 */
export type PatchDocument = (
  { kind: 'json-patch'; operations: unknown[] } | { kind: 'fhirpath-patch'; parameters: FhirResource }
) & { limits: PatchLimits };

/**
 * The patch a request body is (`mediaType` without parameters): a JSON array under
 * `application/json-patch+json` (or `application/json`), a `Parameters` resource otherwise; it is
 * applied within `limits`.
 * @see https://hl7.org/fhir/R4/http.html#patch
 */
export function patchDocumentOf(mediaType: string, body: unknown, limits: PatchLimits): PatchDocument {
  if (body === undefined) throw new FhirError(400, 'required', 'A patch body is required');
  if (Array.isArray(body) && mediaType !== 'application/fhir+json') {
    return counted({ kind: 'json-patch', operations: body, limits });
  }
  if (mediaType === JSON_PATCH) {
    throw new FhirError(400, 'invalid', 'A JSON Patch document must be an array of operations');
  }
  if (body !== null && typeof body === 'object' && (body as FhirResource).resourceType === 'Parameters') {
    return counted({ kind: 'fhirpath-patch', parameters: body as FhirResource, limits });
  }
  throw new FhirError(
    400,
    'invalid',
    `A patch is a JSON Patch (${JSON_PATCH}) or a FHIRPath Patch Parameters resource`,
  );
}

/** How the patch of a batch or transaction entry is read and applied. */
export interface EntryPatchOptions {
  /** Deepest nesting of a `Binary`'s JSON Patch, as of a request body. @default 100 */
  maxDepth?: number;
  /** The bounds the patch is applied within. @default DEFAULT_PATCH_LIMITS */
  limits?: PatchLimits;
}

/**
 * The patch of a batch or transaction entry: its `Parameters` resource (FHIRPath Patch), or its
 * `Binary` resource of `contentType` `application/json-patch+json` whose `data` is the JSON Patch
 * in base64.
 * @see https://hl7.org/fhir/R4/http.html#transaction
 */
export function patchDocumentOfEntry(resource: unknown, options: EntryPatchOptions = {}): PatchDocument {
  const { maxDepth = DEFAULT_MAX_JSON_DEPTH, limits = DEFAULT_PATCH_LIMITS } = options;
  if (resource === null || typeof resource !== 'object' || Array.isArray(resource)) {
    throw new FhirError(400, 'required', 'A PATCH entry needs a Binary or Parameters resource');
  }
  const r = resource as FhirResource;
  if (r.resourceType === 'Parameters') return counted({ kind: 'fhirpath-patch', parameters: r, limits });
  if (r.resourceType !== 'Binary') {
    throw new FhirError(400, 'invalid', 'A PATCH entry needs a Binary or Parameters resource');
  }
  const contentType =
    typeof r.contentType === 'string' ? r.contentType.split(';')[0]!.trim().toLowerCase() : '';
  if (contentType !== JSON_PATCH) {
    throw new FhirError(400, 'invalid', `The Binary of a PATCH entry must be of contentType ${JSON_PATCH}`);
  }
  if (typeof r.data !== 'string' || !/^[A-Za-z0-9+/\s]*={0,2}\s*$/.test(r.data)) {
    throw new FhirError(400, 'invalid', 'Binary.data must be base64');
  }
  let operations: unknown;
  try {
    operations = JSON.parse(Buffer.from(r.data, 'base64').toString('utf8'));
  } catch (error) {
    throw new FhirError(400, 'invalid', 'Binary.data is not a JSON Patch document', { cause: error });
  }
  if (!Array.isArray(operations)) {
    throw new FhirError(400, 'invalid', 'A JSON Patch document must be an array of operations');
  }
  if (valueNestingExceeds(operations, maxDepth)) {
    throw new FhirError(400, 'invalid', `Binary.data is nested deeper than ${maxDepth} levels`);
  }
  return counted({ kind: 'json-patch', operations, limits });
}

/**
 * `patch`, once its operations are no more than its limits allow (413 otherwise): checked as it is
 * read, so that a request or Bundle with too many is refused before anything is read or written.
 */
function counted(patch: PatchDocument): PatchDocument {
  if (patch.kind === 'json-patch') checkOperationCount('JSON Patch', patch.operations.length, patch.limits);
  else if (Array.isArray(patch.parameters.parameter)) {
    const count = patch.parameters.parameter.length;
    checkOperationCount('FHIRPath Patch', count, patch.limits, 'Parameters.parameter');
  }
  return patch;
}

/** `resource` with `patch` applied within its limits: a copy, not yet checked as a resource. */
export function applyPatchDocument(resource: FhirResource, patch: PatchDocument): Promise<unknown> {
  return patch.kind === 'json-patch'
    ? Promise.resolve().then(() => applyJsonPatch(resource, patch.operations, patch.limits))
    : applyFhirPathPatch(resource, patch.parameters, patch.limits);
}
