import { patientCompartmentIds } from '../fhir/compartment.js';
import { isResourceType } from '../fhir/resource-types.js';
import type { InstantRange, ResourceQuery, StoredResource } from '../storage/types.js';

/** A compiled `_typeFilter`: the type it applies to and a test on each resource of that type. */
export interface CompiledTypeFilter {
  resourceType: string;
  matches: (resource: StoredResource) => boolean;
}

// Narrow adapter until the FHIR data plane's `parseSearchParams` is wired in: `_id` and `_lastUpdated`.
const PREFIXES = ['eq', 'gt', 'ge', 'lt', 'le'] as const;

function parseLastUpdated(value: string): InstantRange | undefined {
  const prefix = PREFIXES.find((p) => value.startsWith(p)) ?? 'eq';
  const text = value.startsWith(prefix) ? value.slice(2) : value;
  const ms = Date.parse(text);
  if (!/^\d{4}(-\d{2}(-\d{2}(T[\d:.]+(Z|[+-]\d{2}:\d{2})?)?)?)?$/.test(text) || Number.isNaN(ms)) return undefined;
  if (prefix === 'eq') return { ge: ms, le: ms };
  return { [prefix]: ms };
}

/** Parses the query part of one `_typeFilter` into a storage `ResourceQuery`, or a problem text. */
function toQuery(resourceType: string, search: string): ResourceQuery | string {
  const query: ResourceQuery = {};
  const range: InstantRange = {};
  for (const [name, value] of new URLSearchParams(search)) {
    if (name === '_id') {
      query.ids = [...(query.ids ?? []), ...value.split(',')];
    } else if (name === '_lastUpdated') {
      const parsed = parseLastUpdated(value);
      if (!parsed) return `Invalid _lastUpdated ${value}`;
      Object.assign(range, parsed);
    } else {
      return `Search parameter ${name} is not supported on ${resourceType} in _typeFilter`;
    }
  }
  if (Object.keys(range).length > 0) query.lastUpdated = range;
  return query;
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
    if (typeof split === 'string') throw new Error(split);
    const query = toQuery(split.resourceType, split.search);
    if (typeof query === 'string') throw new Error(query);
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
