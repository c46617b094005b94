/**
 * A search at the server root (`POST /.search`, RFC 7644 §3.4.2.1, §3.4.3): every resource of the
 * project, users and groups, in one list. Each type is searched as its own endpoint searches it,
 * except that a filter attribute the type does not define reads as absent there; an attribute
 * that no type defines is still a 400 `invalidFilter`.
 *
 * Without `sortBy` the list is the types one after the other (users in creation order, then groups
 * by id), so a page asks each type only for the part of it that the page covers. With `sortBy`,
 * the first `startIndex + count - 1` of each type (sorted by its own search) are merged. A type the
 * filter cannot match (`meta.resourceType eq "Group"` for users, a filter that needs an attribute
 * the type lacks) is not searched at all.
 */
import { ScimError } from '../http/http-error.js';
import { projectScimAttributes } from './attributes.js';
import { compileScimFilter } from './filter-evaluator.js';
import { printScimAttributePath, type ScimAttributePath, type ScimFilter } from './filter-parser.js';
import { readListQuery, scimSortComparator, type ScimListQuery } from './list-query.js';
import { resolveAttribute, type ScimResourceSchemas } from './schema.js';
import type { ScimSearchResult } from './user-search.js';

/** One resource type as the root search reads it. */
export interface RootSearchType {
  schemas: ScimResourceSchemas;
  /** The type's own list search: filtered, sorted, paged, rendered and projected. */
  search: (query: ScimListQuery) => Promise<ScimSearchResult>;
}

/** The answer of a root search: the page, and the `startIndex` it starts at. */
export interface RootSearchResult extends ScimSearchResult {
  startIndex: number;
}

/** One type's part of the search: the type and the request read against its schemas. */
interface Part {
  type: RootSearchType;
  query: ScimListQuery;
}

const NOTHING: ScimSearchResult = { totalResults: 0, resources: [] };

/** The attribute paths a filter names at the resource level (those of `[…]` are sub-attributes). */
function filterPaths(filter: ScimFilter): ScimAttributePath[] {
  switch (filter.type) {
    case 'and':
    case 'or':
      return [...filterPaths(filter.left), ...filterPaths(filter.right)];
    case 'not':
      return filterPaths(filter.filter);
    default:
      return [filter.path];
  }
}

/**
 * 400 `invalidFilter` for an attribute no type defines (a misspelt name, as on each endpoint), and
 * for what a type's own search would refuse, even where another part of the filter spares it.
 */
function checkFilter(filter: ScimFilter, types: RootSearchType[]): void {
  for (const type of types) compileScimFilter(filter, type.schemas, { undefinedAsAbsent: true });
  for (const path of filterPaths(filter)) {
    if (!types.some((type) => resolveAttribute(type.schemas, path)))
      throw new ScimError(
        400,
        'invalidFilter',
        `Unknown attribute ${JSON.stringify(printScimAttributePath(path))}`,
      );
  }
}

/** False when no resource of the type can match `filter`; true when some may. */
function mayMatch(filter: ScimFilter, schemas: ScimResourceSchemas): boolean {
  switch (filter.type) {
    case 'and':
      return mayMatch(filter.left, schemas) && mayMatch(filter.right, schemas);
    case 'or':
      return mayMatch(filter.left, schemas) || mayMatch(filter.right, schemas);
    case 'not':
      return true;
    case 'compare': {
      const resolved = resolveAttribute(schemas, filter.path);
      if (!resolved) return compileScimFilter(filter, schemas, { undefinedAsAbsent: true })({});
      const resourceType =
        resolved.definition.name === 'meta' && resolved.subAttribute?.name === 'resourceType';
      // Every resource of the type has the same meta.resourceType: one test tells for all.
      return (
        !resourceType || compileScimFilter(filter, schemas)({ meta: { resourceType: schemas.core.name } })
      );
    }
    default:
      return resolveAttribute(schemas, filter.path) !== undefined;
  }
}

/** Each type's search of a `startIndex`/`count` window of its own list. */
function searchPart(
  part: Part,
  window: Pick<ScimListQuery, 'startIndex' | 'count'>,
): Promise<ScimSearchResult> {
  const { query, type } = part;
  if (query.filter && !mayMatch(query.filter, type.schemas)) return Promise.resolve(NOTHING);
  return type.search({ ...query, ...window });
}

/** The types one after the other: each asked for what is left of the page, from where it starts. */
async function pageInSequence(parts: Part[], startIndex: number, count: number): Promise<ScimSearchResult> {
  let before = 0;
  const resources: Record<string, unknown>[] = [];
  for (const part of parts) {
    const window = { startIndex: Math.max(1, startIndex - before), count: count - resources.length };
    const result = await searchPart(part, window);
    resources.push(...result.resources);
    before += result.totalResults;
  }
  return { totalResults: before, resources };
}

/** Merges lists, each already in `compare` order, into one (ties: the earlier list first). */
function mergeSorted<T>(lists: T[][], compare: (a: T, b: T) => number): T[] {
  const rest = lists.filter((list) => list.length > 0).map((list) => [...list]);
  const merged: T[] = [];
  while (rest.length > 0) {
    let best = 0;
    for (let i = 1; i < rest.length; i++) if (compare(rest[i]![0]!, rest[best]![0]!) < 0) best = i;
    merged.push(rest[best]!.shift()!);
    if (rest[best]!.length === 0) rest.splice(best, 1);
  }
  return merged;
}

/**
 * Sorted across types: the page's resources are among the first `startIndex + count - 1` of each
 * type in its own search's order, read unprojected (the sort may use an attribute the selection
 * leaves out), merged, then projected with their own type's schemas. Merging keeps each type's
 * order as its own endpoint answers it (a store may order `id` or `userName` its own way).
 */
async function pageSorted(parts: Part[], startIndex: number, count: number): Promise<ScimSearchResult> {
  const sorting = parts.find((part) => part.query.sortBy)!.query;
  const window = { startIndex: 1, count: startIndex - 1 + count };
  let totalResults = 0;
  const lists: { doc: Record<string, unknown>; part: Part }[][] = [];
  for (const part of parts) {
    const { attributes: _a, excludedAttributes: _e, ...unprojected } = part.query;
    const result = await searchPart({ ...part, query: unprojected }, window);
    totalResults += result.totalResults;
    lists.push(result.resources.map((doc) => ({ doc, part })));
  }
  const compare = scimSortComparator(sorting.sortBy!, sorting.descending);
  const merged = mergeSorted(lists, (a, b) => compare(a.doc, b.doc));
  const page = merged.slice(startIndex - 1, startIndex - 1 + count);
  const resources = page.map(({ doc, part }) => projectScimAttributes(doc, part.query, part.type.schemas));
  return { totalResults, resources };
}

/**
 * Searches every type of `types` (in that order) with the SearchRequest `params`, as one list:
 * filtered, sorted, paged (`maxResults` at most) and projected.
 */
export async function searchServerRoot(
  params: Record<string, unknown>,
  types: RootSearchType[],
  maxResults: number,
): Promise<RootSearchResult> {
  const parts = types.map((type) => ({
    type,
    query: { ...readListQuery(params, type.schemas, maxResults), serverRoot: true },
  }));
  const { filter, startIndex, count } = parts[0]!.query;
  if (filter) checkFilter(filter, types);
  const sorted = parts.some((part) => part.query.sortBy);
  const result = await (sorted ? pageSorted : pageInSequence)(parts, startIndex, count);
  return { ...result, startIndex };
}
