import type { OutcomeIssue } from '../../http/outcome.js';
import type { CompiledField, CompiledType, TypeCompiler } from './compiled-types.js';
import type { JsonObject } from './invariants.js';

/**
 * The issues of values whose JSON shape does not fit their element's type, at every depth: a value
 * of a complex type or a resource that is not an object (`"name": [true]`, `"code": 5`,
 * `"contained": [5]`), a primitive's value that is an object or a list (`"active": {}`), and a
 * primitive's extension (`_active`) that is not an object. `@medplum/core`'s `validateResource`
 * does not look into a value it cannot walk, so it finds nothing wrong with these; a value whose
 * primitive JSON type is wrong (`"birthDate": 5`), or any other problem, it reports itself, and it
 * is not repeated here. Unknown keys, `null`s and list-or-single mismatches are left to it too.
 * @see https://hl7.org/fhir/R4/json.html
 */
export function createShapeCheck(types: TypeCompiler): (resource: unknown) => OutcomeIssue[] {
  function checkObject(object: JsonObject, type: CompiledType, path: string, issues: OutcomeIssue[]): void {
    for (const key in object) {
      if (!Object.hasOwn(object, key)) continue;
      const value = object[key];
      const field = type.fields.get(key);
      if (field !== undefined) checkElement(value, field, `${path}.${key}`, issues);
      else if (key.startsWith('_'))
        checkPrimitiveExtension(value, type.fields.get(key.slice(1)), path, key, issues);
    }
  }

  function checkElement(value: unknown, field: CompiledField, path: string, issues: OutcomeIssue[]): void {
    if (!Array.isArray(value)) {
      if (!field.element.isArray) checkValue(value, field, path, issues);
      return;
    }
    if (!field.element.isArray) return;
    for (let i = 0; i < value.length; i++) checkValue(value[i], field, `${path}[${i}]`, issues);
  }

  function checkValue(value: unknown, field: CompiledField, path: string, issues: OutcomeIssue[]): void {
    if (value === null || value === undefined) return;
    const object = typeof value === 'object' && !Array.isArray(value);
    if (field.primitive !== undefined) {
      if (typeof value === 'object') {
        issues.push(shapeIssue(path, field.code, `a JSON ${field.primitive.jsType}`, value));
      }
      return;
    }
    if (!object) {
      issues.push(shapeIssue(path, field.resource ? 'resource' : field.code, 'a JSON object', value));
      return;
    }
    const json = value as JsonObject;
    const type = field.resource
      ? typeof json.resourceType === 'string'
        ? types.resourceType(json.resourceType)
        : undefined
      : types.type(field.code);
    if (type !== undefined) checkObject(json, type, path, issues);
  }

  /** `_given` next to `given`: an object (a list of objects or nulls for a list). */
  function checkPrimitiveExtension(
    value: unknown,
    field: CompiledField | undefined,
    path: string,
    key: string,
    issues: OutcomeIssue[],
  ): void {
    if (field?.primitive === undefined || value === null) return;
    const items = field.element.isArray && Array.isArray(value) ? value : [value];
    items.forEach((item, i) => {
      if (item === null || (typeof item === 'object' && !Array.isArray(item))) return;
      const at = items === value ? `${path}.${key}[${i}]` : `${path}.${key}`;
      issues.push(shapeIssue(at, 'Element', 'a JSON object', item));
    });
  }

  return (resource) => {
    if (resource === null || typeof resource !== 'object' || Array.isArray(resource)) return [];
    const object = resource as JsonObject;
    const resourceType = object.resourceType;
    const type = typeof resourceType === 'string' ? types.resourceType(resourceType) : undefined;
    if (type === undefined) return [];
    const issues: OutcomeIssue[] = [];
    checkObject(object, type, resourceType as string, issues);
    return issues;
  };
}

/** `word` with its indefinite article: `a boolean`, `an Identifier`. */
const withArticle = (word: string): string => `${/^[aeiou]/i.test(word) ? 'an' : 'a'} ${word}`;

/** What a JSON value is, for a message: `a boolean`, `a list`, `an object`. */
function jsonKind(value: unknown): string {
  if (Array.isArray(value)) return 'a list';
  return withArticle(typeof value === 'object' ? 'object' : typeof value);
}

/** A `structure` error at `path`: `Expected a HumanName (a JSON object), found a boolean`. */
function shapeIssue(path: string, type: string, form: string, value: unknown): OutcomeIssue {
  return {
    severity: 'error',
    code: 'structure',
    details: { text: `Expected ${withArticle(type)} (${form}), found ${jsonKind(value)}` },
    expression: [path],
  };
}
