/**
 * The client behind a credential, read on every request (`bearerAuth`): it must still exist, not
 * be revoked, and belong to a project that exists (or be the super admin), so that revoking or
 * deleting a client or its project stops its callers at once.
 */
import type { HttpError } from '../../http/http-error.js';
import type { Principal } from '../../http/principal.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, Storage } from '../../storage/types.js';
import { clientPrincipalKind } from './access-token.js';
import { adminRights } from './admin-scopes.js';

/** The client `clientId` names while it may act; otherwise `refuse`'s error, with why. */
export async function activeClient(
  storage: Storage,
  clientId: string,
  refuse: (message: string) => HttpError,
): Promise<ClientRecord> {
  let client: ClientRecord;
  try {
    client = await storage.readClient(clientId);
  } catch (e) {
    if (e instanceof NotFoundError) throw refuse('The client no longer exists');
    throw e;
  }
  if (client.revoked) throw refuse('The client is revoked');
  if (client.projectId === null) {
    if (!client.superAdmin) throw refuse('The client belongs to no project');
    return client;
  }
  try {
    await storage.readProject(client.projectId);
  } catch (e) {
    if (e instanceof NotFoundError) throw refuse('The client project no longer exists');
    throw e;
  }
  return client;
}

/** The client's role counts only when `scopes` carry its administration scope (and it still holds it). */
export function clientPrincipal(client: ClientRecord, scopes: string[]): Principal {
  return {
    projectId: client.projectId,
    kind: clientPrincipalKind(client),
    id: client.id,
    scopes,
    ...adminRights(client, scopes),
  };
}
