/*
 * The parsed form of a FHIR R4 search: what `parseSearchRequest` answers and what every store is
 * asked. Plain, structured-cloneable data only (no functions, no class instances, no `Infinity`):
 * it crosses to worker threads and the PostgreSQL adapter translates it to SQL.
 * @see https://hl7.org/fhir/R4/search.html
 */

/** The type of a search parameter (`SearchParameter.type`). @see https://hl7.org/fhir/R4/search.html#ptypes */
export type SearchParamType =
  'number' | 'date' | 'string' | 'token' | 'reference' | 'composite' | 'quantity' | 'uri' | 'special';

/**
 * A prefix of an ordered value (number, date, quantity); `eq` when the value has none.
 * @see https://hl7.org/fhir/R4/search.html#prefix
 */
export type SearchPrefix = 'eq' | 'ne' | 'gt' | 'lt' | 'ge' | 'le' | 'sa' | 'eb' | 'ap';

/**
 * A modifier this server applies (`name:exact=`). The reference `:[Type]` modifier is kept as the
 * filter's `targetType`, not here. A token's `in`, `not-in`, `below` and `above` are terminology
 * modifiers: parsed as given (see {@link ParameterFilter}), the FHIR layer resolves them into plain
 * token values (or `not`) before a store is asked, and a store refuses one left unresolved
 * (`unresolvedTerminology`). @see https://hl7.org/fhir/R4/search.html#modifiers
 */
export type SearchModifier =
  | 'missing'
  | 'exact'
  | 'contains'
  | 'not'
  | 'text'
  | 'of-type'
  | 'identifier'
  | 'below'
  | 'above'
  | 'in'
  | 'not-in';

/**
 * A string value: matched against the start of each string the parameter sees (default), anywhere
 * in it (`:contains`), both compared case- and accent-insensitively on `normalized`; or equal to
 * `value` exactly (`:exact`). @see https://hl7.org/fhir/R4/search.html#string
 */
export interface StringSearchValue {
  type: 'string';
  /** As given (unescaped). */
  value: string;
  /** Lowercased, accents removed (see `normalizeText`). */
  normalized: string;
}

/**
 * A token value: `code`, `system|code`, `|code` (no system), `system|` (any code).
 * With `:of-type` (identifiers only), `typeSystem|typeCode|value` in `typeSystem`, `typeCode`,
 * `code`. With `:text`, only `text` (normalized), matched like a string against the display text.
 * @see https://hl7.org/fhir/R4/search.html#token
 */
export interface TokenSearchValue {
  type: 'token';
  /** The system; `null`: the element must have none; absent: any system. */
  system?: string | null;
  /** The code (or identifier value); absent: any code. Case-sensitive. */
  code?: string;
  /** `:of-type`: the identifier type's coding system. */
  typeSystem?: string;
  /** `:of-type`: the identifier type's coding code. */
  typeCode?: string;
  /** `:text`: the normalized text. */
  text?: string;
}

/**
 * A date value: the prefix and the range of instants the value stands for, `[start, end)` in epoch
 * milliseconds (a partial date covers its whole year, month or day; `ap` widens it by 10% of the
 * distance to the time of parsing). A value without a time zone is read as UTC.
 * @see https://hl7.org/fhir/R4/search.html#date
 */
export interface DateSearchValue {
  type: 'date';
  prefix: SearchPrefix;
  start: number;
  end: number;
  /** As given, without the prefix. */
  value: string;
}

/**
 * A number value: the prefix, the number, and the range its significant digits imply,
 * `[low, high)` (`100` stands for `[99.5, 100.5)`), used by `eq`, `ne` and `ap`.
 * @see https://hl7.org/fhir/R4/search.html#number
 */
export interface NumberSearchValue {
  type: 'number';
  prefix: SearchPrefix;
  value: number;
  low: number;
  high: number;
}

/**
 * A quantity value `[prefix]number|system|code`: the number as for {@link NumberSearchValue}; a
 * `code` matches `Quantity.code`, or `Quantity.unit` too when no system is given. No unit
 * conversion. @see https://hl7.org/fhir/R4/search.html#quantity
 */
export interface QuantitySearchValue {
  type: 'quantity';
  prefix: SearchPrefix;
  value: number;
  low: number;
  high: number;
  system?: string;
  code?: string;
}

/**
 * A reference value: `Type/id` (a `/_history/` version is ignored), a bare `id` (any target type,
 * or the one of `:[Type]`), an absolute URL (its `Type/id` tail also matches a relative reference,
 * and the whole URL a canonical one, a `|version` included), or with `:identifier` a token on
 * `Reference.identifier`. @see https://hl7.org/fhir/R4/search.html#reference
 */
export interface ReferenceSearchValue {
  type: 'reference';
  /** The target type, when the value or the `:[Type]` modifier names one. */
  resourceType?: string;
  /** The target id. */
  id?: string;
  /** An absolute or canonical URL, as given (a `|version` split off). */
  url?: string;
  /** The `|version` of a canonical URL. */
  version?: string;
  /** `:identifier`: the token on `Reference.identifier`. */
  identifier?: { system?: string | null; value?: string };
}

/**
 * A uri value: equal (default), or with `:below` a prefix of the element's uri, with `:above` the
 * element's uri a prefix of it. @see https://hl7.org/fhir/R4/search.html#uri
 */
export interface UriSearchValue {
  type: 'uri';
  value: string;
}

/**
 * A composite value: one value per component, in the definition's order, all to be matched by the
 * same element. @see https://hl7.org/fhir/R4/search.html#composite
 */
export interface CompositeSearchValue {
  type: 'composite';
  components: ComponentSearchValue[];
}

/** A value of one component of a composite. */
export type ComponentSearchValue =
  | TokenSearchValue
  | DateSearchValue
  | NumberSearchValue
  | QuantitySearchValue
  | StringSearchValue
  | ReferenceSearchValue
  | UriSearchValue;

/** One parsed value of a search parameter. */
export type SearchValue = ComponentSearchValue | CompositeSearchValue;

/**
 * One occurrence of a search parameter: it matches when one of its `values` does (comma means OR).
 * With `modifier: 'missing'`, `values` is empty and `missing` says which side matches. A token
 * filter with `in` / `not-in` holds the value sets' canonical URLs as `uri` values (a `|version`
 * kept), one with `below` / `above` the `system|code` token values (system and code both given):
 * unresolved terminology filters, which no store answers (see {@link SearchModifier}).
 */
export interface ParameterFilter {
  kind: 'parameter';
  /** The parameter code (`name`, `_lastUpdated`, `code-value-quantity`). */
  code: string;
  type: SearchParamType;
  modifier?: SearchModifier;
  /** `:missing=true` (no value) or `:missing=false` (some value). */
  missing?: boolean;
  /** A reference parameter's `:[Type]` modifier. */
  targetType?: string;
  values: SearchValue[];
}

/**
 * A chained parameter (`subject:Patient.name=Smith`): the resource's `code` references a resource of
 * one of `targetTypes` that matches `filter`. @see https://hl7.org/fhir/R4/search.html#chaining
 */
export interface ChainFilter {
  kind: 'chain';
  /** The reference parameter of this resource. */
  code: string;
  /** The types tried: the `:[Type]` given, or the parameter's targets that define the next parameter. */
  targetTypes: string[];
  /** The test on the referenced resource. */
  filter: ParameterFilter | ChainFilter;
}

/**
 * A reverse chain (`_has:Observation:patient:code=1234`): some `resourceType` resource whose
 * reference parameter `referenceParam` points at this resource matches `filter`.
 * @see https://hl7.org/fhir/R4/search.html#has
 */
export interface HasFilter {
  kind: 'has';
  resourceType: string;
  referenceParam: string;
  filter: ParameterFilter | ChainFilter | HasFilter;
}

/** One test of a search; the filters of a request are ANDed (a repeated parameter means AND). */
export type SearchFilter = ParameterFilter | ChainFilter | HasFilter;

/** One `_sort` key. @see https://hl7.org/fhir/R4/search.html#sort */
export interface SortKey {
  code: string;
  type: SearchParamType;
  descending: boolean;
}

/**
 * One `_include` / `_revinclude` value `Type:param[:targetType]` (`_include=*` is the searched
 * type's `Type:*`). @see https://hl7.org/fhir/R4/search.html#include
 */
export interface IncludeTarget {
  resourceType: string;
  /** The reference parameter of `resourceType`; `*`: every one. */
  searchParam: string;
  targetType?: string;
  /** `:iterate`: applied to included resources too. */
  iterate: boolean;
}

/** `_summary`. @see https://hl7.org/fhir/R4/search.html#summary */
export type SearchSummary = 'true' | 'text' | 'data' | 'count' | 'false';

/**
 * Only resources in the patient compartment of one of `ids` (a Patient is in its own): what a
 * store answers from the compartment index it keeps on write (see `PatientCompartment`). A SMART
 * user's reach, a Patient or Group export's patients, `$everything`, and the Patient references of
 * a search's compartment parameters are all expressed so. An empty `ids` matches nothing.
 * @see https://hl7.org/fhir/R4/compartmentdefinition-patient.html
 */
export interface CompartmentFilter {
  compartment: 'Patient';
  /** Patient ids (not references). */
  ids: string[];
}

/** A parsed type-level search: the filters, ANDed, and the result parameters. */
export interface SearchRequest {
  resourceType: string;
  filters: SearchFilter[];
  /** ANDed with `filters`: only resources in one of these patients' compartments. */
  compartment?: CompartmentFilter;
  /**
   * What the resources the search's chains and `_has` read must lie within, by their type (a SMART
   * user's reach, see `scopedStorage`): a referenced or referencing resource of a listed type
   * counts only when it is in one of the compartments given (in none when `ids` is empty); a type
   * not listed is not bounded. It holds at every depth. The searched type's own resources are
   * bounded by `compartment`, not by this.
   */
  reach?: Record<string, CompartmentFilter>;
  /** `_sort` keys in order; empty: the store's default order. */
  sort: SortKey[];
  include: IncludeTarget[];
  revinclude: IncludeTarget[];
  /** Page size (`_count`, capped; 0 with `_summary=count`). */
  count: number;
  /** Matches to skip (`_offset`). */
  offset: number;
  summary?: SearchSummary;
  /** `_elements`: the top-level element names asked for. */
  elements?: string[];
  total?: 'none' | 'estimate' | 'accurate';
}

/**
 * A search of `resourceType` by one filter (a chain's or `_has`'s inner one): what a chain's
 * resolver asks a store for, as `ResourceQuery.search`, so that a store with search indexes
 * narrows by it.
 */
export function filterSearch(resourceType: string, filter: SearchFilter): SearchRequest {
  return typeSearch(resourceType, [filter]);
}

/** The compartment `search`'s `reach` bounds the resources of `resourceType` to, if any. */
export function reachOf(
  search: Pick<SearchRequest, 'reach'> | undefined,
  resourceType: string,
): CompartmentFilter | undefined {
  const reach = search?.reach;
  return reach && Object.hasOwn(reach, resourceType) ? reach[resourceType] : undefined;
}

/**
 * The search a store runs to resolve a chain or `_has` of `outer` through `resourceType`: by
 * `filter` (none: every resource of the type), within `outer`'s reach (its compartment for the
 * type, and the reach itself for deeper levels).
 */
export function reachedSearch(
  outer: Pick<SearchRequest, 'reach'> | undefined,
  resourceType: string,
  filter?: SearchFilter,
): SearchRequest {
  const search = filter ? filterSearch(resourceType, filter) : typeSearch(resourceType);
  const bound = reachOf(outer, resourceType);
  if (bound) search.compartment = bound;
  if (outer?.reach) search.reach = outer.reach;
  return search;
}

/**
 * True when `filter` is a token terminology filter not yet resolved into plain values: `:in`,
 * `:not-in`, or a token's `:below` / `:above` (a uri's are plain prefix tests).
 * @see https://hl7.org/fhir/R4/search.html#token
 */
export function unresolvedTerminology(filter: ParameterFilter): boolean {
  const { modifier } = filter;
  if (modifier === 'in' || modifier === 'not-in') return true;
  return filter.type === 'token' && (modifier === 'below' || modifier === 'above');
}

/** The first unresolved terminology filter of `filters`, in chains and `_has` at any depth too. */
export function findUnresolvedTerminology(filters: readonly SearchFilter[]): ParameterFilter | undefined {
  for (const filter of filters) {
    const found =
      filter.kind === 'parameter'
        ? unresolvedTerminology(filter)
          ? filter
          : undefined
        : findUnresolvedTerminology([filter.filter]);
    if (found) return found;
  }
  return undefined;
}

/** A search of `resourceType` by `filters` (ANDed; none: every resource of the type). */
export function typeSearch(resourceType: string, filters: SearchFilter[] = []): SearchRequest {
  return { resourceType, filters, sort: [], include: [], revinclude: [], count: 0, offset: 0 };
}

/**
 * A search of `resourceType` in the compartment of `patientIds` (and by `filters`, when given): what
 * an export, `$everything` or a `_revinclude` of Patients asks a store for.
 */
export function compartmentSearch(
  resourceType: string,
  patientIds: readonly string[],
  filters: SearchFilter[] = [],
): SearchRequest {
  return {
    ...typeSearch(resourceType, filters),
    compartment: { compartment: 'Patient', ids: [...patientIds] },
  };
}

/** The patients of `search`'s compartment filter when it searches `resourceType`, else undefined. */
export function compartmentOf(resourceType: string, search: SearchRequest | undefined): string[] | undefined {
  return search?.resourceType === resourceType ? search.compartment?.ids : undefined;
}

/** A search of resources whose id is one of `ids` (`_id`). */
export function idFilter(ids: readonly string[]): ParameterFilter {
  return {
    kind: 'parameter',
    code: '_id',
    type: 'token',
    values: ids.map((code) => ({ type: 'token', code })),
  };
}

/** One value of `_lastUpdated` with `prefix` at the millisecond `at` (epoch ms). */
function instantValue(prefix: 'ge' | 'lt', at: number): DateSearchValue {
  return { type: 'date', prefix, start: at, end: at + 1, value: new Date(at).toISOString() };
}

/**
 * The `_lastUpdated` filters of the range `[ge, lt)` of `meta.lastUpdated` (epoch ms; an absent end
 * is open): one filter per bound, as `_lastUpdated=ge…&_lastUpdated=lt…` would parse.
 */
export function lastUpdatedFilters(range: { ge?: number; lt?: number }): ParameterFilter[] {
  const bounds = [
    ...(range.ge === undefined ? [] : [instantValue('ge', range.ge)]),
    ...(range.lt === undefined ? [] : [instantValue('lt', range.lt)]),
  ];
  return bounds.map((value) => ({ kind: 'parameter', code: '_lastUpdated', type: 'date', values: [value] }));
}

/**
 * A search of resources with an identifier matching one of `tokens` (`identifier`): `system` null
 * for an identifier without one, an absent part for any.
 */
export function identifierFilter(
  tokens: readonly { system?: string | null; value?: string }[],
): ParameterFilter {
  const values = tokens.map((token): TokenSearchValue => ({
    type: 'token',
    ...(token.system === undefined ? {} : { system: token.system }),
    ...(token.value === undefined ? {} : { code: token.value }),
  }));
  return { kind: 'parameter', code: 'identifier', type: 'token', values };
}
