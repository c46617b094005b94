import { checkSearchCost, type SearchCostLimits } from './cost-limits.js';
import { isResourceType, isValidId } from '../common/resource-types.js';
import type { SearchParameterDefinition, SearchRegistry } from './definitions.js';
import { invalidValue, parseSimpleValue, parseTokenValue } from './parse-value.js';
import { SearchParameterError, type SearchIssueCode } from './search-error.js';
import type {
  ChainFilter,
  ComponentSearchValue,
  HasFilter,
  IncludeTarget,
  ParameterFilter,
  SearchFilter,
  SearchModifier,
  SearchRequest,
  SearchSummary,
  SearchValue,
  SortKey,
  TokenSearchValue,
  UriSearchValue,
} from '../storage/search-request.js';
import { splitUnescaped, unescapeValue } from './value-escaping.js';

/** Options of {@link parseSearchRequest}. */
export interface ParseSearchRequestOptions {
  /**
   * `Prefer: handling=lenient`: an unknown or unsupported parameter (or modifier) is ignored and
   * listed in `ignored` instead of answering 400. A malformed value of a supported parameter is a
   * 400 either way. @default false
   */
  lenient?: boolean;
  /** Page size when `_count` is absent. @default 20 */
  defaultCount?: number;
  /** Largest page size; a larger `_count` is lowered to it. @default 1000 */
  maxCount?: number;
  /** The time the `ap` date prefix is measured from, epoch ms. @default Date.now() */
  now?: number;
  /** Bounds on what the search may ask (400 `too-costly` beyond). @default SEARCH_COST_DEFAULTS */
  limits?: SearchCostLimits;
}

/**
 * A parameter a search did not apply, and why: `not-supported` (unknown, or a parameter or
 * modifier this server does not answer; lenient handling only) or `no-value` (given empty,
 * `name=`, which says nothing).
 */
export interface IgnoredParameter {
  /** As named in the request (`name:below`). */
  name: string;
  reason: 'not-supported' | 'no-value';
}

/** What {@link parseSearchRequest} answers. */
export interface ParsedSearchRequest {
  request: SearchRequest;
  /** Parameters ignored (lenient handling, or an empty value), in request order. */
  ignored: IgnoredParameter[];
  /**
   * The parameters applied, as given, without paging (`_count`, `_offset`) and no-ops (`_format`,
   * `_pretty`): what a `self` / `next` link repeats.
   */
  applied: [string, string][];
}

/**
 * A parameter this server does not know or does not support: 400 under strict handling, ignored
 * under lenient handling.
 */
class Unsupported extends Error {
  constructor(
    readonly issueCode: SearchIssueCode,
    message: string,
  ) {
    super(message);
  }
}

/** Result parameters with no effect on the answer's content (accepted, not repeated in links). */
const NO_OPS = new Set(['_format', '_pretty']);
/** Known R4 parameters this server does not answer. */
const UNSUPPORTED_SPECIAL = new Set([
  '_text',
  '_content',
  '_query',
  '_list',
  '_filter',
  '_contained',
  '_containedType',
  '_type',
  '_score',
]);
/** How many reference hops a chain may take (`subject:Patient.organization.name` is two). */
const MAX_CHAIN = 2;

const MODIFIERS_BY_TYPE: Readonly<Record<string, ReadonlySet<string>>> = {
  string: new Set(['exact', 'contains', 'missing']),
  token: new Set(['not', 'text', 'of-type', 'missing', 'in', 'not-in', 'below', 'above']),
  date: new Set(['missing']),
  number: new Set(['missing']),
  quantity: new Set(['missing']),
  reference: new Set(['identifier', 'missing']),
  uri: new Set(['below', 'above', 'missing']),
  composite: new Set(['missing']),
};

interface Context {
  registry: SearchRegistry;
  now: number;
}

/** Splits `name:modifier` (the modifier may be absent). */
function splitModifier(key: string): { code: string; modifier?: string } {
  const colon = key.indexOf(':');
  return colon === -1 ? { code: key } : { code: key.slice(0, colon), modifier: key.slice(colon + 1) };
}

/**
 * True when {@link parseSearchRequest} answers `def` as a search parameter (the CapabilityStatement
 * lists these): not a `special` one (`near`, `_text`, …) nor one of the unsupported common
 * parameters, with a FHIRPath to evaluate, and, for a composite, components of simple types.
 */
export function isSupportedParameter(def: SearchParameterDefinition): boolean {
  if (UNSUPPORTED_SPECIAL.has(def.code) || def.type === 'special' || def.branches.length === 0) return false;
  return (
    def.type !== 'composite' ||
    (def.components.length > 0 && def.components.every((c) => c.type !== 'composite' && c.type !== 'special'))
  );
}

function definition(ctx: Context, resourceType: string, code: string): SearchParameterDefinition {
  if (UNSUPPORTED_SPECIAL.has(code)) throw new Unsupported('not-supported', `${code} is not supported`);
  const def = ctx.registry.get(resourceType, code);
  if (!def) throw new Unsupported('invalid', `Unknown search parameter ${code} for ${resourceType}`);
  if (!isSupportedParameter(def)) throw new Unsupported('not-supported', `${code} is not supported`);
  return def;
}

/** The filter of one parameter (no chain) of `resourceType`. */
function parameterFilter(
  ctx: Context,
  resourceType: string,
  key: string,
  rawName: string,
  value: string,
): ParameterFilter {
  const { code, modifier: rawModifier } = splitModifier(key);
  const def = definition(ctx, resourceType, code);
  let modifier: SearchModifier | undefined;
  let targetType: string | undefined;
  if (rawModifier !== undefined) {
    if (def.type === 'reference' && isResourceType(rawModifier)) {
      if (def.targets.length > 0 && !def.targets.includes(rawModifier)) {
        throw invalidValue(rawName, `${rawModifier} is not a target type of ${code}`);
      }
      targetType = rawModifier;
    } else if (MODIFIERS_BY_TYPE[def.type]?.has(rawModifier)) {
      modifier = rawModifier as SearchModifier;
      if (modifier === 'of-type' && !def.branches.some((b) => b.valueTypes.includes('Identifier'))) {
        throw new Unsupported('not-supported', `:of-type applies to identifiers only`);
      }
    } else {
      throw new Unsupported('not-supported', `Unsupported search modifier :${rawModifier} on ${code}`);
    }
  }
  if (modifier === 'missing') {
    if (value !== 'true' && value !== 'false')
      throw invalidValue(rawName, `${rawName} must be true or false`);
    return { kind: 'parameter', code, type: def.type, modifier, missing: value === 'true', values: [] };
  }
  const values: SearchValue[] = splitUnescaped(value, ',').map((raw) => {
    if (def.type === 'token' && (modifier === 'in' || modifier === 'not-in'))
      return valueSetValue(rawName, raw);
    if (def.type === 'token' && (modifier === 'below' || modifier === 'above'))
      return codeValue(rawName, raw);
    if (def.type === 'composite') return compositeValue(ctx, def, rawName, raw);
    if (code === '_id' && !isValidId(raw))
      throw invalidValue(rawName, '_id must be a comma-separated list of ids');
    return parseSimpleValue(rawName, def.type as Exclude<typeof def.type, 'composite' | 'special'>, raw, {
      ...(modifier === undefined ? {} : { modifier }),
      ...(targetType === undefined ? {} : { targetType }),
      targets: def.targets,
      now: ctx.now,
    });
  });
  return {
    kind: 'parameter',
    code,
    type: def.type,
    ...(modifier === undefined ? {} : { modifier }),
    ...(targetType === undefined ? {} : { targetType }),
    values,
  };
}

/**
 * A value set of `:in` / `:not-in`: its canonical URL (a `|version` allowed), kept as a `uri` value
 * for the FHIR layer to expand. @see https://hl7.org/fhir/R4/search.html#token
 */
function valueSetValue(rawName: string, raw: string): UriSearchValue {
  const url = unescapeValue(raw);
  if (!/^[a-z][a-z0-9+.-]*:\S+$/i.test(url)) {
    throw invalidValue(rawName, `${rawName} must be a value set's canonical URL (url or url|version)`);
  }
  return { type: 'uri', value: url };
}

/**
 * A code of `:below` / `:above`: `system|code`, both required (the hierarchy is the code system's).
 * @see https://hl7.org/fhir/R4/search.html#token
 */
function codeValue(rawName: string, raw: string): TokenSearchValue {
  const token = parseTokenValue(rawName, raw);
  if (typeof token.system !== 'string' || token.code === undefined) {
    throw invalidValue(rawName, `${rawName} must be system|code (the code system is required)`);
  }
  return { type: 'token', system: token.system, code: token.code };
}

function compositeValue(
  ctx: Context,
  def: SearchParameterDefinition,
  rawName: string,
  raw: string,
): SearchValue {
  const parts = splitUnescaped(raw, '$');
  if (parts.length !== def.components.length) {
    throw invalidValue(rawName, `${rawName} takes ${def.components.length} values joined by $`);
  }
  const components = def.components.map((component, i): ComponentSearchValue => {
    if (component.type === 'composite' || component.type === 'special') {
      throw new Unsupported('not-supported', `${def.code} is not supported`);
    }
    return parseSimpleValue(rawName, component.type, parts[i]!, { targets: [], now: ctx.now });
  });
  return { type: 'composite', components };
}

/**
 * A chained key (`subject:Patient.name`, `subject.organization.name:exact`) of `resourceType`.
 * @see https://hl7.org/fhir/R4/search.html#chaining
 */
function chainFilter(
  ctx: Context,
  resourceType: string,
  links: string[],
  rawName: string,
  value: string,
): ChainFilter {
  if (links.length - 1 > MAX_CHAIN) {
    throw new Unsupported('not-supported', `Chains of more than ${MAX_CHAIN} references are not supported`);
  }
  const { code, modifier } = splitModifier(links[0]!);
  const def = definition(ctx, resourceType, code);
  if (def.type !== 'reference') throw invalidValue(rawName, `${code} is not a reference parameter`);
  let candidates: readonly string[];
  if (modifier !== undefined) {
    if (!isResourceType(modifier) || (def.targets.length > 0 && !def.targets.includes(modifier))) {
      throw invalidValue(rawName, `${modifier} is not a target type of ${code}`);
    }
    candidates = [modifier];
  } else candidates = def.targets;
  const next = links.slice(1);
  const nextCode = splitModifier(next[0]!).code;
  const targetTypes = candidates.filter((t) => ctx.registry.get(t, nextCode) !== undefined);
  if (targetTypes.length === 0) {
    throw new Unsupported('invalid', `Unknown search parameter ${nextCode} for the targets of ${code}`);
  }
  const filters = targetTypes.map((t) =>
    next.length > 1
      ? chainFilter(ctx, t, next, rawName, value)
      : parameterFilter(ctx, t, next[0]!, rawName, value),
  );
  const first = JSON.stringify(filters[0]);
  if (filters.some((f) => JSON.stringify(f) !== first)) {
    throw invalidValue(
      rawName,
      `${code} targets read ${nextCode} differently: name the type (${code}:Type.${nextCode})`,
    );
  }
  return { kind: 'chain', code, targetTypes, filter: filters[0]! };
}

/**
 * A reverse chain `_has:Type:reference:rest` of `resourceType` (`rest` a parameter, a chain or
 * another `_has`). @see https://hl7.org/fhir/R4/search.html#has
 */
function hasFilter(
  ctx: Context,
  resourceType: string,
  key: string,
  rawName: string,
  value: string,
): HasFilter {
  const parts = key.split(':');
  const [, type, referenceParam] = parts;
  const rest = parts.slice(3).join(':');
  if (!type || !referenceParam || !rest) {
    throw invalidValue(rawName, '_has must be _has:Type:reference:parameter');
  }
  if (!isResourceType(type)) throw invalidValue(rawName, `${type} is not a resource type`);
  const ref = definition(ctx, type, referenceParam);
  if (ref.type !== 'reference' || (ref.targets.length > 0 && !ref.targets.includes(resourceType))) {
    throw invalidValue(rawName, `${type}.${referenceParam} does not reference ${resourceType}`);
  }
  return {
    kind: 'has',
    resourceType: type,
    referenceParam,
    filter: anyFilter(ctx, type, rest, rawName, value),
  };
}

/** The filter of any search key of `resourceType`: a parameter, a chain or a `_has`. */
function anyFilter(
  ctx: Context,
  resourceType: string,
  key: string,
  rawName: string,
  value: string,
): SearchFilter {
  if (key.startsWith('_has:')) return hasFilter(ctx, resourceType, key, rawName, value);
  const links = key.split('.');
  if (links.length > 1) return chainFilter(ctx, resourceType, links, rawName, value);
  return parameterFilter(ctx, resourceType, key, rawName, value);
}

function nonNegativeInteger(param: string, value: string): number {
  if (!/^\d{1,9}$/.test(value)) throw invalidValue(param, `${param} must be a non-negative integer`);
  return Number(value);
}

function includeTarget(
  ctx: Context,
  resourceType: string,
  rawName: string,
  value: string,
  iterate: boolean,
): IncludeTarget {
  const reverse = rawName.startsWith('_revinclude');
  if (value === '*') {
    // `_include=*`: every reference parameter of the searched type. A reverse one would read every
    // type that may reference it: not supported.
    if (reverse) throw new Unsupported('not-supported', `${rawName}=* is not supported`);
    return { resourceType, searchParam: '*', iterate };
  }
  const [type, param, targetType, extra] = value.split(':');
  if (!type || !param || extra !== undefined || !isResourceType(type)) {
    throw invalidValue(rawName, `${rawName} must be Type:parameter[:targetType]`);
  }
  let targets: readonly string[] = [];
  if (param !== '*') {
    const def = ctx.registry.get(type, param);
    if (!def || def.type !== 'reference')
      throw invalidValue(rawName, `${type}.${param} is not a reference parameter`);
    targets = def.targets;
    if (reverse && !iterate && targets.length > 0 && !targets.includes(resourceType)) {
      throw invalidValue(rawName, `${type}.${param} does not reference ${resourceType}`);
    }
  }
  if (
    targetType !== undefined &&
    (!isResourceType(targetType) || (targets.length > 0 && !targets.includes(targetType)))
  ) {
    throw invalidValue(rawName, `${targetType} is not a target type of ${type}.${param}`);
  }
  return {
    resourceType: type,
    searchParam: param,
    ...(targetType === undefined ? {} : { targetType }),
    iterate,
  };
}

/**
 * Parses the parameters of a type-level search (`GET [base]/[type]?…`, `POST _search`, one
 * `_typeFilter` query) into a {@link SearchRequest}, from the R4 SearchParameter definitions: every
 * parameter of the type with its modifiers and prefixes, chains (two references deep), `_has`,
 * and the result parameters `_sort`, `_count`, `_offset`, `_summary`, `_elements`, `_total`,
 * `_include` and `_revinclude` (`:iterate`). Comma means OR, a repeated parameter AND.
 *
 * A token's terminology modifiers are parsed as given: `:in` / `:not-in` with value set URLs,
 * `:below` / `:above` with `system|code` values (see `ParameterFilter`); the caller resolves them
 * against its terminology before a store is asked (stores refuse them unresolved).
 *
 * An unknown parameter, an unsupported one (`_text`, `_filter`, …) or an unsupported modifier
 * (`:of-type` on a code, …) is a `SearchParameterError` naming it in `parameter`; under `lenient`
 * it is listed in `ignored` instead. A parameter without a value is listed there too, whatever the
 * handling. A malformed value is always a 400.
 * @see https://hl7.org/fhir/R4/search.html
 */
export function parseSearchRequest(
  registry: SearchRegistry,
  resourceType: string,
  params: Iterable<readonly [string, string]>,
  options: ParseSearchRequestOptions = {},
): ParsedSearchRequest {
  const lenient = options.lenient ?? false;
  const maxCount = options.maxCount ?? 1000;
  const ctx: Context = { registry, now: options.now ?? Date.now() };
  const request: SearchRequest = {
    resourceType,
    filters: [],
    sort: [],
    include: [],
    revinclude: [],
    count: Math.min(options.defaultCount ?? 20, maxCount),
    offset: 0,
  };
  const ignored: IgnoredParameter[] = [];
  const applied: [string, string][] = [];

  for (const [rawName, value] of params) {
    const { code, modifier } = splitModifier(rawName);
    try {
      if (NO_OPS.has(code)) continue;
      if (code === '_count') {
        request.count = Math.min(nonNegativeInteger('_count', value), maxCount);
        continue;
      }
      if (code === '_offset') {
        request.offset = nonNegativeInteger('_offset', value);
        continue;
      }
      if (value === '') {
        // A parameter without a value says nothing: ignored, and said so (R4 gives it no meaning).
        ignored.push({ name: rawName, reason: 'no-value' });
        continue;
      }
      if (modifier !== undefined && ['_sort', '_summary', '_elements', '_total'].includes(code)) {
        throw new Unsupported('not-supported', `Unsupported modifier on ${code}`);
      }
      switch (code) {
        case '_sort':
          request.sort = value.split(',').map((key): SortKey => {
            const descending = key.startsWith('-');
            const sortCode = descending ? key.slice(1) : key;
            const def = registry.get(resourceType, sortCode);
            if (!def || def.type === 'composite' || def.type === 'special' || def.branches.length === 0) {
              throw invalidValue('_sort', `Cannot sort ${resourceType} by ${sortCode}`);
            }
            return { code: sortCode, type: def.type, descending };
          });
          break;
        case '_summary':
          if (!['true', 'text', 'data', 'count', 'false'].includes(value)) {
            throw invalidValue('_summary', '_summary must be true, text, data, count or false');
          }
          request.summary = value as SearchSummary;
          if (value === 'count') request.count = 0;
          break;
        case '_elements': {
          const names = value
            .split(',')
            .map((n) => (n.startsWith(`${resourceType}.`) ? n.slice(resourceType.length + 1) : n));
          if (names.some((n) => !/^[a-z][A-Za-z0-9]{0,63}$/.test(n))) {
            throw invalidValue('_elements', '_elements must be a comma-separated list of element names');
          }
          request.elements = [...new Set([...(request.elements ?? []), ...names])];
          break;
        }
        case '_total':
          if (value !== 'none' && value !== 'estimate' && value !== 'accurate') {
            throw invalidValue('_total', '_total must be none, estimate or accurate');
          }
          request.total = value;
          break;
        case '_include':
        case '_revinclude': {
          if (modifier !== undefined && modifier !== 'iterate') {
            throw new Unsupported('not-supported', `Unsupported modifier on ${code}`);
          }
          const target = includeTarget(ctx, resourceType, rawName, value, modifier === 'iterate');
          if (code === '_include') {
            if (!target.iterate && target.resourceType !== resourceType) {
              throw invalidValue(
                rawName,
                `${rawName} must name a parameter of ${resourceType} (or use :iterate)`,
              );
            }
            request.include.push(target);
          } else request.revinclude.push(target);
          break;
        }
        default:
          request.filters.push(anyFilter(ctx, resourceType, rawName, rawName, value));
      }
      applied.push([rawName, value]);
    } catch (error) {
      if (!(error instanceof Unsupported)) throw error;
      if (!lenient) throw new SearchParameterError(error.issueCode, error.message, rawName);
      ignored.push({ name: rawName, reason: 'not-supported' });
    }
  }
  if (request.elements && ['true', 'text', 'data'].includes(request.summary ?? '')) {
    throw invalidValue('_elements', '_elements does not combine with _summary=true, text or data');
  }
  checkSearchCost(request, options.limits);
  return { request, ignored, applied };
}
