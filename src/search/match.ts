import { SearchParameterError } from './search-error.js';
import type { FhirResource } from '../storage/types.js';
import type { FilterResolver, FilterTest } from '../storage/search-index.js';
import type { SearchRegistry } from './definitions.js';
import { extractComposite, extractValues } from './extract.js';
import type {
  DateIndexValue,
  IndexValue,
  QuantityIndexValue,
  ReferenceIndexValue,
  StringIndexValue,
  TokenIndexValue,
} from '../storage/index-values.js';
import type {
  ComponentSearchValue,
  DateSearchValue,
  ParameterFilter,
  QuantitySearchValue,
  ReferenceSearchValue,
  SearchFilter,
  SearchModifier,
  SearchPrefix,
  StringSearchValue,
  TokenSearchValue,
} from '../storage/search-request.js';
import { unresolvedTerminology } from '../storage/search-request.js';

/**
 * How a chain or a reverse chain reads other resources (see `FilterResolver`): a store's matcher
 * reads them through the store itself, within the search's reach.
 */
export type SearchResolver = FilterResolver;

/** A compiled test of a search's filters on one resource. */
export type SearchPredicate = FilterTest;

/**
 * Date prefixes over ranges: the search value stands for `[ps, pe)`, the element for `[rs, re)`
 * (an open end is infinite). R4: `eq` the search range contains the element's; `ne` it does not;
 * `gt` / `lt` the element's range reaches beyond / before the search range; `ge` / `le` the same or
 * `eq`; `sa` / `eb` the element starts after / ends before it; `ap` the ranges overlap (the search
 * range widened at parse time).
 * @see https://hl7.org/fhir/R4/search.html#prefix
 */
function matchDate(search: DateSearchValue, target: DateIndexValue): boolean {
  const rs = target.start ?? -Infinity;
  const re = target.end ?? Infinity;
  const { start: ps, end: pe } = search;
  const contained = rs >= ps && re <= pe;
  switch (search.prefix) {
    case 'eq':
      return contained;
    case 'ne':
      return !contained;
    case 'gt':
      return re > pe;
    case 'lt':
      return rs < ps;
    case 'ge':
      return re > pe || contained;
    case 'le':
      return rs < ps || contained;
    case 'sa':
      return rs >= pe;
    case 'eb':
      return re <= ps;
    case 'ap':
      return rs < pe && re > ps;
  }
}

/**
 * Number prefixes: a point element `t` against the search value `v` and its implicit precision
 * range `[low, high)` (`eq`, `ne`); `ap` within 10% of `v`. A Range element `[tl, th]` (either end
 * open): `eq` within the precision range, the ordered prefixes on the end that reaches furthest.
 * @see https://hl7.org/fhir/R4/search.html#number
 */
function matchNumber(
  search: { prefix: SearchPrefix; value: number; low: number; high: number },
  target: { value?: number; low?: number; high?: number },
): boolean {
  const { prefix, value: v, low, high } = search;
  const tl = target.value ?? target.low ?? -Infinity;
  const th = target.value ?? target.high ?? Infinity;
  if (target.value === undefined && target.low === undefined && target.high === undefined) return false;
  const margin = Math.abs(v) * 0.1;
  switch (prefix) {
    case 'eq':
      return tl >= low && th < high;
    case 'ne':
      return !(tl >= low && th < high);
    case 'gt':
      return th > v;
    case 'lt':
      return tl < v;
    case 'sa':
      return tl > v;
    case 'eb':
      return th < v;
    case 'ge':
      return th >= v;
    case 'le':
      return tl <= v;
    case 'ap':
      return tl <= v + margin && th >= v - margin;
  }
}

function matchQuantity(search: QuantitySearchValue, target: QuantityIndexValue): boolean {
  if (search.system !== undefined) {
    if (target.system !== search.system) return false;
    if (search.code !== undefined && target.code !== search.code) return false;
  } else if (search.code !== undefined && target.code !== search.code && target.unit !== search.code) {
    return false;
  }
  return matchNumber(search, target);
}

function matchString(
  search: StringSearchValue,
  target: StringIndexValue,
  modifier?: SearchModifier,
): boolean {
  if (modifier === 'exact') return target.exact === search.value;
  if (modifier === 'contains') return target.normalized.includes(search.normalized);
  return target.normalized.startsWith(search.normalized);
}

function matchToken(search: TokenSearchValue, target: TokenIndexValue): boolean {
  if (search.text !== undefined) return target.text !== undefined && target.text.startsWith(search.text);
  if (search.typeSystem !== undefined) {
    return (
      target.code === search.code &&
      (target.types ?? []).some((t) => t.system === search.typeSystem && t.code === search.typeCode)
    );
  }
  if (search.code !== undefined && target.code !== search.code) return false;
  if (search.system === null) return target.system === undefined && target.code !== undefined;
  if (search.system !== undefined) return target.system === search.system;
  return true;
}

function matchReference(
  search: ReferenceSearchValue,
  target: ReferenceIndexValue,
  targetType?: string,
): boolean {
  if (search.identifier !== undefined) {
    const id = target.identifier;
    if (!id) return false;
    const { system, value } = search.identifier;
    if (value !== undefined && id.value !== value) return false;
    if (system === null) return id.system === undefined;
    return system === undefined || id.system === system;
  }
  if (targetType !== undefined && target.resourceType !== targetType) return false;
  if (search.url !== undefined && target.url === search.url) {
    return search.version === undefined || target.version === search.version;
  }
  if (search.id === undefined || target.id !== search.id) return false;
  return search.resourceType === undefined || target.resourceType === search.resourceType;
}

function matchUri(search: string, target: string, modifier?: SearchModifier): boolean {
  if (modifier === 'below') return target.startsWith(search);
  if (modifier === 'above') return search.startsWith(target);
  return target === search;
}

/** One search value against one element value (the same parameter type on both sides). */
function matchValue(
  search: ComponentSearchValue,
  target: IndexValue,
  filter: Pick<ParameterFilter, 'modifier' | 'targetType'>,
): boolean {
  switch (search.type) {
    case 'string':
      return target.type === 'string' && matchString(search, target, filter.modifier);
    case 'token':
      return target.type === 'token' && matchToken(search, target);
    case 'date':
      return target.type === 'date' && matchDate(search, target);
    case 'number':
      return (target.type === 'number' || target.type === 'quantity') && matchNumber(search, target);
    case 'quantity':
      return target.type === 'quantity' && matchQuantity(search, target);
    case 'reference':
      return target.type === 'reference' && matchReference(search, target, filter.targetType);
    case 'uri':
      return (
        (target.type === 'uri' && matchUri(search.value, target.value, filter.modifier)) ||
        (target.type === 'reference' &&
          target.url !== undefined &&
          matchUri(search.value, target.url, filter.modifier))
      );
  }
}

/**
 * True when `resource` matches one parameter filter (no chain): some value of the filter (OR)
 * matches some value the parameter sees in the resource; `:missing` by the presence of values;
 * `:not` when no value matches (a resource without the element included); `ne` per element.
 * Throws on a parameter `resource`'s type does not define (a parsed request never holds one).
 * @see https://hl7.org/fhir/R4/search.html
 */
export function matchesParameter(
  registry: SearchRegistry,
  resource: FhirResource,
  filter: ParameterFilter,
): boolean {
  const definition = registry.get(resource.resourceType, filter.code);
  if (!definition) throw new Error(`${resource.resourceType} has no search parameter ${filter.code}`);
  if (unresolvedTerminology(filter)) {
    // Read as a plain token test it would answer wrongly: the FHIR layer resolves it first.
    throw new SearchParameterError(
      'not-supported',
      `${filter.code}:${String(filter.modifier)} must be resolved against the terminology first`,
    );
  }
  if (definition.type === 'composite') {
    const elements = extractComposite(registry, definition, resource);
    // A composite value is an element with a value for every component (docs/fhir.md, Search).
    if (filter.modifier === 'missing')
      return !elements.some((element) => element.components.every((c) => c.length > 0)) === filter.missing;
    return elements.some((element) =>
      filter.values.some(
        (value) =>
          value.type === 'composite' &&
          value.components.every((component, i) =>
            (element.components[i] ?? []).some((target) => matchValue(component, target, {})),
          ),
      ),
    );
  }
  const targets = extractValues(registry, definition, resource);
  if (filter.modifier === 'missing') return (targets.length === 0) === filter.missing;
  const pairs = tokenPairs(filter);
  const any = pairs
    ? targets.some((t) => t.type === 'token' && t.code !== undefined && pairs.has(pairKey(t.system, t.code)))
    : targets.some((target) =>
        filter.values.some((value) => value.type !== 'composite' && matchValue(value, target, filter)),
      );
  return filter.modifier === 'not' ? !any : any;
}

/** A list of plain tokens this long or longer (a resolved `:in`) is matched by set lookup. */
const PAIRS_MIN = 8;
const pairKeys = new WeakMap<ParameterFilter, ReadonlySet<string> | null>();

/** The key of a token's system (absent: `undefined`) and code in {@link tokenPairs}. */
const pairKey = (system: string | undefined, code: string): string =>
  system === undefined ? `\u0000${code}` : `${system.length}.${system}|${code}`;

/**
 * The keys of `filter`'s values when it is a long list of `system|code` and `|code` tokens (what
 * `:in` resolves to), computed once per filter: each matches a token with that code and system (no
 * system for `|code`), as `matchToken` does, in one lookup instead of one test per value.
 */
function tokenPairs(filter: ParameterFilter): ReadonlySet<string> | undefined {
  if (filter.type !== 'token' || filter.values.length < PAIRS_MIN) return undefined;
  let keys = pairKeys.get(filter);
  if (keys === undefined) {
    const out = new Set<string>();
    const plain = filter.values.every((v) => {
      if (v.type !== 'token' || v.text !== undefined || v.typeSystem !== undefined) return false;
      if (v.code === undefined || v.system === undefined) return false;
      out.add(pairKey(v.system ?? undefined, v.code));
      return true;
    });
    keys = plain ? out : null;
    pairKeys.set(filter, keys);
  }
  return keys ?? undefined;
}

/** The `Type/id` keys of references a parameter sees in `resource`. */
export function referenceKeys(registry: SearchRegistry, resource: FhirResource, code: string): string[] {
  const definition = registry.get(resource.resourceType, code);
  if (!definition) return [];
  const out: string[] = [];
  for (const v of extractValues(registry, definition, resource)) {
    if (v.type === 'reference' && v.resourceType !== undefined && v.id !== undefined)
      out.push(`${v.resourceType}/${v.id}`);
  }
  return out;
}

async function compileFilter(
  registry: SearchRegistry,
  filter: SearchFilter,
  resolver: SearchResolver | undefined,
): Promise<SearchPredicate> {
  if (filter.kind === 'parameter') return (resource) => matchesParameter(registry, resource, filter);
  if (!resolver) {
    throw new SearchParameterError(
      'not-supported',
      'Chained and reverse-chained (_has) search is not supported here',
    );
  }
  const inner = await compileFilter(registry, filter.filter, resolver);
  const keys = new Set<string>();
  if (filter.kind === 'chain') {
    // The referenced resources that match, then the resources referencing one of them.
    for (const type of filter.targetTypes) {
      for await (const target of resolver.resources(type, filter.filter)) {
        if (target.resourceType === type && inner(target)) keys.add(`${type}/${String(target.id)}`);
      }
    }
    return (resource) => referenceKeys(registry, resource, filter.code).some((key) => keys.has(key));
  }
  // `_has`: the referencing resources that match, then the resources they point at.
  for await (const source of resolver.resources(filter.resourceType, filter.filter)) {
    if (source.resourceType !== filter.resourceType || !inner(source)) continue;
    for (const key of referenceKeys(registry, source, filter.referenceParam)) keys.add(key);
  }
  return (resource) => keys.has(`${resource.resourceType}/${String(resource.id)}`);
}

/**
 * Compiles the filters of a search (ANDed) into a synchronous test of one resource: the in-memory
 * evaluation of the memory and file stores, and the reference for the PostgreSQL translation.
 * Chains and `_has` are answered through `resolver` up front (the matching referenced or
 * referencing resources, read once); without one they are a 400 `not-supported`.
 * @see https://hl7.org/fhir/R4/search.html
 */
export async function compileSearchPredicate(
  registry: SearchRegistry,
  filters: readonly SearchFilter[],
  resolver?: SearchResolver,
): Promise<SearchPredicate> {
  const tests = await Promise.all(filters.map((f) => compileFilter(registry, f, resolver)));
  if (tests.length === 0) return () => true;
  if (tests.length === 1) return tests[0]!;
  return (resource) => tests.every((test) => test(resource));
}

/**
 * True when `resource` matches every filter, none of them a chain or `_has` (synchronous; see
 * {@link compileSearchPredicate} for those).
 */
export function matchesFilters(
  registry: SearchRegistry,
  resource: FhirResource,
  filters: readonly SearchFilter[],
): boolean {
  return filters.every((filter) => {
    if (filter.kind !== 'parameter') {
      throw new SearchParameterError(
        'not-supported',
        'Chained and reverse-chained (_has) search need a resolver',
      );
    }
    return matchesParameter(registry, resource, filter);
  });
}
