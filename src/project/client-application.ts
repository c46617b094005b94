import type { ClientRecord } from '../storage/types.js';

/**
 * The `ClientApplication` resource (a custom, non-R4 resource type) describing a registered client.
 * `id` is the OAuth `client_id`; `secret` appears only in the `$new-client` answer.
 */
export interface ClientApplicationResource {
  resourceType: 'ClientApplication';
  id: string;
  name: string;
  /** The project it belongs to (`Project/<id>`). */
  project?: { reference: string };
  /** Space-separated scopes the client may be granted. */
  scope: string;
  admin: boolean;
  jwks?: { keys: Record<string, unknown>[] };
  jwksUri?: string;
  accessTokenLifetime?: number;
  /** Redirect URIs of the authorization code flow (SMART App Launch). */
  redirectUri?: string[];
  /** A public client: no secret nor keys (SMART `client-public`). */
  public?: boolean;
  revoked: boolean;
  /** The client secret, in clear; present only in the answer that created it. */
  secret?: string;
  meta: { lastUpdated: string };
}

/** Renders a stored client; pass `secret` only when answering its registration. */
export function clientApplicationResource(client: ClientRecord, secret?: string): ClientApplicationResource {
  return {
    resourceType: 'ClientApplication',
    id: client.id,
    name: client.name,
    ...(client.projectId !== null ? { project: { reference: `Project/${client.projectId}` } } : {}),
    scope: client.scope,
    admin: client.admin,
    ...(client.jwks ? { jwks: client.jwks } : {}),
    ...(client.jwksUri ? { jwksUri: client.jwksUri } : {}),
    ...(client.accessTokenLifetime !== undefined ? { accessTokenLifetime: client.accessTokenLifetime } : {}),
    ...(client.redirectUris?.length ? { redirectUri: [...client.redirectUris] } : {}),
    ...(client.public ? { public: true } : {}),
    revoked: client.revoked,
    ...(secret !== undefined ? { secret } : {}),
    meta: { lastUpdated: client.updatedAt },
  };
}
