import { NotFoundError } from '../../storage/errors.js';
import type { ClientRecord, Storage } from '../../storage/types.js';
import { generateClientSecret, hashClientSecret, verifyClientSecret } from './client-secret.js';
import { InvalidOptionError } from '../../errors.js';

/** Credentials of the host-configured super-admin client. */
export interface SuperAdminCredentials {
  /** The OAuth `client_id`. */
  clientId: string;
  /** The client secret (kept by the storage only as a hash). */
  clientSecret: string;
}

/**
 * Creates or updates the super-admin client (`superAdmin: true`, `projectId: null`, not revoked)
 * with these credentials. The secret is hashed; an unchanged secret is not re-hashed. Throws a
 * `InvalidOptionError` when `clientId` already names a client of a project.
 */
export async function ensureSuperAdminClient(
  storage: Storage,
  credentials: SuperAdminCredentials,
): Promise<ClientRecord> {
  const { clientId, clientSecret } = credentials;
  if (!clientId || !clientSecret)
    throw new InvalidOptionError('ensureSuperAdminClient: clientId and clientSecret are required');
  let existing: ClientRecord | undefined;
  try {
    existing = await storage.readClient(clientId);
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
  }
  if (!existing) {
    return storage.createClient({
      id: clientId,
      projectId: null,
      name: 'Super admin',
      secretHash: await hashClientSecret(clientSecret),
      scope: '',
      admin: false,
      superAdmin: true,
    });
  }
  if (existing.projectId !== null) {
    throw new InvalidOptionError(`ensureSuperAdminClient: client ${clientId} belongs to a project`);
  }
  const sameSecret =
    existing.secretHash !== undefined && (await verifyClientSecret(clientSecret, existing.secretHash));
  if (sameSecret && existing.superAdmin && !existing.revoked) return existing;
  return storage.updateClient(clientId, {
    superAdmin: true,
    revoked: false,
    ...(sameSecret ? {} : { secretHash: await hashClientSecret(clientSecret) }),
  });
}

/**
 * For a standalone server: makes sure a super-admin client exists. With credentials, behaves like
 * `ensureSuperAdminClient`. Without a secret, creates the client with a new random secret when it
 * does not exist yet (or is revoked) and returns the secret, to be shown once; when a usable
 * super-admin client already exists, returns `clientSecret: undefined`.
 * @default clientId 'super-admin'
 */
export async function provisionSuperAdminClient(
  storage: Storage,
  options: { clientId?: string; clientSecret?: string } = {},
): Promise<{ clientId: string; clientSecret: string | undefined; created: boolean }> {
  const clientId = options.clientId ?? 'super-admin';
  if (options.clientSecret) {
    let existed = true;
    try {
      await storage.readClient(clientId);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      existed = false;
    }
    await ensureSuperAdminClient(storage, { clientId, clientSecret: options.clientSecret });
    return { clientId, clientSecret: undefined, created: !existed };
  }
  try {
    const existing = await storage.readClient(clientId);
    if (existing.superAdmin && !existing.revoked && existing.secretHash) {
      return { clientId, clientSecret: undefined, created: false };
    }
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
  }
  const clientSecret = generateClientSecret();
  const client = await ensureSuperAdminClient(storage, { clientId, clientSecret });
  return { clientId: client.id, clientSecret, created: true };
}

/**
 * Replaces the secret of an existing super-admin client with a new random one and returns it, to
 * be shown once (`fhir-platform-kit rotate-super-admin-secret`). The client is also made usable
 * again if it was revoked. The old secret stops authenticating at once; access tokens already
 * issued with it stay valid until they expire. Throws `NotFoundError` when there is no such client
 * and `InvalidOptionError` when `clientId` names a client of a project.
 * @default clientId 'super-admin'
 */
export async function rotateSuperAdminSecret(
  storage: Storage,
  options: { clientId?: string } = {},
): Promise<SuperAdminCredentials> {
  const clientId = options.clientId ?? 'super-admin';
  const existing = await storage.readClient(clientId);
  if (existing.projectId !== null || !existing.superAdmin) {
    throw new InvalidOptionError(`rotateSuperAdminSecret: client ${clientId} is not a super-admin client`);
  }
  const clientSecret = generateClientSecret();
  await ensureSuperAdminClient(storage, { clientId, clientSecret });
  return { clientId, clientSecret };
}
