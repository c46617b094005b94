import type { IdentifierToken, InstantRange, ResourceQuery } from './query-types.js';
import { UnsupportedSearchError } from './errors.js';
import {
  findUnresolvedTerminology,
  type ParameterFilter,
  type SearchFilter,
  type SearchRequest,
} from './search-request.js';

/*
 * The filters of a search that every store answers from what it keeps of each version whatever its
 * search indexes (the id, `meta.lastUpdated`, the identifier index): read out of the query's
 * `search` so that the rest goes to the store's search indexes (and the caller's `where`).
 */

/** A query with its search's narrowing filters read out (see {@link narrowQuery}). */
export interface NarrowedQuery extends ResourceQuery {
  /** Only these ids (`_id`). */
  ids?: string[];
  /** Only versions whose `meta.lastUpdated` lies in it (`_lastUpdated`). */
  lastUpdated?: InstantRange;
  /** Only resources with a top-level `identifier` matching one of these (a plain `identifier`). */
  identifier?: IdentifierToken[];
}

/** Prefixes of one `_lastUpdated` value the stores' range index answers exactly. */
const RANGE_PREFIXES = new Set(['eq', 'gt', 'ge', 'lt', 'le']);

/**
 * The `[ge, lt)` bounds, on `meta.lastUpdated` in epoch ms, of a one-value `_lastUpdated` filter
 * with one of `RANGE_PREFIXES`. Exact, not only a narrowing: the stores write `meta.lastUpdated`
 * to the millisecond, whose range `[t, t + 1)` the R4 prefixes turn into these bounds.
 */
function lastUpdatedRange(filter: ParameterFilter): { ge?: number; lt?: number } | undefined {
  const [value] = filter.values;
  if (filter.modifier !== undefined || filter.values.length !== 1 || value?.type !== 'date') return undefined;
  if (!RANGE_PREFIXES.has(value.prefix)) return undefined;
  switch (value.prefix) {
    case 'gt':
      return { ge: value.end };
    case 'ge':
      return { ge: value.start };
    case 'lt':
      return { lt: value.start };
    case 'le':
      return { lt: value.end };
    default:
      return { ge: value.start, lt: value.end };
  }
}

/** The ids of a plain `_id` filter (codes without system), or undefined. */
function idsOf(filter: ParameterFilter): string[] | undefined {
  if (filter.modifier !== undefined) return undefined;
  const ids: string[] = [];
  for (const v of filter.values) {
    if (v.type !== 'token' || v.code === undefined || v.system !== undefined || v.typeSystem !== undefined) {
      return undefined;
    }
    ids.push(v.code);
  }
  return ids;
}

/** The identifier tokens of a plain `identifier` filter, or undefined. */
function identifierTokens(filter: ParameterFilter): IdentifierToken[] | undefined {
  if (filter.modifier !== undefined) return undefined;
  const tokens: IdentifierToken[] = [];
  for (const v of filter.values) {
    if (v.type !== 'token' || v.text !== undefined || v.typeSystem !== undefined) return undefined;
    tokens.push({
      ...(v.system === undefined ? {} : { system: v.system }),
      ...(v.code === undefined ? {} : { value: v.code }),
    });
  }
  return tokens;
}

/** Narrows `range` by `[ge, lt)`. */
function narrowRange(range: InstantRange | undefined, bounds: { ge?: number; lt?: number }): InstantRange {
  const out: InstantRange = { ...range };
  if (bounds.ge !== undefined) out.ge = out.ge === undefined ? bounds.ge : Math.max(out.ge, bounds.ge);
  if (bounds.lt !== undefined) out.lt = out.lt === undefined ? bounds.lt : Math.min(out.lt, bounds.lt);
  return out;
}

/** Reads one narrowing filter into `query`; false when `filter` is not one. */
function readNarrowing(query: NarrowedQuery, filter: SearchFilter, identifierIndexed: boolean): boolean {
  if (filter.kind !== 'parameter') return false;
  if (filter.code === '_id') {
    const ids = idsOf(filter);
    if (!ids) return false;
    query.ids = query.ids === undefined ? [...new Set(ids)] : query.ids.filter((id) => ids.includes(id));
    return true;
  }
  if (filter.code === '_lastUpdated') {
    const range = lastUpdatedRange(filter);
    if (!range) return false;
    query.lastUpdated = narrowRange(query.lastUpdated, range);
    return true;
  }
  if (filter.code === 'identifier' && identifierIndexed && query.identifier === undefined) {
    const tokens = identifierTokens(filter);
    if (!tokens) return false;
    query.identifier = tokens;
    return true;
  }
  return false;
}

/**
 * `query` with the filters of its search (of `resourceType`) that the store answers from the id, the
 * time and the identifier index read out into `ids`, `lastUpdated` and `identifier`, and left out
 * of its `search`: a plain `_id`, a one-value `_lastUpdated` with `eq`, `gt`, `ge`, `lt` or `le`,
 * and the first plain `identifier` when `identifierIndexed` says that the type's `identifier`
 * parameter reads exactly its top-level `identifier` element (`ResourceIndexer.identifierIndexed`).
 * Every store narrows its queries here first, so here it refuses (`UnsupportedSearchError`) a
 * search holding a terminology filter left unresolved (`findUnresolvedTerminology`), at any depth.
 */
export function narrowQuery(
  resourceType: string,
  query: ResourceQuery,
  identifierIndexed?: (resourceType: string) => boolean,
): NarrowedQuery {
  const { search } = query;
  refuseUnresolvedTerminology(search);
  if (search?.resourceType !== resourceType) return query;
  const narrowed: NarrowedQuery = { ...query };
  const indexed = identifierIndexed?.(resourceType) === true;
  const rest = search.filters.filter((filter) => !readNarrowing(narrowed, filter, indexed));
  if (rest.length < search.filters.length)
    narrowed.search = { ...search, filters: rest } satisfies SearchRequest;
  return narrowed;
}

/** Throws `UnsupportedSearchError` when `search` holds an unresolved terminology filter. */
export function refuseUnresolvedTerminology(search: Pick<SearchRequest, 'filters'> | undefined): void {
  const filter = search && findUnresolvedTerminology(search.filters);
  if (filter) {
    throw new UnsupportedSearchError(
      `${filter.code}:${String(filter.modifier)} must be resolved against the terminology before a store answers it`,
    );
  }
}
