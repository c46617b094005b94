/**
 * The FHIR searches that find SCIM Groups in the store: the project's `Group`s carrying
 * `SCIM_MANAGED_TAG`, narrowed by indexed parameters (`_tag`, `identifier`, `member`), so that every
 * store answers them from its indexes (in SQL on PostgreSQL). Here, below both, because SCIM (its
 * Groups) and sign-in (the roles of the groups a user is in) run them.
 */
import { groupNameKey, SCIM_GROUP_NAME_SYSTEM, SCIM_MANAGED_TAG } from '../common/scim-managed.js';
import { typeSearch, type ParameterFilter, type SearchRequest } from './search-request.js';
import type { StorageOperations, StoredResource } from './types.js';

const SCIM_TAG_FILTER: ParameterFilter = {
  kind: 'parameter',
  code: '_tag',
  type: 'token',
  values: [{ type: 'token', system: SCIM_MANAGED_TAG.system, code: SCIM_MANAGED_TAG.code }],
};

/** Resources with an `identifier` of `system` whose value is one of `values`. */
export function identifierFilter(system: string, values: readonly string[]): ParameterFilter {
  return {
    kind: 'parameter',
    code: 'identifier',
    type: 'token',
    values: values.map((code) => ({ type: 'token', system, code })),
  };
}

/** SCIM Groups whose display name is one of `displayNames` (case-insensitive). */
export function groupNamesFilter(displayNames: readonly string[]): ParameterFilter {
  return identifierFilter(SCIM_GROUP_NAME_SYSTEM, [...new Set(displayNames.map(groupNameKey))]);
}

/** Groups with a member whose `entity` is `reference` (`Practitioner/…`). */
export function memberFilter(reference: string): ParameterFilter {
  const [resourceType, id] = reference.split('/') as [string, string];
  return {
    kind: 'parameter',
    code: 'member',
    type: 'reference',
    values: [{ type: 'reference', resourceType, id }],
  };
}

/** The search of the project's SCIM Groups that pass every filter. */
export function scimGroupSearch(filters: ParameterFilter[] = []): SearchRequest {
  return typeSearch('Group', [SCIM_TAG_FILTER, ...filters]);
}

/**
 * The SCIM Groups with a member whose profile is `reference` (whether that member is inactive or
 * not), and that pass `filters`, by id.
 */
export async function groupsWithMember(
  ops: Pick<StorageOperations, 'searchResources'>,
  projectId: string,
  reference: string,
  filters: ParameterFilter[] = [],
): Promise<StoredResource[]> {
  const page = await ops.searchResources(projectId, 'Group', {
    search: scimGroupSearch([memberFilter(reference), ...filters]),
    sort: '_id',
    total: 'none',
  });
  return page.resources;
}
