/**
 * Listing a project's SCIM users (RFC 7644 §3.4.2): filtered, sorted and paged by the store where
 * it can, rendered and projected here.
 */
import type { Storage, UserFilter, UserRecord, UserSortKey } from '../storage/types.js';
import { projectScimAttributes } from './attributes.js';
import { compileScimFilter } from './filter-evaluator.js';
import { printScimFilter } from './filter-parser.js';
import { scimSortComparator, type ScimListQuery } from './list-query.js';
import type { ResolvedAttribute, ScimResourceSchemas } from './schema.js';
import { scimStorageCall } from './storage-errors.js';
import { ScimPageCursors, scimStorageFilter, scimStorageSortKey } from './user-listing.js';
import { userFilterView, userToScim } from './user-mapping.js';

/** One page of a list. */
export interface ScimSearchResult {
  totalResults: number;
  resources: Record<string, unknown>[];
}

/** What a search reads with: the store, the schemas, and the cursors of recent list walks. */
export interface UserSearchContext {
  storage: Storage;
  schemas: ScimResourceSchemas;
  cursors: ScimPageCursors;
}

/** One search of one project's users, as the store is asked for them. */
interface UserSearch {
  projectId: string;
  query: ScimListQuery;
  /** Store filter (what its indexes answer) and the whole filter as `where`. */
  matching: { filter?: UserFilter; where?: (user: UserRecord) => boolean };
  render: (user: UserRecord) => Record<string, unknown>;
  project: (docs: Record<string, unknown>[]) => Record<string, unknown>[];
}

/** A `sortBy` no store keeps (`name.familyName`, …): every match read, sorted and paged here. */
async function sortedHere(
  ctx: UserSearchContext,
  search: UserSearch,
  sortBy: ResolvedAttribute,
): Promise<ScimSearchResult> {
  const { projectId, query, matching } = search;
  const all = await scimStorageCall(() =>
    ctx.storage.listUsers(projectId, { ...matching, count: Number.MAX_SAFE_INTEGER }),
  );
  const from = query.startIndex - 1;
  const sorted = all.users.map(search.render).sort(scimSortComparator(sortBy, query.descending));
  return { totalResults: all.total, resources: search.project(sorted.slice(from, from + query.count)) };
}

/**
 * Sorted and paged by the store; a `startIndex` that an earlier page led to starts from that page's
 * cursor (`ScimPageCursors`), and this page's end is remembered for the next.
 */
async function pagedByStore(
  ctx: UserSearchContext,
  search: UserSearch,
  sortBy: UserSortKey,
): Promise<ScimSearchResult> {
  const { projectId, query, matching } = search;
  const sortOrder = query.descending ? 'descending' : 'ascending';
  const filterText = query.filter ? printScimFilter(query.filter) : '';
  const walk = JSON.stringify([projectId, filterText, sortBy, sortOrder]);
  const known = ctx.cursors.find(walk, query.startIndex);
  const page = await scimStorageCall(() =>
    ctx.storage.listUsers(projectId, {
      ...matching,
      sortBy,
      sortOrder,
      ...(known ? { after: known.cursor, total: false } : { offset: query.startIndex - 1 }),
      count: query.count,
    }),
  );
  const total = known ? known.total : page.total;
  if (page.next)
    ctx.cursors.remember(walk, query.startIndex + page.users.length, { cursor: page.next, total });
  return { totalResults: total, resources: search.project(page.users.map(search.render)) };
}

/**
 * Filters, sorts and pages the project's users, rendered (at `locationOf` their id, the user name
 * echoed when `echoUserName`) and projected (`attributes`, `excludedAttributes`).
 */
export function searchUsers(
  ctx: UserSearchContext,
  projectId: string,
  query: ScimListQuery,
  locationOf: (id: string) => string,
  echoUserName: boolean,
): Promise<ScimSearchResult> {
  const { schemas } = ctx;
  const options = { undefinedAsAbsent: query.serverRoot === true };
  const predicate = query.filter ? compileScimFilter(query.filter, schemas, options) : undefined;
  const filter = query.filter ? scimStorageFilter(query.filter, schemas) : undefined;
  const search: UserSearch = {
    projectId,
    query,
    matching: {
      ...(filter ? { filter } : {}),
      ...(predicate ? { where: (u: UserRecord) => predicate(userFilterView(u, locationOf(u.id))) } : {}),
    },
    render: (u) => userToScim(u, { location: locationOf(u.id), echoUserName }),
    project: (docs) => docs.map((doc) => projectScimAttributes(doc, query, schemas)),
  };
  if (!query.sortBy) return pagedByStore(ctx, search, 'createdAt');
  const sortBy = scimStorageSortKey(query.sortBy, echoUserName);
  return sortBy ? pagedByStore(ctx, search, sortBy) : sortedHere(ctx, search, query.sortBy);
}
