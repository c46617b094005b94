import type { TypedValue } from '@medplum/core';
import { parseDateRange } from '../common/date-range.js';
import type { FhirResource } from '../storage/types.js';
import type { SearchParameterDefinition, SearchRegistry } from './definitions.js';
import type {
  CompositeIndexValue,
  DateIndexValue,
  IndexValue,
  QuantityIndexValue,
  ReferenceIndexValue,
  TokenIndexValue,
} from '../storage/index-values.js';
import { normalizeText } from './normalize-text.js';
import { typedTail } from './parse-value.js';
import type { SearchParamType } from '../storage/search-request.js';

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** The FHIR type of one selected value: the schema's when it has one, else the evaluator's. */
function fhirTypeOf(value: TypedValue, valueTypes: readonly string[]): string {
  if (valueTypes.length === 1) return valueTypes[0]!;
  return value.type;
}

const NAME_PARTS = ['family', 'given', 'prefix', 'suffix', 'text'];
const ADDRESS_PARTS = ['line', 'city', 'district', 'state', 'postalCode', 'country', 'text'];

/** String search: a string, or each part of a `HumanName` or `Address`. */
function strings(value: unknown, out: IndexValue[]): void {
  const add = (s: unknown): void => {
    if (typeof s === 'string' && s !== '')
      out.push({ type: 'string', normalized: normalizeText(s), exact: s });
  };
  if (!isObject(value)) return add(value);
  for (const key of new Set([...NAME_PARTS, ...ADDRESS_PARTS])) {
    const part = value[key];
    if (Array.isArray(part)) part.forEach(add);
    else add(part);
  }
}

function coding(value: Json, out: IndexValue[]): void {
  const token: TokenIndexValue = { type: 'token' };
  const system = str(value.system);
  const code = str(value.code);
  const display = str(value.display);
  if (system !== undefined) token.system = system;
  if (code !== undefined) token.code = code;
  if (display !== undefined) token.text = normalizeText(display);
  if (system !== undefined || code !== undefined || display !== undefined) out.push(token);
}

function identifier(value: Json, out: IndexValue[]): void {
  const token: TokenIndexValue = { type: 'token' };
  const system = str(value.system);
  const code = str(value.value);
  if (system !== undefined) token.system = system;
  if (code !== undefined) token.code = code;
  const type = isObject(value.type) ? value.type : undefined;
  const text = str(type?.text);
  if (text !== undefined) token.text = normalizeText(text);
  const types = Array.isArray(type?.coding)
    ? type.coding.filter(isObject).map((c) => ({
        ...(str(c.system) === undefined ? {} : { system: str(c.system) }),
        ...(str(c.code) === undefined ? {} : { code: str(c.code) }),
      }))
    : [];
  if (types.length > 0) token.types = types;
  if (system !== undefined || code !== undefined) out.push(token);
}

/**
 * Token search over each FHIR type R4 allows.
 * @see https://hl7.org/fhir/R4/search.html#token
 */
function tokens(value: unknown, fhirType: string, out: IndexValue[]): void {
  if (typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number') {
    out.push({ type: 'token', code: String(value) });
    return;
  }
  if (!isObject(value)) return;
  let type = fhirType;
  if (!['CodeableConcept', 'Coding', 'Identifier', 'ContactPoint'].includes(type)) {
    // Typed by its shape when neither the schema nor the evaluator knows it.
    if ('coding' in value || ('text' in value && !('value' in value))) type = 'CodeableConcept';
    else if ('code' in value || 'display' in value) type = 'Coding';
    else type = 'Identifier';
  }
  switch (type) {
    case 'CodeableConcept': {
      if (Array.isArray(value.coding)) for (const c of value.coding) if (isObject(c)) coding(c, out);
      const text = str(value.text);
      if (text !== undefined) out.push({ type: 'token', text: normalizeText(text) });
      return;
    }
    case 'Coding':
      return coding(value, out);
    case 'ContactPoint': {
      const code = str(value.value);
      if (code !== undefined) out.push({ type: 'token', code });
      return;
    }
    default:
      return identifier(value, out);
  }
}

/** The range of a date text, or undefined. */
function dateRange(value: unknown): { start: number; end: number } | undefined {
  return typeof value === 'string' ? parseDateRange(value) : undefined;
}

/**
 * Date search over date, dateTime, instant, Period and Timing (its outer limits: events and
 * bounds). @see https://hl7.org/fhir/R4/search.html#date
 */
function dates(value: unknown, out: IndexValue[]): void {
  if (typeof value === 'string') {
    const range = dateRange(value);
    if (range) out.push({ type: 'date', ...range });
    return;
  }
  if (!isObject(value)) return;
  const ranges: DateIndexValue[] = [];
  const period = (p: unknown): void => {
    if (!isObject(p)) return;
    const start = dateRange(p.start);
    const end = dateRange(p.end);
    if (!start && !end) return;
    ranges.push({
      type: 'date',
      ...(start ? { start: start.start } : {}),
      ...(end ? { end: end.end } : {}),
    });
  };
  if ('start' in value || 'end' in value) period(value);
  if (Array.isArray(value.event)) {
    for (const event of value.event) {
      const range = dateRange(event);
      if (range) ranges.push({ type: 'date', ...range });
    }
  }
  if (isObject(value.repeat)) period(value.repeat.boundsPeriod);
  if (ranges.length === 0) return;
  if (ranges.length === 1) {
    out.push(ranges[0]!);
    return;
  }
  // A Timing: only its outer limits count.
  const open = (k: 'start' | 'end') => ranges.some((r) => r[k] === undefined);
  out.push({
    type: 'date',
    ...(open('start') ? {} : { start: Math.min(...ranges.map((r) => r.start!)) }),
    ...(open('end') ? {} : { end: Math.max(...ranges.map((r) => r.end!)) }),
  });
}

/** Number search over decimal, integer and Range. */
function numbers(value: unknown, out: IndexValue[]): void {
  const n = num(value);
  if (n !== undefined) {
    out.push({ type: 'number', value: n });
    return;
  }
  if (!isObject(value) || !('low' in value || 'high' in value)) return;
  const low = isObject(value.low) ? num(value.low.value) : undefined;
  const high = isObject(value.high) ? num(value.high.value) : undefined;
  if (low === undefined && high === undefined) return;
  out.push({
    type: 'number',
    ...(low === undefined ? {} : { low }),
    ...(high === undefined ? {} : { high }),
  });
}

function unitOf(q: Json, out: QuantityIndexValue): QuantityIndexValue {
  const currency = str(q.currency);
  const system = str(q.system) ?? (currency === undefined ? undefined : 'urn:iso:std:iso:4217');
  const code = str(q.code) ?? currency;
  const unit = str(q.unit);
  // Assigned one by one (an object spread per value costs more, and this runs on every write).
  if (system !== undefined) out.system = system;
  if (code !== undefined) out.code = code;
  if (unit !== undefined) out.unit = unit;
  return out;
}

/** Quantity search over Quantity (and its profiles, Money) and Range. */
function quantities(value: unknown, out: IndexValue[]): void {
  const n = num(value);
  if (n !== undefined) {
    out.push({ type: 'quantity', value: n });
    return;
  }
  if (!isObject(value)) return;
  const v = num(value.value);
  if (v !== undefined) {
    out.push(unitOf(value, { type: 'quantity', value: v }));
    return;
  }
  const low = isObject(value.low) ? value.low : undefined;
  const high = isObject(value.high) ? value.high : undefined;
  const lo = num(low?.value);
  const hi = num(high?.value);
  if (lo === undefined && hi === undefined) return;
  const range: QuantityIndexValue = { type: 'quantity' };
  if (lo !== undefined) range.low = lo;
  if (hi !== undefined) range.high = hi;
  out.push(unitOf(low ?? high ?? {}, range));
}

/** A canonical or absolute URL, a canonical's `|version` split off. */
function canonical(text: string): ReferenceIndexValue {
  const bar = text.lastIndexOf('|');
  return bar === -1
    ? { type: 'reference', url: text }
    : { type: 'reference', url: text.slice(0, bar), version: text.slice(bar + 1) };
}

/**
 * Reference search over Reference (relative, absolute, logical by identifier), canonical and an
 * inline resource. `resolveIs`: only references to that type count.
 */
function references(
  value: unknown,
  fhirType: string,
  resolveIs: string | undefined,
  out: IndexValue[],
): void {
  let ref: ReferenceIndexValue | undefined;
  if (typeof value === 'string') {
    ref = canonical(value);
  } else if (isObject(value)) {
    if (typeof value.resourceType === 'string') {
      ref = {
        type: 'reference',
        resourceType: value.resourceType,
        ...(str(value.id) ? { id: str(value.id) } : {}),
      };
    } else if (fhirType !== 'Attachment') {
      ref = { type: 'reference' };
      const reference = str(value.reference);
      if (reference !== undefined && !reference.startsWith('#')) {
        const tail = typedTail(reference);
        if (tail) Object.assign(ref, tail);
        if (/^[a-z][a-z0-9+.-]*:/i.test(reference)) ref.url = reference;
      }
      const type = str(value.type);
      if (ref.resourceType === undefined && type !== undefined) ref.resourceType = type;
      if (isObject(value.identifier)) {
        const system = str(value.identifier.system);
        const v = str(value.identifier.value);
        ref.identifier = {
          ...(system === undefined ? {} : { system }),
          ...(v === undefined ? {} : { value: v }),
        };
      }
      if (ref.resourceType === undefined && ref.url === undefined && ref.identifier === undefined)
        ref = undefined;
    }
  }
  if (!ref) return;
  if (resolveIs !== undefined && ref.resourceType !== resolveIs) return;
  out.push(ref);
}

/**
 * The index values of `values` (typed FHIRPath results) for a parameter of `type`, appended to
 * `out`: what `extractValues` does with each branch's results (and the compiled paths of
 * `compiled-paths.ts` with theirs).
 */
export function convert(
  type: SearchParamType,
  values: readonly TypedValue[],
  valueTypes: readonly string[],
  resolveIs: string | undefined,
  out: IndexValue[],
): void {
  for (const typed of values) {
    const value: unknown = typed.value;
    const fhirType = fhirTypeOf(typed, valueTypes);
    switch (type) {
      case 'string':
        strings(value, out);
        break;
      case 'token':
        tokens(value, fhirType, out);
        break;
      case 'date':
        dates(value, out);
        break;
      case 'number':
        numbers(value, out);
        break;
      case 'quantity':
        quantities(value, out);
        break;
      case 'reference':
        references(value, fhirType, resolveIs, out);
        break;
      case 'uri':
        if (typeof value === 'string') out.push({ type: 'uri', value });
        break;
      default:
        break;
    }
  }
}

/**
 * The normalized values a (non-composite) search parameter sees in `resource`, by evaluating each
 * branch of its R4 FHIRPath expression: what a store indexes on write and what `match` compares.
 * Empty when the parameter sees nothing (what `:missing=true` matches).
 * @see https://hl7.org/fhir/R4/search.html#ptypes
 */
export function extractValues(
  registry: SearchRegistry,
  definition: SearchParameterDefinition,
  resource: FhirResource,
): IndexValue[] {
  const out: IndexValue[] = [];
  if (definition.type === 'composite' || definition.type === 'special') return out;
  const root = registry.toTypedValue(resource);
  for (const branch of definition.branches) {
    const selected = registry.evaluate(branch.expression, [root], root);
    convert(definition.type, selected, branch.valueTypes, branch.resolveIs, out);
  }
  return out;
}

/**
 * The elements a composite parameter sees in `resource` (`Observation` itself for
 * `code-value-quantity`, each `Observation.component` for `component-code-value-quantity`), each
 * with the values of every component.
 * @see https://hl7.org/fhir/R4/search.html#composite
 */
export function extractComposite(
  registry: SearchRegistry,
  definition: SearchParameterDefinition,
  resource: FhirResource,
): CompositeIndexValue[] {
  if (definition.type !== 'composite') return [];
  const root = registry.toTypedValue(resource);
  const out: CompositeIndexValue[] = [];
  for (const branch of definition.branches) {
    for (const element of registry.evaluate(branch.expression, [root], root)) {
      const components = definition.components.map((component) => {
        const values: IndexValue[] = [];
        const selected = registry.evaluate(component.expression, [element], root);
        convert(component.type, selected, component.valueTypes, undefined, values);
        return values;
      });
      out.push({ type: 'composite', components });
    }
  }
  return out;
}
