import { AUDIT_EVENT_TYPE } from '../../audit/codes.js';
import { AUDIT_EVENT_SEARCH_PARAMS, auditSearchPredicate } from '../audit/audit-event-search.js';
import { FhirError } from '../../http/http-error.js';
import { loadSearchRegistry, type SearchRegistry } from '../../search/definitions.js';
import { parseSearchRequest, type IgnoredParameter } from '../../search/parse.js';
import { typesReadByFilters } from '../../search/types-read.js';
import type { SearchCostLimits } from '../../search/cost-limits.js';
import type { ParameterFilter, SearchRequest } from '../../storage/search-request.js';
import { sortValuesOf } from '../../search/sort-values.js';
import type { ResourceCursor, ResourceQuery, StoredResource } from '../../storage/types.js';
import { patientSearchParams } from '../compartment.js';
import { decodeCursor, type CursorShape, type PageCursor } from './search-cursor.js';
import { resolveTerminologyFilters, type TerminologyResolution } from './resolve-terminology.js';

/** Options of {@link parseSearch}. */
export interface SearchQueryOptions {
  /**
   * `Prefer: handling=lenient`: unknown or unsupported parameters are ignored (and listed) instead
   * of answering 400. @default false
   */
  lenient?: boolean;
  /** Page size when `_count` is absent. @default 20 */
  defaultCount?: number;
  /** Largest page size; a larger `_count` is lowered to it. @default 1000 */
  maxCount?: number;
  /** Bounds on what the search may ask (400 `too-costly` beyond). @default SEARCH_COST_DEFAULTS */
  limits?: SearchCostLimits;
}

/**
 * How a search may reach resources of other types (chains and `_has`): `authorize` is asked, when
 * the search is planned and before anything is read, about every type its filters read (see
 * `typesReadByFilters`) and throws a 403 `FhirError` for one the caller may not search. The store
 * then answers the chains itself (within the search's `reach` for a SMART user, see
 * `scopedStorage`).
 */
export interface SearchReads {
  authorize(resourceType: string): void;
  /**
   * What the token modifiers `:in`, `:not-in`, `:below`, `:above` are resolved with
   * (`resolveTerminologyFilters`); absent: they answer 400 `not-supported`.
   */
  terminology?: TerminologyResolution;
}

/** A type-level search, parsed and turned into a storage query. */
export interface ParsedSearch {
  /** What to ask `storage.searchResources`. */
  query: ResourceQuery;
  /** The parsed search (plain data). */
  request: SearchRequest;
  /** The parameters that were ignored (lenient handling, or an empty value), in request order. */
  ignored: IgnoredParameter[];
  /** The parameters applied, without paging: what a `self` / `next` link repeats. */
  applied: [string, string][];
  /** The `_cursor` the page was asked from (set in `query.after` / `query.before` too). */
  cursor?: PageCursor;
  /** What a cursor of this search carries (for the links' cursors). */
  cursorShape: CursorShape;
  /** The position of a resource in this search's order (what a link's `_cursor` pages from). */
  positionOf(resource: StoredResource): ResourceCursor;
}

/** The patient ids of a reference filter on a compartment parameter naming Patients only, or undefined. */
function patientIds(resourceType: string, filter: ParameterFilter): string[] | undefined {
  if (filter.modifier !== undefined || !patientSearchParams(resourceType).includes(filter.code))
    return undefined;
  if (filter.targetType !== undefined && filter.targetType !== 'Patient') return undefined;
  const ids: string[] = [];
  for (const v of filter.values) {
    if (v.type !== 'reference' || v.resourceType !== 'Patient' || v.id === undefined) return undefined;
    ids.push(v.id);
  }
  return ids;
}

const intersect = (a: string[] | undefined, b: string[]): string[] =>
  a === undefined ? [...new Set(b)] : a.filter((x) => b.includes(x));

/**
 * Parses a type-level search (`GET [base]/[type]?…`, a batch `GET` entry, a conditional
 * interaction's criteria) with the R4 search module (`src/search`) and turns it into a storage
 * query: the parsed search is the query's `search`, which the store answers wholly (chains and
 * `_has` included; Patient references of compartment parameters add a compartment to it, which the
 * store narrows by). Every type a chain or `_has` reads is authorized through `reads` first (403),
 * then the token modifiers `:in`, `:not-in`, `:below`, `:above` are resolved into plain token
 * values through `reads.terminology` (`resolveTerminologyFilters`).
 * `AuditEvent`'s own parameters are the one `where` (`auditSearchPredicate`: an agent's bare id
 * also matches its identifier).
 *
 * `_sort` becomes the stores' `sort` or an `order` by the keys' values (see `orderQuery`); `_cursor`
 * (what the paging links carry, see `search-cursor.ts`) becomes `after` / `before`. The result
 * parameters (`_include`, `_revinclude`, `_summary`, `_elements`, `_total`) stay in `request` for
 * the interaction and the Bundle.
 * @see https://hl7.org/fhir/R4/search.html
 */
export async function parseSearch(
  resourceType: string,
  params: Iterable<readonly [string, string]>,
  options: SearchQueryOptions,
  reads: SearchReads,
): Promise<ParsedSearch> {
  const registry = await loadSearchRegistry();
  const lenient = options.lenient ?? false;
  const all = [...params];
  const ignoredAt = new Map<number, IgnoredParameter['reason']>();
  const appliedHere: number[] = [];
  const rest: [string, string][] = [];
  const restIndex: number[] = [];
  const auditTests: ((resource: StoredResource) => boolean)[] = [];
  let cursorText: string | undefined;

  all.forEach(([rawName, value], index) => {
    const colon = rawName.indexOf(':');
    const code = colon === -1 ? rawName : rawName.slice(0, colon);
    const modifier = colon === -1 ? undefined : rawName.slice(colon + 1);
    const unsupported = (why: string): void => {
      if (!lenient) throw new FhirError(400, 'not-supported', why, { expression: [rawName] });
      ignoredAt.set(index, 'not-supported');
    };
    if (resourceType === AUDIT_EVENT_TYPE && AUDIT_EVENT_SEARCH_PARAMS.includes(code)) {
      const test = auditSearchPredicate(code, modifier, value);
      if (test === undefined) unsupported(`Unsupported search modifier on ${rawName}`);
      else {
        auditTests.push(test);
        appliedHere.push(index);
      }
      return;
    }
    if (rawName === '_cursor') {
      if (cursorText !== undefined) {
        throw new FhirError(400, 'invalid', '_cursor may be given once', { expression: ['_cursor'] });
      }
      cursorText = value;
      return;
    }
    rest.push([rawName, value]);
    restIndex.push(index);
  });

  const parsed = parseSearchRequest(registry, resourceType, rest, {
    lenient,
    ...(options.defaultCount === undefined ? {} : { defaultCount: options.defaultCount }),
    ...(options.maxCount === undefined ? {} : { maxCount: options.maxCount }),
    ...(options.limits === undefined ? {} : { limits: options.limits }),
  });
  // Map the module's ignored and applied parameters back to their place in the request.
  const taken = new Set<number>();
  const placeOf = ([name, value]: readonly [string, string]): number | undefined => {
    const i = restIndex.find((at, k) => !taken.has(at) && rest[k]![0] === name && rest[k]![1] === value);
    if (i !== undefined) taken.add(i);
    return i;
  };
  for (const { name, reason } of parsed.ignored) {
    const i = restIndex.find((at, k) => !taken.has(at) && rest[k]![0] === name);
    if (i !== undefined) {
      taken.add(i);
      ignoredAt.set(i, reason);
    }
  }
  const appliedAt = new Set(appliedHere);
  for (const pair of parsed.applied) {
    const i = placeOf(pair);
    if (i !== undefined) appliedAt.add(i);
  }

  for (const type of typesReadByFilters(parsed.request.filters)) reads.authorize(type);
  // After the bounds and rights that need no read; before the turn and the store (which refuse them).
  const request = await resolveTerminologyFilters(registry, parsed.request, reads.terminology);
  const query: ResourceQuery = { count: request.count, search: request };
  if (request.offset > 0) query.offset = request.offset;
  const cursorShape = orderQuery(registry, request, query);
  let cursor: PageCursor | undefined;
  if (cursorText !== undefined) {
    if (request.offset > 0) {
      throw new FhirError(400, 'invalid', '_cursor and _offset do not combine', { expression: ['_offset'] });
    }
    cursor = decodeCursor(cursorText, cursorShape);
    if (cursor.direction === 'after') query.after = cursor.position;
    else query.before = cursor.position;
  }
  // Patient references of compartment parameters imply a compartment: the store narrows by its index.
  let compartment: string[] | undefined;
  for (const filter of request.filters) {
    const patients = filter.kind === 'parameter' ? patientIds(resourceType, filter) : undefined;
    if (patients) compartment = intersect(compartment, patients);
  }
  if (compartment !== undefined)
    query.search = { ...request, compartment: { compartment: 'Patient', ids: compartment } };

  // The store answers the search; `where` holds only AuditEvent's own tests.
  const [firstTest] = auditTests;
  if (auditTests.length === 1) query.where = firstTest;
  else if (auditTests.length > 1) query.where = (resource) => auditTests.every((test) => test(resource));

  const { order } = query;
  return {
    query,
    request,
    ignored: all.flatMap(([name], i) => {
      const reason = ignoredAt.get(i);
      return reason ? [{ name, reason }] : [];
    }),
    applied: all.filter((_, i) => appliedAt.has(i) && !ignoredAt.has(i)).map(([n, v]) => [n, v]),
    ...(cursor ? { cursor } : {}),
    cursorShape,
    positionOf: (resource) => ({
      id: resource.id,
      ...(cursorShape.lastUpdated ? { lastUpdated: resource.meta.lastUpdated } : {}),
      ...(order ? { keys: order.keys(resource) } : {}),
    }),
  };
}

/**
 * Sets the order of `query` from `_sort`: the stores' own `sort` when the first key is `_id` or
 * `_lastUpdated` (each unique within a project, so later keys never matter), else `order` by the
 * keys' values (`sortValuesOf`). Answers what a paging cursor of that order carries.
 */
function orderQuery(registry: SearchRegistry, request: SearchRequest, query: ResourceQuery): CursorShape {
  const sort = request.sort.map((k) => `${k.descending ? '-' : ''}${k.code}`).join(',');
  const [first] = request.sort;
  if (!first) return { sort, lastUpdated: true, keys: undefined };
  if (first.code === '_lastUpdated' || first.code === '_id') {
    query.sort = `${first.descending ? '-' : ''}${first.code}` as NonNullable<ResourceQuery['sort']>;
    return { sort, lastUpdated: first.code === '_lastUpdated', keys: undefined };
  }
  query.order = {
    keys: sortValuesOf(registry, request.resourceType, request.sort),
    descending: request.sort.map((k) => k.descending),
  };
  return { sort, lastUpdated: false, keys: request.sort.length };
}
