import { isResourceType } from '../common/resource-types.js';
import { FhirError, type FhirIssueCode } from '../http/http-error.js';
import type { SearchRegistry } from '../search/definitions.js';
import { matchesFilters } from '../search/match.js';
import { parseSearchRequest } from '../search/parse.js';
import type { SearchRequest } from '../storage/search-request.js';
import type { FhirResource } from '../storage/types.js';

/**
 * One parsed `_typeFilter` query: its type and its filters (ANDed), plain structured-cloneable data
 * kept with the job and sent to the export worker.
 */
export type TypeFilterSearch = Pick<SearchRequest, 'resourceType' | 'filters'>;

/** What {@link parseTypeFilter} answers: the parsed query, or why it cannot be applied. */
export type ParsedTypeFilter =
  | { search: TypeFilterSearch }
  | { problem: string; code: Extract<FhirIssueCode, 'invalid' | 'not-supported'> };

/**
 * Search result parameters, which select no resources: Bulk Data 2.0.0 `_typeFilter` takes search
 * parameters only.
 */
const RESULT_PARAMS = new Set([
  '_sort',
  '_count',
  '_offset',
  '_summary',
  '_include',
  '_revinclude',
  '_elements',
  '_total',
  '_contained',
  '_containedType',
]);

/**
 * Parses one `_typeFilter` entry (`Type?query`, the query URL-encoded) with the search module:
 * every search parameter a type-level search takes, with its modifiers and prefixes. Not applied
 * (a problem is answered): an unknown type, a result parameter (`_sort`, `_include`, …), a
 * parameter without a value, chains and `_has` (the export worker reads no other type), and
 * whatever a type-level search refuses. `now` is the time the `ap` prefix is measured from.
 * @see https://hl7.org/fhir/uv/bulkdata/STU2/export.html#_typefilter-experimental-query-parameter
 */
export function parseTypeFilter(registry: SearchRegistry, filter: string, now?: number): ParsedTypeFilter {
  const q = filter.indexOf('?');
  const resourceType = q < 0 ? filter : filter.slice(0, q);
  if (!isResourceType(resourceType)) {
    return { code: 'invalid', problem: `Unknown resource type in _typeFilter ${filter}` };
  }
  const params = [...new URLSearchParams(q < 0 ? '' : filter.slice(q + 1))];
  for (const [name, value] of params) {
    if (RESULT_PARAMS.has(name.split(':')[0]!)) {
      return { code: 'not-supported', problem: `${name} is not allowed in _typeFilter ${filter}` };
    }
    // A search ignores it; a filter that silently exports more than asked would be worse.
    if (value === '') return { code: 'invalid', problem: `${name} has no value in _typeFilter ${filter}` };
  }
  try {
    const { request } = parseSearchRequest(registry, resourceType, params, now === undefined ? {} : { now });
    if (request.filters.some((f) => f.kind !== 'parameter')) {
      return {
        code: 'not-supported',
        problem: `Chained and _has parameters are not supported in _typeFilter ${filter}`,
      };
    }
    return { search: { resourceType, filters: request.filters } };
  } catch (error) {
    if (!(error instanceof FhirError)) throw error;
    return {
      code: error.issueCode === 'not-supported' ? 'not-supported' : 'invalid',
      problem: `_typeFilter ${filter}: ${error.message}`,
    };
  }
}

/**
 * The test of each filtered type: Bulk Data 2.0.0, several filters on one type are alternatives (a
 * resource is kept when it matches any of them). Types without a filter have no entry.
 */
export function typeFilterTests(
  registry: SearchRegistry,
  searches: readonly TypeFilterSearch[],
): Map<string, (resource: FhirResource) => boolean> {
  const byType = new Map<string, TypeFilterSearch[]>();
  for (const search of searches) {
    const list = byType.get(search.resourceType);
    if (list) list.push(search);
    else byType.set(search.resourceType, [search]);
  }
  return new Map(
    [...byType].map(([type, list]) => [
      type,
      (resource: FhirResource) => list.some((s) => matchesFilters(registry, resource, s.filters)),
    ]),
  );
}
