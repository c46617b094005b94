/**
 * A reader for the FHIR R4 `Parameters` resource used as the body of custom operations
 * (FHIR R4 "Operations" §3.1.0.1, `Parameters` resource). It checks the resource's shape against a
 * small declaration of the operation's input parameters and answers every problem with a 400
 * `FhirError` whose `expression` is the FHIRPath of the offending element
 * (`Parameters.parameter[2].valueString`).
 */
import { FhirError } from './http-error.js';

/** The `value[x]` types this reader understands (FHIR R4 primitive data types). */
export type ParameterValueType =
  | 'string'
  | 'boolean'
  | 'integer'
  | 'positiveInt'
  | 'unsignedInt'
  | 'decimal'
  | 'uri'
  | 'url'
  | 'code'
  | 'id';

/** How many times a parameter may be given. */
interface ParameterCardinality {
  /**
   * The parameter must be present (min = 1).
   * @default false
   */
  required?: boolean;
  /**
   * The parameter may be given more than once (max = `*`).
   * @default false
   */
  repeats?: boolean;
}

/** Declares one input parameter of an operation that carries a `value[x]`. */
export interface ValueParameterDefinition extends ParameterCardinality {
  /** The accepted `value[x]` types (`'string'` accepts `valueString`). */
  type: ParameterValueType | readonly ParameterValueType[];
}

/** Declares one input parameter of an operation made of parts (`Parameters.parameter.part`). */
export interface PartsParameterDefinition extends ParameterCardinality {
  /** Its parts, each declared as a parameter. */
  parts: ParameterDefinitions;
}

/** Declares one input parameter of an operation. */
export type ParameterDefinition = ValueParameterDefinition | PartsParameterDefinition;

/** The input parameters of an operation, by name. */
export type ParameterDefinitions = Readonly<Record<string, ParameterDefinition>>;

type TypesOf<D extends ParameterDefinition> = D extends { type: infer T }
  ? T extends readonly (infer U)[]
    ? U
    : T
  : never;

/** The JavaScript type of a `value[x]` of FHIR type `T`. */
export type ParameterJsType<T> = T extends 'boolean'
  ? boolean
  : T extends 'integer' | 'positiveInt' | 'unsignedInt' | 'decimal'
    ? number
    : string;

/** One parameter value read from the body, with where it was found. */
export interface ParameterValue<V> {
  value: V;
  /** The `value[x]` type it was given as. */
  valueType: ParameterValueType;
  /** Index of the item in `Parameters.parameter` (or in its parent's `part`). */
  index: number;
  /** FHIRPath of the value element, for error `expression`s (`Parameters.parameter[0].valueString`). */
  expression: string;
}

/** One parameter made of parts, read from the body: its parts, read as parameters. */
export interface ParameterParts<P extends ParameterDefinitions> {
  parts: ReadParameters<P>;
  /** Index of the item in `Parameters.parameter`. */
  index: number;
  /** FHIRPath of the item (`Parameters.parameter[2]`); its parts' are under `.part[i]`. */
  expression: string;
}

/** What one occurrence of a parameter of definition `D` reads as. */
type ReadOne<D extends ParameterDefinition> = D extends { parts: infer P extends ParameterDefinitions }
  ? ParameterParts<P>
  : ParameterValue<ParameterJsType<TypesOf<D>>>;

/** What `readParameters` returns: each declared name mapped to its value(s). */
export type ReadParameters<D extends ParameterDefinitions> = {
  [K in keyof D]: D[K] extends { repeats: true }
    ? ReadOne<D[K]>[]
    : D[K] extends { required: true }
      ? ReadOne<D[K]>
      : ReadOne<D[K]> | undefined;
};

/** A 400 `invalid` error pointing at `expression`. */
export function invalidParameter(expression: string, text: string): FhirError {
  return new FhirError(400, 'invalid', text, { expression: [expression] });
}

// Resource-level elements a Parameters resource may carry besides `parameter` (it is a Resource,
// not a DomainResource: no text, contained or extension).
const RESOURCE_ELEMENTS = new Set(['resourceType', 'id', 'meta', 'implicitRules', 'language', 'parameter']);
// Elements of a `Parameters.parameter` item other than value[x].
const ITEM_ELEMENTS = new Set(['id', 'extension', 'modifierExtension', 'name', 'resource', 'part']);

const VALUE_KEY: Record<ParameterValueType, string> = {
  string: 'valueString',
  boolean: 'valueBoolean',
  integer: 'valueInteger',
  positiveInt: 'valuePositiveInt',
  unsignedInt: 'valueUnsignedInt',
  decimal: 'valueDecimal',
  uri: 'valueUri',
  url: 'valueUrl',
  code: 'valueCode',
  id: 'valueId',
};

const INT32_MAX = 2_147_483_647;
const INT32_MIN = -2_147_483_648;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Checks a primitive against FHIR R4 JSON rules; returns the problem, or undefined when valid. */
function primitiveProblem(type: ParameterValueType, value: unknown): string | undefined {
  switch (type) {
    case 'boolean':
      return typeof value === 'boolean' ? undefined : 'must be a JSON boolean';
    case 'integer':
    case 'positiveInt':
    case 'unsignedInt': {
      if (typeof value !== 'number' || !Number.isInteger(value) || value > INT32_MAX || value < INT32_MIN) {
        return 'must be a 32-bit JSON integer';
      }
      if (type === 'positiveInt' && value < 1) return 'must be at least 1';
      if (type === 'unsignedInt' && value < 0) return 'must not be negative';
      return undefined;
    }
    case 'decimal':
      return typeof value === 'number' && Number.isFinite(value) ? undefined : 'must be a JSON number';
    case 'string':
      // FHIR R4 §2.24.0.1: a string has at least one non-whitespace character.
      if (typeof value !== 'string') return 'must be a JSON string';
      return value.trim() === '' ? 'must not be empty' : undefined;
    case 'uri':
    case 'url':
      if (typeof value !== 'string') return 'must be a JSON string';
      return /^\S+$/.test(value) ? undefined : 'must be a non-empty URI without whitespace';
    case 'code':
      if (typeof value !== 'string') return 'must be a JSON string';
      return /^[^\s]+( [^\s]+)*$/.test(value)
        ? undefined
        : 'must be a code (no leading, trailing or double spaces)';
    case 'id':
      if (typeof value !== 'string') return 'must be a JSON string';
      return /^[A-Za-z0-9\-.]{1,64}$/.test(value) ? undefined : 'must be a FHIR id';
  }
}

/** What one item reads as: a value, or parts. */
type ReadItem = ParameterValue<unknown> | ParameterParts<ParameterDefinitions>;

/** Reads one item's `value[x]` against its definition. */
function readValue(
  entry: Record<string, unknown>,
  at: string,
  index: number,
  definition: ValueParameterDefinition,
): ParameterValue<unknown> {
  const name = entry.name as string;
  const accepted = (
    typeof definition.type === 'string' ? [definition.type] : definition.type
  ) as ParameterValueType[];
  const valueKeys = Object.keys(entry).filter((key) => !ITEM_ELEMENTS.has(key));
  const expected = accepted.map((type) => VALUE_KEY[type]).join(' or ');
  for (const key of ['resource', 'part']) {
    if (Object.hasOwn(entry, key))
      throw invalidParameter(`${at}.${key}`, `Parameter '${name}' takes a ${expected}, not a ${key}`);
  }
  if (valueKeys.length === 0) throw invalidParameter(at, `Parameter '${name}' must have a ${expected}`);
  if (valueKeys.length > 1) {
    throw invalidParameter(`${at}.${valueKeys[1]!}`, `Parameter '${name}' must have exactly one value[x]`);
  }
  const valueKey = valueKeys[0]!;
  const valueType = accepted.find((type) => VALUE_KEY[type] === valueKey);
  if (!valueType) throw invalidParameter(`${at}.${valueKey}`, `Parameter '${name}' must have a ${expected}`);
  const value = entry[valueKey];
  const problem = primitiveProblem(valueType, value);
  if (problem) throw invalidParameter(`${at}.${valueKey}`, `Parameter '${name}': ${valueKey} ${problem}`);
  return { value, valueType, index, expression: `${at}.${valueKey}` };
}

/** Reads one item's `part` list against its definition's parts. */
function readParts(
  entry: Record<string, unknown>,
  at: string,
  index: number,
  definition: PartsParameterDefinition,
): ParameterParts<ParameterDefinitions> {
  const name = entry.name as string;
  const other = Object.keys(entry).find((key) => !ITEM_ELEMENTS.has(key) || key === 'resource');
  if (other !== undefined)
    throw invalidParameter(`${at}.${other}`, `Parameter '${name}' takes parts, not a ${other}`);
  if (!Object.hasOwn(entry, 'part')) throw invalidParameter(at, `Parameter '${name}' must have parts`);
  return { parts: readItems(entry.part, `${at}.part`, definition.parts), index, expression: at };
}

/**
 * Reads the items of a `parameter` (or `part`) list found at FHIRPath `path` against `definitions`
 * (steps 2 to 4 of {@link readParameters}).
 */
function readItems<const D extends ParameterDefinitions>(
  raw: unknown,
  path: string,
  definitions: D,
): ReadParameters<D> {
  const items = raw ?? [];
  if (!Array.isArray(items))
    throw invalidParameter(path, `'${path.slice(path.lastIndexOf('.') + 1)}' must be an array`);
  const names: string[] = [];
  (items as unknown[]).forEach((item, index) => {
    const at = `${path}[${index}]`;
    if (!isPlainObject(item)) throw invalidParameter(at, 'A parameter must be a JSON object');
    if (typeof item.name !== 'string' || item.name.trim() === '') {
      throw invalidParameter(`${at}.name`, 'A parameter must have a non-empty name');
    }
    names.push(item.name);
  });
  for (const [name, definition] of Object.entries(definitions)) {
    if (definition.required && !names.includes(name)) {
      throw invalidParameter(path, `Expected required input parameter '${name}'`);
    }
  }
  const result: Record<string, ReadItem[] | ReadItem | undefined> = {};
  for (const [name, definition] of Object.entries(definitions))
    result[name] = definition.repeats ? [] : undefined;
  (items as Record<string, unknown>[]).forEach((entry, index) => {
    const at = `${path}[${index}]`;
    const name = entry.name as string;
    const definition = Object.hasOwn(definitions, name) ? definitions[name] : undefined;
    if (!definition) throw invalidParameter(`${at}.name`, `Unknown parameter '${name}'`);
    if (!definition.repeats && result[name] !== undefined) {
      throw invalidParameter(at, `Parameter '${name}' may be given only once`);
    }
    const read =
      'parts' in definition
        ? readParts(entry, at, index, definition)
        : readValue(entry, at, index, definition);
    const slot = result[name];
    if (Array.isArray(slot)) slot.push(read);
    else result[name] = read;
  });
  return result as ReadParameters<D>;
}

/**
 * Reads the `Parameters` resource `body` against `definitions`.
 *
 * Checks, in this order, each failing with a 400 `FhirError` (issue code `invalid`):
 * 1. the body is a JSON object whose `resourceType` is `Parameters` (`Parameters`,
 *    `Parameters.resourceType`) and has no other elements than a Resource's (`Parameters.<element>`);
 * 2. `parameter`, when present, is an array of objects each with a non-empty `name`
 *    (`Parameters.parameter`, `Parameters.parameter[i]`, `Parameters.parameter[i].name`);
 * 3. every required parameter is present: `Expected required input parameter '<name>'` at
 *    `Parameters.parameter` (the same answer whether `parameter` is absent, empty or holds other
 *    names only);
 * 4. every item names a declared parameter (`Parameters.parameter[i].name`), is not a repeat of a
 *    non-repeating one (`Parameters.parameter[i]`), and carries exactly one `value[x]` of an accepted
 *    type with a valid value (`Parameters.parameter[i]` when absent, else the value element); a
 *    parameter declared with `parts` carries a `part` list instead, read by steps 2 to 4 against
 *    its parts at `Parameters.parameter[i].part`.
 */
export function readParameters<const D extends ParameterDefinitions>(
  body: unknown,
  definitions: D,
): ReadParameters<D> {
  if (!isPlainObject(body))
    throw invalidParameter('Parameters', 'The request body must be a Parameters resource');
  if (body.resourceType !== 'Parameters') {
    throw invalidParameter(
      'Parameters.resourceType',
      "The request body must be a resource of type 'Parameters'",
    );
  }
  for (const key of Object.keys(body)) {
    if (!RESOURCE_ELEMENTS.has(key)) throw invalidParameter(`Parameters.${key}`, `Unknown element '${key}'`);
  }
  return readItems(body.parameter, 'Parameters.parameter', definitions);
}
