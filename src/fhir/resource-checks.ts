import { FhirError } from '../http/http-error.js';
import type { FhirResource } from '../storage/types.js';
import { isResourceType, isValidId } from '../common/resource-types.js';

function invalid(message: string, expression?: string): FhirError {
  return new FhirError(400, 'invalid', message, expression ? { expression: [expression] } : undefined);
}

/** A 404 for a path segment that is not an R4 resource type. */
export function unknownType(type: string): FhirError {
  return new FhirError(404, 'not-found', `Unknown resource type ${type}`);
}

/** Checks a resource type from a URL: 404 when it is not an R4 type. */
export function checkType(type: string): void {
  if (!isResourceType(type)) throw unknownType(type);
}

/** Checks an id from a URL: 400 when it does not match the FHIR id syntax. */
export function checkId(id: string): void {
  if (!isValidId(id)) throw invalid('The id does not match the FHIR id syntax [A-Za-z0-9-.]{1,64}');
}

/**
 * The structural checks every incoming resource passes whatever the project: a JSON object whose
 * `resourceType` is an R4 type (equal to `expectedType` when given), with a valid `id` when it has
 * one, and an object `meta` when it has one.
 * @see https://hl7.org/fhir/R4/http.html#create
 */
export function checkResource(body: unknown, expectedType?: string): FhirResource {
  if (body === undefined) throw invalid('A resource body is required');
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw invalid('The body must be a JSON object');
  }
  const resource = body as Record<string, unknown>;
  const type = resource.resourceType;
  if (typeof type !== 'string' || !isResourceType(type)) {
    throw invalid('resourceType must be a FHIR R4 resource type', 'resourceType');
  }
  if (expectedType !== undefined && type !== expectedType) {
    throw invalid(`resourceType ${type} does not match the URL (${expectedType})`, 'resourceType');
  }
  if (resource.id !== undefined && !isValidId(resource.id)) {
    throw invalid('id does not match the FHIR id syntax', `${type}.id`);
  }
  if (
    resource.meta !== undefined &&
    (resource.meta === null || typeof resource.meta !== 'object' || Array.isArray(resource.meta))
  ) {
    throw invalid('meta must be an object', `${type}.meta`);
  }
  return resource as FhirResource;
}

/** A copy of `resource` fit for storage: without the server-managed `meta.versionId` / `meta.lastUpdated`. */
export function withoutServerMeta<T extends FhirResource>(resource: T): T {
  if (!resource.meta) return { ...resource };
  const { versionId: _v, lastUpdated: _l, ...meta } = resource.meta;
  const copy: FhirResource = { ...resource, meta };
  if (Object.keys(meta).length === 0) delete copy.meta;
  return copy as T;
}
