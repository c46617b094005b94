import { parseDateRange } from '../common/date-range.js';
import { isResourceType, isValidId } from '../common/resource-types.js';
import { normalizeText } from './normalize-text.js';
import { SearchParameterError } from './search-error.js';
import { parseDecimalRange } from './number-precision.js';
import type {
  ComponentSearchValue,
  DateSearchValue,
  NumberSearchValue,
  QuantitySearchValue,
  ReferenceSearchValue,
  SearchModifier,
  SearchParamType,
  SearchPrefix,
  TokenSearchValue,
} from '../storage/search-request.js';
import { splitUnescaped, unescapeValue } from './value-escaping.js';

/** A 400 for a malformed value of `param` (never ignored, even under lenient handling). */
export function invalidValue(param: string, message: string): SearchParameterError {
  return new SearchParameterError('invalid', message, param);
}

const PREFIXES = new Set<string>(['eq', 'ne', 'gt', 'lt', 'ge', 'le', 'sa', 'eb', 'ap']);

/** Splits a leading prefix (`ge2020` → `ge`, `2020`); `eq` when there is none. */
function splitPrefix(raw: string): { prefix: SearchPrefix; rest: string } {
  const head = raw.slice(0, 2);
  if (PREFIXES.has(head) && !/^[a-z]/.test(raw.slice(2, 3))) {
    return { prefix: head as SearchPrefix, rest: raw.slice(2) };
  }
  return { prefix: 'eq', rest: raw };
}

/** What a value of a date parameter needs besides its text. */
export interface DateContext {
  /** The time `ap` is measured from, epoch ms. */
  now: number;
}

/**
 * A date value. `ap` widens the range by 10% of its distance to `now` on each side (at least a
 * day's worth, the R4 page leaves the amount to the server).
 * @see https://hl7.org/fhir/R4/search.html#prefix
 */
export function parseDateValue(param: string, raw: string, context: DateContext): DateSearchValue {
  const { prefix, rest } = splitPrefix(raw);
  const range = parseDateRange(rest);
  if (!range)
    throw invalidValue(param, `${param} must be a FHIR date, dateTime or instant, with an optional prefix`);
  let { start, end } = range;
  if (prefix === 'ap') {
    const distance = Math.max(Math.abs(context.now - start), Math.abs(context.now - end));
    const margin = Math.max(Math.round(distance * 0.1), 0);
    start -= margin;
    end += margin;
  }
  return { type: 'date', prefix, start, end, value: rest };
}

/** A number value with its implicit precision range. */
export function parseNumberValue(param: string, raw: string): NumberSearchValue {
  const { prefix, rest } = splitPrefix(raw);
  const decimal = parseDecimalRange(rest);
  if (!decimal) throw invalidValue(param, `${param} must be a number, with an optional prefix`);
  return { type: 'number', prefix, ...decimal };
}

/** A quantity value `[prefix]number[|system[|code]]`. */
export function parseQuantityValue(param: string, raw: string): QuantitySearchValue {
  const parts = splitUnescaped(raw, '|');
  if (parts.length > 3) throw invalidValue(param, `${param} must be number|system|code`);
  const { prefix, rest } = splitPrefix(parts[0]!);
  const decimal = parseDecimalRange(rest);
  if (!decimal) throw invalidValue(param, `${param} must start with a number, with an optional prefix`);
  const system = unescapeValue(parts[1] ?? '');
  const code = unescapeValue(parts[2] ?? '');
  return {
    type: 'quantity',
    prefix,
    ...decimal,
    ...(system === '' ? {} : { system }),
    ...(code === '' ? {} : { code }),
  };
}

/** A token value `code`, `system|code`, `|code`, `system|`; or `:of-type` / `:text` forms. */
export function parseTokenValue(param: string, raw: string, modifier?: SearchModifier): TokenSearchValue {
  if (modifier === 'text') return { type: 'token', text: normalizeText(unescapeValue(raw)) };
  const parts = splitUnescaped(raw, '|').map(unescapeValue);
  if (modifier === 'of-type') {
    if (parts.length !== 3 || parts.some((p) => p === '')) {
      throw invalidValue(param, `${param}:of-type must be typeSystem|typeCode|value`);
    }
    return { type: 'token', typeSystem: parts[0]!, typeCode: parts[1]!, code: parts[2]! };
  }
  if (parts.length > 2) throw invalidValue(param, `${param} must be code, system|code, |code or system|`);
  if (parts.length === 1) {
    if (parts[0] === '') throw invalidValue(param, `${param} needs a code`);
    return { type: 'token', code: parts[0]! };
  }
  const [system, code] = parts as [string, string];
  if (system === '' && code === '') throw invalidValue(param, `${param} needs a system, a code or both`);
  return {
    type: 'token',
    system: system === '' ? null : system,
    ...(code === '' ? {} : { code }),
  };
}

const TYPED_TAIL =
  /(?:^|\/)([A-Z][A-Za-z]{1,63})\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/** The `Type/id` of a relative or absolute reference (a version ignored), when it has one. */
export function typedTail(reference: string): { resourceType: string; id: string } | undefined {
  const m = TYPED_TAIL.exec(reference);
  if (!m || !isResourceType(m[1])) return undefined;
  return { resourceType: m[1]!, id: m[2]! };
}

/**
 * A reference value. `targetType`: the `:[Type]` modifier; `targets`: the parameter's target types
 * (a bare id of a parameter with one target is an id of that type).
 */
export function parseReferenceValue(
  param: string,
  raw: string,
  options: { modifier?: SearchModifier; targetType?: string; targets: readonly string[] },
): ReferenceSearchValue {
  const value = unescapeValue(raw).trim();
  if (options.modifier === 'identifier') {
    const token = parseTokenValue(param, raw);
    return {
      type: 'reference',
      identifier: {
        ...(token.system === undefined ? {} : { system: token.system }),
        ...(token.code === undefined ? {} : { value: token.code }),
      },
    };
  }
  const only = options.targetType ?? (options.targets.length === 1 ? options.targets[0] : undefined);
  let out: ReferenceSearchValue;
  if (isValidId(value)) {
    out = { type: 'reference', id: value, ...(only === undefined ? {} : { resourceType: only }) };
  } else if (/^[a-z][a-z0-9+.-]*:/i.test(value)) {
    // An absolute or canonical URL (`http://…`, `urn:…`), with an optional `|version`.
    const bar = value.lastIndexOf('|');
    const url = bar === -1 ? value : value.slice(0, bar);
    const tail = typedTail(url);
    out = {
      type: 'reference',
      url,
      ...(bar === -1 ? {} : { version: value.slice(bar + 1) }),
      ...(tail ?? {}),
    };
  } else {
    const tail = /^[A-Z]/.test(value) ? typedTail(value) : undefined;
    if (!tail || tail.resourceType + '/' + tail.id !== value.replace(/\/_history\/[^/]+$/, '')) {
      throw invalidValue(param, `${param} must be a reference (Type/id), an id or an absolute URL`);
    }
    out = { type: 'reference', ...tail };
  }
  if (
    options.targetType !== undefined &&
    out.resourceType !== undefined &&
    out.resourceType !== options.targetType
  ) {
    throw invalidValue(param, `${param}:${options.targetType} takes ${options.targetType} references only`);
  }
  return out;
}

/** A string value. */
export function parseStringValue(raw: string): { type: 'string'; value: string; normalized: string } {
  const value = unescapeValue(raw);
  return { type: 'string', value, normalized: normalizeText(value) };
}

/** One value of a parameter of `type` (composites excepted). */
export function parseSimpleValue(
  param: string,
  type: Exclude<SearchParamType, 'composite' | 'special'>,
  raw: string,
  options: {
    modifier?: SearchModifier;
    targetType?: string;
    targets: readonly string[];
    now: number;
  },
): ComponentSearchValue {
  switch (type) {
    case 'string':
      return parseStringValue(raw);
    case 'token':
      return parseTokenValue(param, raw, options.modifier);
    case 'date':
      return parseDateValue(param, raw, options);
    case 'number':
      return parseNumberValue(param, raw);
    case 'quantity':
      return parseQuantityValue(param, raw);
    case 'reference':
      return parseReferenceValue(param, raw, options);
    case 'uri':
      return { type: 'uri', value: unescapeValue(raw) };
  }
}
