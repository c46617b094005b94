import { patientCompartmentIds } from '../fhir/compartment.js';
import { isResourceType } from '../common/resource-types.js';
import { parseSearchParams } from '../fhir/search.js';
import { FhirError } from '../http/http-error.js';
import { matchesIdentifier } from '../storage/identifier-keys.js';
import type { ResourceQuery, StoredResource } from '../storage/types.js';
import { PlatformError } from '../errors.js';

/** A compiled `_typeFilter`: the type it applies to and a test on each resource of that type. */
export interface CompiledTypeFilter {
  resourceType: string;
  matches: (resource: StoredResource) => boolean;
}

/** Search result parameters that Bulk Data 2.0.0 forbids in `_typeFilter` (they select no resources). */
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

/** Parses the query part of one `_typeFilter` with the FHIR router's search parser, or a problem text. */
function toQuery(resourceType: string, search: string): ResourceQuery | string {
  const params = [...new URLSearchParams(search)];
  for (const [name] of params) {
    if (RESULT_PARAMS.has(name.split(':')[0]!)) return `${name} is not allowed in _typeFilter`;
  }
  try {
    const { query } = parseSearchParams(resourceType, params, { strict: true });
    // Paging and sorting do not apply to a filter.
    delete query.count;
    delete query.offset;
    delete query.sort;
    return query;
  } catch (error) {
    if (error instanceof FhirError) return `_typeFilter ${resourceType}?${search}: ${error.message}`;
    throw error;
  }
}

function splitFilter(filter: string): { resourceType: string; search: string } | string {
  const q = filter.indexOf('?');
  const resourceType = q < 0 ? filter : filter.slice(0, q);
  if (!isResourceType(resourceType)) return `Unknown resource type in _typeFilter ${filter}`;
  return { resourceType, search: q < 0 ? '' : filter.slice(q + 1) };
}

/** Why a `_typeFilter` entry cannot be applied, or undefined when it can. */
export function checkTypeFilter(filter: string): string | undefined {
  const split = splitFilter(filter);
  if (typeof split === 'string') return split;
  const query = toQuery(split.resourceType, split.search);
  return typeof query === 'string' ? query : undefined;
}

/** True when `resource` satisfies every criterion of `query` (the storage `ResourceQuery` semantics). */
export function matchesQuery(resource: StoredResource, query: ResourceQuery): boolean {
  if (query.ids && !query.ids.includes(resource.id)) return false;
  if (query.lastUpdated) {
    const t = Date.parse(resource.meta.lastUpdated);
    const { gt, ge, lt, le } = query.lastUpdated;
    if ((gt !== undefined && !(t > gt)) || (ge !== undefined && !(t >= ge))) return false;
    if ((lt !== undefined && !(t < lt)) || (le !== undefined && !(t <= le))) return false;
  }
  if (query.compartment) {
    const ids = patientCompartmentIds(resource);
    if (!query.compartment.some((id) => ids.includes(id))) return false;
  }
  if (query.identifier && !matchesIdentifier(resource, query.identifier)) return false;
  if (query.where && !query.where(resource)) return false;
  return true;
}

/**
 * Compiles validated `_typeFilter` entries. Bulk Data 2.0.0: several filters on one type are
 * alternatives (a resource is kept when it matches any of them).
 */
export function compileTypeFilters(filters: readonly string[]): Map<string, CompiledTypeFilter[]> {
  const byType = new Map<string, CompiledTypeFilter[]>();
  for (const filter of filters) {
    const split = splitFilter(filter);
    if (typeof split === 'string') throw new PlatformError('ERR_INVALID_TYPE_FILTER', split);
    const query = toQuery(split.resourceType, split.search);
    if (typeof query === 'string') throw new PlatformError('ERR_INVALID_TYPE_FILTER', query);
    const compiled: CompiledTypeFilter = {
      resourceType: split.resourceType,
      matches: (resource) => matchesQuery(resource, query),
    };
    const list = byType.get(split.resourceType);
    if (list) list.push(compiled);
    else byType.set(split.resourceType, [compiled]);
  }
  return byType;
}
