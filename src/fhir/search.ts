import { AUDIT_EVENT_TYPE } from '../audit/codes.js';
import { AUDIT_EVENT_SEARCH_PARAMS, auditSearchPredicate } from './audit-event-search.js';
import { FhirError } from '../http/http-error.js';
import { matchesIdentifier } from '../storage/identifier-keys.js';
import type { IdentifierToken, InstantRange, ResourceQuery, StoredResource } from '../storage/types.js';
import {
  patientIdOfReference,
  patientIdsForParam,
  patientSearchParams,
  referencesForParam,
} from './compartment.js';
import { parseDateRange } from '../common/date-range.js';
import { isValidId } from '../common/resource-types.js';

/** Options of {@link parseSearchParams}. */
export interface ParseSearchOptions {
  /**
   * `Prefer: handling=strict`: an unknown or unsupported parameter is a 400 error instead of being
   * ignored. @default false
   */
  strict?: boolean;
  /** Page size when `_count` is absent. @default 20 */
  defaultCount?: number;
  /** Largest page size; a larger `_count` is lowered to it. @default 1000 */
  maxCount?: number;
}

/** The outcome of {@link parseSearchParams}. */
export interface ParsedSearch {
  /** What to ask `storage.searchResources`. */
  query: ResourceQuery;
  /** Names of the parameters that were ignored (lenient handling only), in request order. */
  ignored: string[];
  /**
   * The parameters that were applied, normalised, without paging (`_count`, `_offset`): what a
   * `self` / `next` link repeats.
   */
  applied: [string, string][];
}

/** Search parameters accepted for every type and ignored on purpose (they change no result). */
const NO_OP_PARAMS = new Set(['_format', '_pretty', '_total']);
const SORTS = new Set(['_lastUpdated', '-_lastUpdated', '_id', '-_id']);
const DATE_PREFIXES = new Set(['eq', 'gt', 'ge', 'lt', 'le']);

function invalid(param: string, message: string): FhirError {
  return new FhirError(400, 'invalid', message, { expression: [param] });
}

/** Splits a search value on unescaped commas (OR). */
function splitValues(value: string): string[] {
  return value.split(/(?<!\\),/);
}

function nonNegativeInteger(param: string, value: string): number {
  if (!/^\d{1,9}$/.test(value)) throw invalid(param, `${param} must be a non-negative integer`);
  return Number(value);
}

/** Tightens `range` (kept as `ge` / `lt` on whole milliseconds) with one `_lastUpdated` value. */
function addLastUpdated(range: { ge?: number; lt?: number }, value: string): void {
  if (value.includes(',')) throw invalid('_lastUpdated', '_lastUpdated does not support several values (OR)');
  const hasPrefix = /^[a-z]{2}/.test(value);
  const prefix = hasPrefix ? value.slice(0, 2) : 'eq';
  if (!DATE_PREFIXES.has(prefix)) throw invalid('_lastUpdated', `Unsupported _lastUpdated prefix ${prefix}`);
  const interval = parseDateRange(hasPrefix ? value.slice(2) : value);
  if (!interval) throw invalid('_lastUpdated', '_lastUpdated must be a FHIR date, dateTime or instant');
  let lower: number | undefined;
  let upper: number | undefined;
  switch (prefix) {
    case 'eq':
      lower = interval.start;
      upper = interval.end;
      break;
    case 'gt':
      lower = interval.end;
      break;
    case 'ge':
      lower = interval.start;
      break;
    case 'lt':
      upper = interval.start;
      break;
    case 'le':
      upper = interval.end;
      break;
  }
  if (lower !== undefined) range.ge = range.ge === undefined ? lower : Math.max(range.ge, lower);
  if (upper !== undefined) range.lt = range.lt === undefined ? upper : Math.min(range.lt, upper);
}

/** One value of a reference parameter: a patient id, or an exact `Type/id` of another type. */
interface ReferenceTarget {
  patientId?: string;
  typed?: string;
}

function parseReferenceValue(param: string, raw: string): ReferenceTarget {
  const value = raw.trim();
  if (isValidId(value)) return { patientId: value };
  const patientId = patientIdOfReference(value);
  if (patientId !== undefined) return { patientId };
  const m =
    /(?:^|\/)([A-Z][A-Za-z]{1,63})\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/.exec(value);
  if (!m) throw invalid(param, `${param} must be a reference (Patient/123) or an id`);
  return { typed: `${m[1]}/${m[2]}` };
}

/** One `identifier` token: `system|value`, `|value` (no system), `system|` (any value), `value`. */
function parseIdentifierToken(raw: string): IdentifierToken {
  // A backslash escapes `|` and `,` in token values (FHIR search escaping).
  const bar = raw.search(/(?<!\\)\|/);
  const unescape = (v: string) => v.replace(/\\([|,$\\])/g, '$1');
  if (bar === -1) return { value: unescape(raw) };
  const system = unescape(raw.slice(0, bar));
  const value = unescape(raw.slice(bar + 1));
  return { system: system === '' ? null : system, ...(value === '' ? {} : { value }) };
}

/** Builds the membership test of one reference parameter (its values are ORed). */
function referencePredicate(
  param: string,
  targets: ReferenceTarget[],
): (resource: StoredResource) => boolean {
  const patientIds = new Set(targets.flatMap((t) => (t.patientId === undefined ? [] : [t.patientId])));
  const typed = targets.flatMap((t) => (t.typed === undefined ? [] : [t.typed]));
  return (resource) => {
    if (patientIds.size > 0) {
      for (const id of patientIdsForParam(resource, param) ?? []) if (patientIds.has(id)) return true;
    }
    if (typed.length > 0) {
      for (const ref of referencesForParam(resource, param) ?? [])
        for (const t of typed) if (ref === t || ref.endsWith(`/${t}`)) return true;
    }
    return false;
  };
}

/**
 * Turns the search parameters of one `_typeFilter` query of a bulk export into a storage query (the
 * FHIR search itself goes through `parseSearch` and the search module; `_typeFilter` moves there
 * next). Supported: `_id` (comma list), `identifier` (token; the
 * first such parameter becomes `query.identifier`, answered by the store's identifier index),
 * `_lastUpdated` (`eq` `gt` `ge` `lt` `le`, partial dates as ranges), `_sort` (`_lastUpdated`,
 * `_id`, either descending with `-`),
 * `_count`, `_offset`, `_summary=count`, `AuditEvent`'s own parameters (`AUDIT_EVENT_SEARCH_PARAMS`:
 * `date`, `agent`, `entity`, `action`, `type`, …), and every reference parameter that places the type in a
 * patient's compartment (`patient`, `subject`, `performer`, …: see `patientSearchParams`), valued
 * `Patient/123`, `123` (a patient id) or an absolute URL; commas OR values, repeats AND them.
 *
 * Unknown parameters and unsupported modifiers are ignored (and listed in `ignored`), or a 400
 * `FhirError` under `strict`; a malformed value of a supported parameter is always a 400.
 * @see https://hl7.org/fhir/R4/search.html
 */
export function parseSearchParams(
  resourceType: string,
  params: Iterable<readonly [string, string]>,
  options: ParseSearchOptions = {},
): ParsedSearch {
  const strict = options.strict ?? false;
  const maxCount = options.maxCount ?? 1000;
  const query: ResourceQuery = { count: Math.min(options.defaultCount ?? 20, maxCount) };
  const ignored: string[] = [];
  const applied: [string, string][] = [];
  const referenceParams = new Set(patientSearchParams(resourceType));
  let ids: Set<string> | undefined;
  let range: { ge?: number; lt?: number } | undefined;
  let compartment: Set<string> | undefined;
  const predicates: ((resource: StoredResource) => boolean)[] = [];

  const unsupported = (name: string, why: string): void => {
    if (strict) throw invalid(name, why);
    ignored.push(name);
  };

  for (const [rawName, value] of params) {
    const colon = rawName.indexOf(':');
    const name = colon === -1 ? rawName : rawName.slice(0, colon);
    const modifier = colon === -1 ? undefined : rawName.slice(colon + 1);
    if (resourceType === AUDIT_EVENT_TYPE && AUDIT_EVENT_SEARCH_PARAMS.includes(name)) {
      const predicate = auditSearchPredicate(name, modifier, value);
      if (predicate === undefined) unsupported(rawName, `Unsupported search modifier on ${rawName}`);
      else {
        predicates.push(predicate);
        applied.push([rawName, value]);
      }
      continue;
    }
    if (modifier !== undefined && !(referenceParams.has(name) && modifier === 'Patient')) {
      unsupported(rawName, `Unsupported search modifier on ${rawName}`);
      continue;
    }
    if (name === '_id') {
      const list = value.split(',').map((v) => v.trim());
      for (const id of list)
        if (!isValidId(id)) throw invalid('_id', '_id must be a comma-separated list of ids');
      const next = new Set(list);
      ids = ids === undefined ? next : new Set([...ids].filter((id) => next.has(id)));
      applied.push([rawName, value]);
    } else if (name === '_lastUpdated') {
      range ??= {};
      addLastUpdated(range, value);
      applied.push([rawName, value]);
    } else if (name === '_sort') {
      if (!SORTS.has(value)) throw invalid('_sort', `_sort supports ${[...SORTS].join(', ')}`);
      query.sort = value as ResourceQuery['sort'];
      applied.push([rawName, value]);
    } else if (name === '_count') {
      query.count = Math.min(nonNegativeInteger('_count', value), maxCount);
    } else if (name === '_offset') {
      query.offset = nonNegativeInteger('_offset', value);
    } else if (name === '_summary') {
      if (value !== 'count' && value !== 'false') {
        unsupported(rawName, '_summary supports only count and false');
        continue;
      }
      if (value === 'count') query.count = 0;
      applied.push([rawName, value]);
    } else if (name === 'identifier') {
      const tokens = splitValues(value).map(parseIdentifierToken);
      if (tokens.some((t) => t.value === undefined && t.system === undefined)) {
        throw invalid('identifier', 'identifier needs a system, a value or both');
      }
      // The first one through the store's identifier index; repeats (AND) test each candidate.
      if (query.identifier === undefined) query.identifier = tokens;
      else predicates.push((resource) => matchesIdentifier(resource, tokens));
      applied.push([rawName, value]);
    } else if (NO_OP_PARAMS.has(name)) {
      continue;
    } else if (referenceParams.has(name)) {
      const targets = value.split(',').map((v) => parseReferenceValue(rawName, v));
      if (modifier === 'Patient' && targets.some((t) => t.typed !== undefined)) {
        throw invalid(rawName, `${rawName} takes Patient references only`);
      }
      if (targets.every((t) => t.patientId !== undefined)) {
        const next = new Set(targets.map((t) => t.patientId!));
        compartment =
          compartment === undefined ? next : new Set([...compartment].filter((id) => next.has(id)));
      }
      predicates.push(referencePredicate(name, targets));
      applied.push([rawName, value]);
    } else {
      unsupported(rawName, `Unknown search parameter ${rawName} for ${resourceType}`);
    }
  }

  if (ids !== undefined) query.ids = [...ids];
  if (range !== undefined) {
    const lastUpdated: InstantRange = {};
    if (range.ge !== undefined) lastUpdated.ge = range.ge;
    if (range.lt !== undefined) lastUpdated.lt = range.lt;
    query.lastUpdated = lastUpdated;
  }
  if (compartment !== undefined) {
    // An empty intersection matches nothing; keep the query well-formed and let `where` say no.
    query.compartment = compartment.size > 0 ? [...compartment] : ['-'];
  }
  if (predicates.length === 1) query.where = predicates[0];
  else if (predicates.length > 1) query.where = (resource) => predicates.every((p) => p(resource));
  return { query, ignored, applied };
}
