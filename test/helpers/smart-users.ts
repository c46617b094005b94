import { issueAccessToken } from '../../src/auth/access/access-token.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import type { Storage } from '../../src/storage/types.js';

/** The issuer (and audience) of tokens of `createPlatformApp()` (its `baseUrl`). */
export const PLATFORM_ISSUER = 'http://fhir.test';

/** A SCIM user of `projectId` linked to the profile `userType/profileId` (which may not exist yet). */
export async function smartUser(
  storage: Storage,
  projectId: string,
  user: { id: string; userType: 'Patient' | 'Practitioner' | 'RelatedPerson'; profileId: string },
): Promise<{ id: string; fhirUser: string }> {
  await storage.createUser(projectId, {
    id: user.id,
    projectId,
    userName: `${user.id}@example.org`,
    userType: user.userType,
    profileId: user.profileId,
    active: true,
    data: {},
  });
  return { id: user.id, fhirUser: `${user.userType}/${user.profileId}` };
}

/**
 * `Bearer <token>` of a user signed in through the SMART app `clientId` (what the authorization
 * code flow issues), with `scopes` and the launch patient `patient`, signed with the store's keys.
 */
export async function userBearer(
  storage: Storage,
  clientId: string,
  user: { id: string; fhirUser: string },
  scopes: string[],
  patient?: string,
  issuer = PLATFORM_ISSUER,
): Promise<string> {
  const client = await storage.readClient(clientId);
  const { token } = await issueAccessToken(signingKeys(storage), {
    client,
    scopes,
    issuer,
    audience: issuer,
    lifetime: 3600,
    user: { ...user, ...(patient !== undefined ? { patient } : {}) },
  });
  return `Bearer ${token}`;
}
