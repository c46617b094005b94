/**
 * Listing a project's SCIM Groups (RFC 7644 §3.4.2) as a FHIR search of its SCIM-managed `Group`s:
 * the store narrows by what its indexes answer (`id`, `displayName`, `externalId` and
 * `members.value` equalities joined by `and`), tests each candidate with the whole filter, sorts
 * (by id, stable while groups change, unless `sortBy` says) and pages.
 */
import { NotFoundError } from '../storage/errors.js';
import { memberFilter, scimGroupSearch } from '../storage/scim-group-search.js';
import type { ParameterFilter } from '../storage/search-request.js';
import type { Storage, StoredResource } from '../storage/types.js';
import { projectScimAttributes } from './attributes.js';
import { compileScimFilter } from './filter-evaluator.js';
import type { ScimFilter } from './filter-parser.js';
import { groupToScim, profileReference } from './group-mapping.js';
import { displayNameFilter, externalIdFilter, groupIdFilter } from './group-queries.js';
import { scimSortComparator, type ScimListQuery } from './list-query.js';
import { GROUP_RESOURCE_SCHEMAS, resolveAttribute } from './schema.js';
import { scimStorageCall } from './storage-errors.js';
import type { ScimSearchResult } from './user-search.js';

/** How a list renders its groups: the URL of a group, and of a user (`members.$ref`). */
export interface GroupLinks {
  groupUrl: (id: string) => string;
  userUrl: (id: string) => string;
}

/** One indexed equality of a filter: what it compares and the string it compares with. */
type Equality = { attribute: 'id' | 'displayname' | 'externalid' | 'members.value'; value: string };

/** `attr eq "…"` on an attribute the store indexes, as an {@link Equality}. */
function equality(filter: ScimFilter, parent?: 'members'): Equality | undefined {
  if (filter.type !== 'compare' || filter.operator !== 'eq' || typeof filter.value !== 'string')
    return undefined;
  if (parent) {
    const named = filter.path.attribute.toLowerCase() === 'value' && filter.path.subAttribute === undefined;
    return named ? { attribute: 'members.value', value: filter.value } : undefined;
  }
  const resolved = resolveAttribute(GROUP_RESOURCE_SCHEMAS, filter.path);
  if (!resolved) return undefined;
  const name = resolved.definition.name.toLowerCase();
  const sub = resolved.subAttribute?.name.toLowerCase();
  if (name === 'members' && sub === 'value') return { attribute: 'members.value', value: filter.value };
  if (sub !== undefined) return undefined;
  if (name === 'id' || name === 'displayname' || name === 'externalid')
    return { attribute: name, value: filter.value };
  return undefined;
}

/**
 * The equalities every match of `filter` satisfies: those of its top-level `and` chain (and within
 * `members[…]`). Others (`or`, `not`, other operators) narrow nothing; the whole filter still runs.
 */
function equalities(filter: ScimFilter): Equality[] {
  if (filter.type === 'and') return [...equalities(filter.left), ...equalities(filter.right)];
  if (filter.type === 'valuePath') {
    if (filter.path.attribute.toLowerCase() !== 'members' || filter.path.subAttribute !== undefined)
      return [];
    const inner = (f: ScimFilter): Equality[] =>
      f.type === 'and' ? [...inner(f.left), ...inner(f.right)] : [equality(f, 'members')].filter((e) => !!e);
    return inner(filter.filter);
  }
  const found = equality(filter);
  return found ? [found] : [];
}

/**
 * The search filters of the equalities; undefined when they match no group (a `members.value`
 * that is no user of the project).
 */
async function storeFilters(
  storage: Storage,
  projectId: string,
  found: Equality[],
): Promise<ParameterFilter[] | undefined> {
  const filters: ParameterFilter[] = [];
  for (const { attribute, value } of found) {
    if (attribute === 'id') filters.push(groupIdFilter(value));
    else if (attribute === 'displayname') filters.push(displayNameFilter(value));
    else if (attribute === 'externalid') filters.push(externalIdFilter(value));
    else {
      try {
        filters.push(memberFilter(profileReference(await storage.readUser(projectId, value))));
      } catch (error) {
        if (error instanceof NotFoundError) return undefined;
        throw error;
      }
    }
  }
  return filters;
}

/**
 * Filters, sorts and pages the project's SCIM Groups, rendered and projected. By id, the store
 * pages; a `sortBy` (which no store index keeps) reads every match and sorts here, as the users'
 * listing does for such keys.
 */
export async function searchGroups(
  storage: Storage,
  projectId: string,
  query: ScimListQuery,
  links: GroupLinks,
): Promise<ScimSearchResult> {
  const schemas = GROUP_RESOURCE_SCHEMAS;
  const options = { undefinedAsAbsent: query.serverRoot === true };
  const predicate = query.filter ? compileScimFilter(query.filter, schemas, options) : undefined;
  const filters = await scimStorageCall(() =>
    storeFilters(storage, projectId, query.filter ? equalities(query.filter) : []),
  );
  if (!filters) return { totalResults: 0, resources: [] };
  const render = (group: StoredResource) =>
    groupToScim(group, { location: links.groupUrl(group.id), userUrl: links.userUrl });
  const project = (docs: Record<string, unknown>[]) =>
    docs.map((doc) => projectScimAttributes(doc, query, schemas));
  const matching = {
    search: scimGroupSearch(filters),
    ...(predicate ? { where: (group: StoredResource) => predicate(render(group)) } : {}),
  };
  const from = query.startIndex - 1;
  if (query.sortBy) {
    const all = await scimStorageCall(() => storage.searchResources(projectId, 'Group', matching));
    const sorted = all.resources.map(render).sort(scimSortComparator(query.sortBy, query.descending));
    return { totalResults: all.resources.length, resources: project(sorted.slice(from, from + query.count)) };
  }
  const page = await scimStorageCall(() =>
    storage.searchResources(projectId, 'Group', {
      ...matching,
      sort: '_id',
      offset: from,
      count: query.count,
      total: 'accurate',
    }),
  );
  return {
    totalResults: page.total ?? page.resources.length,
    resources: project(page.resources.map(render)),
  };
}
