import { isResourceType } from '../common/resource-types.js';
import type { FhirIssueCode } from '../http/http-error.js';
import type { SearchRegistry } from '../search/definitions.js';
import { matchesFilters, matchesParameter, referenceKeys } from '../search/match.js';
import { parseSearchRequest } from '../search/parse.js';
import { SearchParameterError } from '../search/search-error.js';
import {
  findUnresolvedTerminology,
  type ReferenceSearchValue,
  type SearchFilter,
  type SearchRequest,
  type SearchValue,
  type TokenSearchValue,
} from '../storage/search-request.js';
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
 * parameter without a value, whatever a type-level search refuses, and the token terminology
 * modifiers `:in`, `:not-in`, `:below`, `:above` (not-supported: the worker that applies the filter
 * later has no terminology). Chains and `_has` are kept as
 * parsed: the kick-off resolves them (`resolveTypeFilterChains`), since the export worker reads no
 * other type. `now` is the time the `ap` prefix is measured from.
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
    const terminology = findUnresolvedTerminology(request.filters);
    if (terminology) {
      // The worker has no terminology, and an expansion taken now would be kept for a job read later.
      return {
        code: 'not-supported',
        problem: `_typeFilter ${filter}: ${terminology.code}:${String(terminology.modifier)} is not supported in _typeFilter (search with it, or filter the files)`,
      };
    }
    return { search: { resourceType, filters: request.filters } };
  } catch (error) {
    if (!(error instanceof SearchParameterError)) throw error;
    return {
      code: error.issueCode === 'not-supported' ? 'not-supported' : 'invalid',
      problem: `_typeFilter ${filter}: ${error.message}`,
    };
  }
}

/**
 * The test of one plain filter. A resolved chain or `_has` (a list of `Type/id` references or of
 * `_id`s, possibly long) is tested by set lookup, which answers as `matchesParameter` does.
 */
function filterTest(registry: SearchRegistry, filter: SearchFilter): (resource: FhirResource) => boolean {
  if (filter.kind !== 'parameter') return (resource) => matchesFilters(registry, resource, [filter]);
  const plain = filter.modifier === undefined && filter.targetType === undefined;
  if (plain && filter.code === '_id' && filter.values.every((v) => v.type === 'token' && isBareCode(v))) {
    const ids = new Set(filter.values.map((v) => (v as TokenSearchValue).code));
    return (resource) => resource.id !== undefined && ids.has(resource.id);
  }
  if (plain && filter.type === 'reference' && filter.values.every(isTypeAndId)) {
    const keys = new Set(filter.values.map((v) => `${v.resourceType}/${v.id}`));
    return (resource) => referenceKeys(registry, resource, filter.code).some((key) => keys.has(key));
  }
  return (resource) => matchesParameter(registry, resource, filter);
}

const isBareCode = (v: TokenSearchValue): boolean =>
  v.code !== undefined && Object.keys(v).every((k) => k === 'type' || k === 'code');

const isTypeAndId = (v: SearchValue): v is ReferenceSearchValue & { resourceType: string; id: string } =>
  v.type === 'reference' &&
  v.resourceType !== undefined &&
  v.id !== undefined &&
  Object.keys(v).every((k) => k === 'type' || k === 'resourceType' || k === 'id');

/**
 * The test of each filtered type: Bulk Data 2.0.0, several filters on one type are alternatives (a
 * resource is kept when it matches any of them). Types without a filter have no entry. Chains and
 * `_has` must have been resolved (`resolveTypeFilterChains`): a test meeting one throws.
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
    [...byType].map(([type, list]) => {
      const alternatives = list.map((s) => s.filters.map((f) => filterTest(registry, f)));
      return [
        type,
        (resource: FhirResource) => alternatives.some((all) => all.every((test) => test(resource))),
      ];
    }),
  );
}
