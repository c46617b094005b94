/**
 * How SCIM finds its Groups in the store: FHIR searches of the project's `Group`s carrying
 * `SCIM_MANAGED_TAG`, narrowed by indexed parameters (`_id`, `identifier`, `member`), so that every
 * store answers them from its indexes (in SQL on PostgreSQL), inside a transaction when given one.
 * The search builders shared with sign-in are in `storage/scim-group-search.ts`.
 */
import { isScimManaged } from '../common/scim-managed.js';
import { NotFoundError } from '../storage/errors.js';
import { groupNamesFilter, identifierFilter, scimGroupSearch } from '../storage/scim-group-search.js';
import { idFilter, type ParameterFilter } from '../storage/search-request.js';
import type { StorageOperations, StoredResource } from '../storage/types.js';
import { SCIM_GROUP_SYSTEMS } from './group-mapping.js';

/** SCIM Groups of the id. */
export const groupIdFilter = (id: string): ParameterFilter => idFilter([id]);

/** SCIM Groups of the display name (case-insensitive). */
export const displayNameFilter = (displayName: string): ParameterFilter => groupNamesFilter([displayName]);

/** SCIM Groups of the external id. */
export const externalIdFilter = (externalId: string): ParameterFilter =>
  identifierFilter(SCIM_GROUP_SYSTEMS.externalId, [externalId]);

/**
 * A SCIM Group of the project. A FHIR Group SCIM does not own is as absent, and so is a deleted
 * one: 404, not FHIR's 410 (RFC 7644 §3.6).
 */
export async function readScimGroup(
  ops: Pick<StorageOperations, 'readResource'>,
  projectId: string,
  id: string,
): Promise<StoredResource> {
  let group: StoredResource;
  try {
    group = await ops.readResource(projectId, 'Group', id);
  } catch (error) {
    if (error instanceof NotFoundError) throw new NotFoundError(`Group/${id} not found`, { cause: error });
    throw error;
  }
  if (!isScimManaged(group)) throw new NotFoundError(`Group/${id} is not a SCIM Group`);
  return group;
}

/** The SCIM Group named `displayName` (case-insensitive), other than `except`. */
export async function findGroupNamed(
  ops: Pick<StorageOperations, 'searchResources'>,
  projectId: string,
  displayName: string,
  except?: string,
): Promise<StoredResource | undefined> {
  const page = await ops.searchResources(projectId, 'Group', {
    search: scimGroupSearch([displayNameFilter(displayName)]),
    where: (group) => group.id !== except,
    count: 1,
    total: 'none',
  });
  return page.resources[0];
}
