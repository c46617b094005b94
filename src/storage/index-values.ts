/*
 * What a search parameter sees in a resource, normalized per parameter type: the entries a store
 * indexes at write time and what `match` compares search values with. Plain, structured-cloneable
 * data. @see https://hl7.org/fhir/R4/search.html#ptypes
 */

/** A string the parameter sees (a `HumanName` or `Address` gives one per part). */
export interface StringIndexValue {
  type: 'string';
  /** Lowercased, accents removed (`normalizeText`): what default and `:contains` searches compare. */
  normalized: string;
  /** As written: what `:exact` compares. */
  exact: string;
}

/**
 * A token: a `Coding` (system, code, display as `text`), an `Identifier` (system, value as `code`,
 * `type.text` as `text`, `type.coding` in `types`), a `ContactPoint` (its value as `code`; R4 uses
 * no system for it), a `code`, `boolean`, `id`, `uri` or `string` (as `code`), or a
 * `CodeableConcept.text` alone (only `text`).
 */
export interface TokenIndexValue {
  type: 'token';
  system?: string;
  code?: string;
  /** Normalized display text (what `:text` compares). */
  text?: string;
  /** An identifier's `type.coding` (what `:of-type` compares). */
  types?: { system?: string; code?: string }[];
}

/**
 * A date, dateTime, instant, Period or Timing as the range of instants it covers,
 * `[start, end)` in epoch ms (a partial date covers its whole year, month or day). An open
 * `Period` end leaves `start` or `end` out.
 */
export interface DateIndexValue {
  type: 'date';
  start?: number;
  end?: number;
}

/**
 * A number: a point `value`, or a `Range` as `low` / `high` (inclusive, either one open). The
 * stored precision of a value is not known (JSON numbers drop trailing zeros), so a value is
 * compared as a point; the search value carries the precision.
 */
export interface NumberIndexValue {
  type: 'number';
  value?: number;
  low?: number;
  high?: number;
}

/** A `Quantity` (`Age`, `Duration`, `Money`, …) or a `Range` of them, with its unit. */
export interface QuantityIndexValue {
  type: 'quantity';
  value?: number;
  low?: number;
  high?: number;
  system?: string;
  code?: string;
  unit?: string;
}

/**
 * A reference: its target `resourceType` and `id` (from a relative or absolute `Type/id`, or
 * `Reference.type`), its absolute or canonical `url` (a canonical's `|version` split off), its
 * `identifier`.
 */
export interface ReferenceIndexValue {
  type: 'reference';
  resourceType?: string;
  id?: string;
  url?: string;
  version?: string;
  identifier?: { system?: string; value?: string };
}

/** A uri (`uri`, `url`, `canonical`, `oid`, `uuid`). */
export interface UriIndexValue {
  type: 'uri';
  value: string;
}

/** One value a (non-composite) parameter sees. */
export type IndexValue =
  | StringIndexValue
  | TokenIndexValue
  | DateIndexValue
  | NumberIndexValue
  | QuantityIndexValue
  | ReferenceIndexValue
  | UriIndexValue;

/** One element a composite parameter sees: the values of each component, in order. */
export interface CompositeIndexValue {
  type: 'composite';
  components: IndexValue[][];
}
