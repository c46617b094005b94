/**
 * Whether the value of a FHIRPath Patch operation fits the element it is written to, by the R4
 * JSON schema: an object for a complex type (and, when the value names its type, that type), the
 * JSON type of a primitive (`valueBoolean` for `name`, a HumanName, does not fit). A patch never
 * writes a value that does not fit, whatever the project (strict or not).
 * @see https://hl7.org/fhir/R4/fhirpatch.html
 * @see https://hl7.org/fhir/R4/json.html
 */
import type { JsonSchemaDefinitions, JsonSchemaProperty } from '../../search/value-types.js';

/** The JSON form of a value. */
type JsonKind = 'object' | 'string' | 'number' | 'boolean' | 'list' | 'null';

const REF_PREFIX = '#/definitions/';

/** The profiles of Quantity: the same JSON, and a value of one fits an element of another. */
const QUANTITIES = new Set([
  'Quantity',
  'Age',
  'Count',
  'Distance',
  'Duration',
  'SimpleQuantity',
  'MoneyQuantity',
]);

/** A schema definition, as far as its JSON form goes. */
interface Definition {
  readonly properties?: unknown;
  readonly oneOf?: unknown;
  readonly type?: string;
}

function kindOf(value: unknown): JsonKind {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'list';
  const kind = typeof value;
  return kind === 'string' || kind === 'number' || kind === 'boolean' ? kind : 'object';
}

/** The type an element's values have (`HumanName`, `boolean`), when the schema names one. */
function typeNameOf(property: JsonSchemaProperty): string | undefined {
  const ref = property.$ref ?? property.items?.$ref;
  return ref?.startsWith(REF_PREFIX) ? ref.slice(REF_PREFIX.length) : undefined;
}

/** The JSON form of an element's values: an object for a complex type or a resource. */
function expectedKind(property: JsonSchemaProperty, schema: JsonSchemaDefinitions): JsonKind | undefined {
  const name = typeNameOf(property);
  if (name === undefined) {
    // An enumerated code, or a choice element's primitive (`deceasedBoolean`), written inline.
    if (property.enum) return 'string';
    const inline = property.type === 'array' ? undefined : property.type;
    return inline === 'string' || inline === 'number' || inline === 'boolean' ? inline : undefined;
  }
  const definition = schema[name] as Definition | undefined;
  if (definition === undefined) return undefined;
  if (definition.properties !== undefined || definition.oneOf !== undefined) return 'object';
  const type = definition.type;
  if (type === 'string' || type === 'number' || type === 'boolean') return type;
  return name === 'xhtml' ? 'string' : undefined;
}

/**
 * Why `value` (of the `value[x]` type `valueType`, undefined for nested parts) cannot be written to
 * the element `property` describes, or undefined when it fits, or when the schema does not say.
 */
export function valueMisfit(
  property: JsonSchemaProperty,
  schema: JsonSchemaDefinitions,
  value: unknown,
  valueType: string | undefined,
): string | undefined {
  const expected = expectedKind(property, schema);
  if (expected === undefined) return undefined;
  const actual = kindOf(value);
  const named = valueType === undefined ? 'the value' : `value${valueType}`;
  if (actual !== expected) return `${named} is a JSON ${actual}; the element takes a JSON ${expected}`;
  const type = typeNameOf(property);
  if (expected !== 'object' || valueType === undefined || type === undefined || type === valueType) {
    return undefined;
  }
  if (QUANTITIES.has(type) && QUANTITIES.has(valueType)) return undefined;
  return `${named} is a ${valueType}; the element is a ${type}`;
}
