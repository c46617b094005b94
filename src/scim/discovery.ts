/**
 * The SCIM discovery resources (RFC 7644 §4, RFC 7643 §5–§7): `/ServiceProviderConfig`,
 * `/ResourceTypes` and `/Schemas`, true to what the router implements (Users and Groups).
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

/** A resource type the router serves: its name (the `/ResourceTypes/{id}`), endpoint and schemas. */
export interface ScimResourceTypeDefinition {
  name: string;
  endpoint: string;
  description: string;
  schemas: ScimResourceSchemas;
}

/** A resource type (RFC 7643 §6): `User` or `Group`. */
export function resourceTypeResource(
  type: ScimResourceTypeDefinition,
  location: string,
): Record<string, unknown> {
  return {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:ResourceType'],
    id: type.name,
    name: type.name,
    endpoint: type.endpoint,
    description: type.description,
    schema: type.schemas.core.id,
    schemaExtensions: type.schemas.extensions.map((ext) => ({ schema: ext.id, required: false })),
    meta: { resourceType: 'ResourceType', location },
  };
}

/** Every schema of the resource types, as `/Schemas` resources keyed by URN. */
export function schemaResources(
  types: readonly ScimResourceTypeDefinition[],
  locationOf: (id: string) => string,
): Record<string, unknown>[] {
  const all = types.flatMap((t) => [t.schemas.core, ...t.schemas.extensions]);
  return all.map((schema) => schemaResource(schema, locationOf(schema.id)));
}
