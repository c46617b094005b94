/**
 * The SCIM discovery resources (RFC 7644 §4, RFC 7643 §5–§7): `/ServiceProviderConfig`,
 * `/ResourceTypes` and `/Schemas`, true to what the router implements.
 */
import { schemaResource, type ScimResourceSchemas } from './schema.js';

export interface ServiceProviderFeatures {
  maxResults: number;
  bodyLimitBytes?: number;
  documentationUri?: string;
}

/** `/ServiceProviderConfig`: PATCH, filter (with `maxResults`), sort and ETags; no bulk, no password change. */
export function serviceProviderConfig(
  features: ServiceProviderFeatures,
  location: string,
): Record<string, unknown> {
  return {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig'],
    ...(features.documentationUri ? { documentationUri: features.documentationUri } : {}),
    patch: { supported: true },
    bulk: { supported: false, maxOperations: 0, maxPayloadSize: 0 },
    filter: { supported: true, maxResults: features.maxResults },
    changePassword: { supported: false },
    sort: { supported: true },
    etag: { supported: true },
    authenticationSchemes: [
      {
        type: 'oauthbearertoken',
        name: 'OAuth Bearer Token',
        description: 'An OAuth 2.0 access token of a project administrator, as a Bearer token (RFC 6750).',
        specUri: 'https://www.rfc-editor.org/info/rfc6750',
        primary: true,
      },
    ],
    meta: { resourceType: 'ServiceProviderConfig', location },
  };
}

/** The `User` resource type (RFC 7643 §6). */
export function userResourceType(schemas: ScimResourceSchemas, location: string): Record<string, unknown> {
  return {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:ResourceType'],
    id: 'User',
    name: 'User',
    endpoint: '/Users',
    description: 'User Account',
    schema: schemas.core.id,
    schemaExtensions: schemas.extensions.map((ext) => ({ schema: ext.id, required: false })),
    meta: { resourceType: 'ResourceType', location },
  };
}

/** Every schema the server knows, as `/Schemas` resources keyed by URN. */
export function schemaResources(
  schemas: ScimResourceSchemas,
  locationOf: (id: string) => string,
): Record<string, unknown>[] {
  return [schemas.core, ...schemas.extensions].map((schema) => schemaResource(schema, locationOf(schema.id)));
}
