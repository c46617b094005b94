import { FhirError } from '../http/http-error.js';
import type { SearchRegistry } from '../search/definitions.js';
import { referenceKeys } from '../search/match.js';
import type { ResourceQuery } from '../storage/query-types.js';
import {
  filterSearch,
  type ParameterFilter,
  type ReferenceSearchValue,
  type SearchFilter,
  type TokenSearchValue,
} from '../storage/search-request.js';
import type { StorageOperations, StoredResource } from '../storage/types.js';
import { typesReadByFilters } from '../search/types-read.js';
import type { TypeFilterSearch } from './type-filter.js';

/*
 * The export worker reads the resources of the filtered type only, so a chain or `_has` in a
 * `_typeFilter` is answered once, at kick-off, by the store's own search (through the caller's
 * view of it): `subject:Patient.name=Smith` becomes `subject` = one of the matching `Patient/<id>`s,
 * `_has:Observation:patient:code=1234` becomes `_id` = one of the ids those Observations point at.
 * Deeper levels stay with the store, which answers chains and `_has` itself (for a SMART user,
 * within the reach its view puts in the search).
 */

/** What resolving the chains of `_typeFilter` searches needs. */
export interface TypeFilterChainContext {
  /** The store as the caller sees it (a SMART user's `scopedStorage`), so nothing outside its reach matches. */
  storage: Pick<StorageOperations, 'searchResources'>;
  projectId: string;
  registry: SearchRegistry;
  /** May the caller see resources of this type? A chain through one it may not is a 403. */
  canSee(resourceType: string): boolean;
  /** Most resources one chain or `_has` may match (`maxTypeFilterMatches`); beyond it, a 400. */
  maxMatches: number;
}

/** Matches read per store query while resolving. */
const PAGE = 1000;

/**
 * `searches` with every chain and `_has` replaced by the plain reference or `_id` filter it stands
 * for at this moment (plain, structured-cloneable data kept with the job). Searches of types not in
 * `types` (not exported) are left as they are. Errors: 403 `forbidden` for a chain through a type
 * the caller may not see, at any depth (checked before anything is read: deeper levels stay with a
 * store that answers chains itself), 400 `too-costly` when one matches more than `maxMatches`
 * resources.
 */
export async function resolveTypeFilterChains(
  searches: readonly TypeFilterSearch[],
  types: readonly string[],
  ctx: TypeFilterChainContext,
): Promise<TypeFilterSearch[]> {
  const out: TypeFilterSearch[] = [];
  for (const search of searches) {
    if (!types.includes(search.resourceType) || search.filters.every((f) => f.kind === 'parameter')) {
      out.push(search);
      continue;
    }
    for (const type of typesReadByFilters(search.filters)) checkSee(ctx, type);
    const filters: SearchFilter[] = [];
    for (const filter of search.filters) {
      filters.push(
        filter.kind === 'parameter' ? filter : await resolveFilter(search.resourceType, filter, ctx),
      );
    }
    out.push({ resourceType: search.resourceType, filters });
  }
  return out;
}

/** A chain or `_has` of a `resourceType` search as the plain filter it stands for now. */
async function resolveFilter(
  resourceType: string,
  filter: Exclude<SearchFilter, ParameterFilter>,
  ctx: TypeFilterChainContext,
): Promise<ParameterFilter> {
  if (filter.kind === 'chain') {
    const values: ReferenceSearchValue[] = [];
    for (const type of filter.targetTypes) {
      for await (const target of matches(type, filter.filter, ctx, values.length)) {
        values.push({ type: 'reference', resourceType: type, id: target.id });
      }
    }
    return { kind: 'parameter', code: filter.code, type: 'reference', values };
  }
  const ids = new Set<string>();
  const prefix = `${resourceType}/`;
  for await (const source of matches(filter.resourceType, filter.filter, ctx, 0)) {
    for (const key of referenceKeys(ctx.registry, source, filter.referenceParam))
      if (key.startsWith(prefix)) ids.add(key.slice(prefix.length));
  }
  const values = [...ids].map((code): TokenSearchValue => ({ type: 'token', code }));
  return { kind: 'parameter', code: '_id', type: 'token', values };
}

/**
 * The current `type` resources of the caller's view matching `filter`, page by page in `_id` order;
 * a 400 once more than `maxMatches` (counting `before` already found) have been read.
 */
async function* matches(
  type: string,
  filter: SearchFilter,
  ctx: TypeFilterChainContext,
  before: number,
): AsyncGenerator<StoredResource> {
  checkSee(ctx, type);
  const query: ResourceQuery = {
    search: filterSearch(type, filter),
    sort: '_id',
    count: PAGE,
    total: 'none',
  };
  let found = before;
  for (;;) {
    const page = await ctx.storage.searchResources(ctx.projectId, type, query);
    found += page.resources.length;
    if (found > ctx.maxMatches) {
      throw new FhirError(
        400,
        'too-costly',
        `A chain or _has of _typeFilter matches more than ${String(ctx.maxMatches)} ${type} resources; narrow it (or export without it and filter the files)`,
        { expression: ['_typeFilter'] },
      );
    }
    yield* page.resources;
    const last = page.resources.at(-1);
    if (page.resources.length < PAGE || !last) return;
    query.after = { id: last.id };
  }
}

/** 403 unless the caller may see resources of `type`: a chain must not match through the others. */
function checkSee(ctx: TypeFilterChainContext, type: string): void {
  if (!ctx.canSee(type)) {
    throw new FhirError(403, 'forbidden', `_typeFilter: the access token does not cover ${type}`, {
      expression: ['_typeFilter'],
    });
  }
}
