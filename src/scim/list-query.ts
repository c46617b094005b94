/**
 * The query of a SCIM list/search request (RFC 7644 §3.4.2, §3.4.3): filter, sorting, paging and
 * attribute selection, read from URL parameters or a SearchRequest body, and the sort comparator.
 */
import { ScimError } from '../http/http-error.js';
import { parseAttributeList, type ScimAttributeSelection } from './attributes.js';
import { parseScimAttributePath, parseScimFilter, type ScimFilter } from './filter-parser.js';
import { getOwn, isPlainObject } from './json-access.js';
import { resolveAttribute, type ResolvedAttribute, type ScimResourceSchemas } from './schema.js';

export interface ScimListQuery extends ScimAttributeSelection {
  filter?: ScimFilter;
  sortBy?: ResolvedAttribute;
  descending: boolean;
  /** 1-based. */
  startIndex: number;
  count: number;
  /**
   * A search at the server root, across resource types (RFC 7644 §3.4.2.1): an attribute of the
   * filter that this type does not define reads as absent instead of answering 400.
   */
  serverRoot?: boolean;
}

function invalidValue(message: string): ScimError {
  return new ScimError(400, 'invalidValue', message);
}

function raw(params: Record<string, unknown>, name: string): unknown {
  const key = Object.keys(params).find((k) => k.toLowerCase() === name.toLowerCase());
  return key === undefined ? undefined : params[key];
}

function single(params: Record<string, unknown>, name: string): unknown {
  const value = raw(params, name);
  if (Array.isArray(value)) {
    if (value.length !== 1) throw invalidValue(`${name} given more than once`);
    return value[0];
  }
  return value;
}

function integer(value: unknown, name: string): number | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  const n =
    typeof value === 'number'
      ? value
      : typeof value === 'string' && /^\s*-?\d+\s*$/.test(value)
        ? Number(value)
        : NaN;
  if (!Number.isSafeInteger(n)) throw invalidValue(`${name} must be an integer`);
  return n;
}

/**
 * Reads list parameters (URL query or SearchRequest body; names case-insensitive). `startIndex`
 * below 1 means 1; a negative `count` means 0; `count` is capped at `maxResults`.
 */
export function readListQuery(
  params: Record<string, unknown>,
  schemas: ScimResourceSchemas,
  maxResults: number,
): ScimListQuery {
  const filterText = single(params, 'filter');
  if (filterText !== undefined && typeof filterText !== 'string')
    throw new ScimError(400, 'invalidFilter', 'filter must be a string');
  const filter =
    filterText !== undefined && filterText.trim() !== '' ? parseScimFilter(filterText) : undefined;
  const sortByText = single(params, 'sortBy');
  let sortBy: ResolvedAttribute | undefined;
  if (sortByText !== undefined && sortByText !== '') {
    if (typeof sortByText !== 'string') throw invalidValue('sortBy must be a string');
    sortBy = resolveAttribute(schemas, parseScimAttributePath(sortByText));
  }
  const sortOrder = single(params, 'sortOrder');
  if (
    sortOrder !== undefined &&
    sortOrder !== '' &&
    (typeof sortOrder !== 'string' || !/^(ascending|descending)$/i.test(sortOrder))
  ) {
    throw invalidValue('sortOrder must be ascending or descending');
  }
  const startIndex = Math.max(1, integer(single(params, 'startIndex'), 'startIndex') ?? 1);
  const count = Math.min(maxResults, Math.max(0, integer(single(params, 'count'), 'count') ?? maxResults));
  const attributes = parseAttributeList(raw(params, 'attributes'));
  const excludedAttributes = parseAttributeList(raw(params, 'excludedAttributes'));
  return {
    ...(filter ? { filter } : {}),
    ...(sortBy ? { sortBy } : {}),
    descending: typeof sortOrder === 'string' && sortOrder.toLowerCase() === 'descending',
    startIndex,
    count,
    ...(attributes ? { attributes } : {}),
    ...(excludedAttributes ? { excludedAttributes } : {}),
  };
}

/** The SearchRequest of a `POST .search` (RFC 7644 §3.4.3): 400 `invalidSyntax` unless an object. */
export function searchRequestBody(body: unknown): Record<string, unknown> {
  if (!isPlainObject(body))
    throw new ScimError(400, 'invalidSyntax', 'The body must be a SearchRequest object');
  return body;
}

/** The value a resource sorts by: a multi-valued attribute's primary value, else its first. */
function sortValue(resource: unknown, attribute: ResolvedAttribute): unknown {
  const { definition, extension, subAttribute } = attribute;
  let value = getOwn(extension ? getOwn(resource, extension) : resource, definition.name);
  if (Array.isArray(value)) value = value.find((v) => isPlainObject(v) && v.primary === true) ?? value[0];
  if (subAttribute) return getOwn(value, subAttribute.name);
  if (definition.type === 'complex') return getOwn(value, 'value');
  return value;
}

function comparable(value: unknown, attribute: ResolvedAttribute): string | number | undefined {
  const definition = attribute.subAttribute ?? attribute.definition;
  if (value === undefined || value === null) return undefined;
  if (definition.type === 'dateTime' && typeof value === 'string') {
    const time = Date.parse(value);
    return Number.isNaN(time) ? undefined : time;
  }
  if (typeof value === 'number') return value;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (typeof value !== 'string') return undefined;
  return definition.caseExact ? value : value.toLowerCase();
}

/**
 * A comparator for `sortBy`/`sortOrder` (RFC 7644 §3.4.2.3); resources without a value sort last
 * in either order. Ties keep their incoming order (Array.prototype.sort is stable).
 */
export function scimSortComparator(
  attribute: ResolvedAttribute,
  descending: boolean,
): (a: Record<string, unknown>, b: Record<string, unknown>) => number {
  return (a, b) => {
    const x = comparable(sortValue(a, attribute), attribute);
    const y = comparable(sortValue(b, attribute), attribute);
    if (x === undefined || y === undefined) return x === y ? 0 : x === undefined ? 1 : -1;
    const cmp = x < y ? -1 : x > y ? 1 : 0;
    return descending ? -cmp : cmp;
  };
}
