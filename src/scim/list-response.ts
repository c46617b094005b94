import { LIST_RESPONSE_SCHEMA_ID } from './schema.js';

/** A SCIM ListResponse (RFC 7644 §3.4.2): one page of resources, from `startIndex` of `totalResults`. */
export function listResponse(
  resources: unknown[],
  totalResults: number,
  startIndex: number,
): Record<string, unknown> {
  return {
    schemas: [LIST_RESPONSE_SCHEMA_ID],
    totalResults,
    startIndex,
    itemsPerPage: resources.length,
    Resources: resources,
  };
}
