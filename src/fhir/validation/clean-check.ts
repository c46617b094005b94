import type {
  CompiledElement,
  CompiledField,
  CompiledType,
  PrimitiveRule,
  TypeCompiler,
} from './compiled-types.js';
import type { InvariantScope, JsonObject } from './invariants.js';
import type { MedplumCore } from './medplum-r4.js';

/** FHIR strings are at most 1 MB (https://hl7.org/fhir/R4/datatypes.html#string). */
const MAX_STRING = 1024 * 1024;

/** `value.trim() !== ''`, without trimming when the first character is printable ASCII. */
function hasContent(value: string): boolean {
  const first = value.charCodeAt(0);
  return (first > 0x20 && first < 0x7f) || value.trim() !== '';
}

function primitiveOk(value: unknown, rule: PrimitiveRule): boolean {
  switch (rule.jsType) {
    case 'string':
      return (
        typeof value === 'string' &&
        hasContent(value) &&
        value.length <= MAX_STRING &&
        (rule.regex === undefined || rule.regex.test(value))
      );
    case 'number':
      return (
        typeof value === 'number' &&
        Number.isFinite(value) &&
        (!rule.integer || Number.isInteger(value)) &&
        (!rule.positive || value > 0) &&
        (!rule.unsigned || value >= 0)
      );
    case 'boolean':
      return typeof value === 'boolean';
  }
}

/** The reference validator's target check on `Reference.reference` (`Type/id`, `Type?query`). */
function referenceOk(value: JsonObject, field: CompiledField): boolean {
  const targets = field.reference;
  const reference = value.reference;
  if (targets === undefined || targets.any || typeof reference !== 'string' || reference.startsWith('#'))
    return true;
  const query = reference.indexOf('?');
  const slash = reference.indexOf('/');
  const end = query >= 0 ? query : slash >= 0 ? slash : reference.length;
  return end === 0 || targets.types.has(reference.slice(0, end));
}

/**
 * The fast path of strict validation: true only when `@medplum/core`'s `validateResource` would
 * report no issue at all for `resource` (no error and no warning). It walks the resource's own keys
 * once against types compiled from the same schemas the reference walks, and answers false on the
 * first thing it does not decide, on any error or warning, and on whatever it does not handle
 * (primitive extensions `_x`, `null`, empty values, unknown types, fixed values, slices). A false
 * answer is not a verdict: the caller then asks the reference validator for the exact issues.
 */
export function createCleanCheck(core: MedplumCore, types: TypeCompiler): (resource: unknown) => boolean {
  function checkValue(value: unknown, field: CompiledField, scope: InvariantScope): boolean {
    if (field.primitive !== undefined) {
      if (!primitiveOk(value, field.primitive)) return false;
      return invariantsHold(value, field.code, field.element, scope);
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
    const object = value as JsonObject;
    if (field.resource) {
      const resourceType = object.resourceType;
      const type = typeof resourceType === 'string' ? types.resourceType(resourceType) : undefined;
      if (type === undefined) return false;
      scope.resources.push(object);
      const ok = checkObject(object, type, scope);
      scope.resources.pop();
      return ok && invariantsHold(object, resourceType as string, field.element, scope);
    }
    let type = field.target;
    if (type === undefined) {
      type = types.type(field.code);
      if (type === undefined) return false;
      field.target = type;
    }
    if (field.reference !== undefined && !referenceOk(object, field)) return false;
    return checkObject(object, type, scope) && invariantsHold(object, field.code, field.element, scope);
  }

  function invariantsHold(
    value: unknown,
    type: string,
    element: CompiledElement,
    scope: InvariantScope,
  ): boolean {
    for (const holds of element.invariants) if (!holds(value, type, scope)) return false;
    return true;
  }

  function checkObject(object: JsonObject, type: CompiledType, scope: InvariantScope): boolean {
    let keys = 0;
    let choice: CompiledElement | undefined;
    let choices: CompiledElement[] | undefined;
    for (const key in object) {
      keys++;
      const field = type.fields.get(key);
      if (field === undefined) {
        if (key === 'resourceType' && type.resource) continue;
        return false;
      }
      if (field.undecided) return false;
      const element = field.element;
      if (element.choice) {
        // Two keys of one choice element (valueString and valueInteger) is a warning.
        if (choice === undefined) choice = element;
        else if (choice === element || choices?.includes(element)) return false;
        else (choices ??= []).push(element);
      }
      const value = object[key];
      if (element.isArray) {
        if (!Array.isArray(value)) return false;
        const n = value.length;
        if (n === 0 || n < element.min || n > element.max) return false;
        for (let i = 0; i < n; i++) if (!checkValue(value[i], field, scope)) return false;
      } else {
        if (Array.isArray(value) || element.max < 1 || element.min > 1) return false;
        if (!checkValue(value, field, scope)) return false;
      }
    }
    if (keys === 0) return false;
    for (const candidates of type.required) {
      let present = false;
      for (const key of candidates) if (object[key] !== undefined) present = true;
      if (!present) return false;
    }
    return true;
  }

  return (resource) => {
    if (typeof resource !== 'object' || resource === null || Array.isArray(resource)) return false;
    const object = resource as JsonObject;
    const resourceType = object.resourceType;
    const type = typeof resourceType === 'string' ? types.resourceType(resourceType) : undefined;
    if (type === undefined) return false;
    // The reference types the root by a guess (an object with a numeric `value` is a Quantity).
    const root = core.toTypedValue(object);
    if (root.type !== resourceType) return false;
    const scope: InvariantScope = { root, resources: [object] };
    if (!checkObject(object, type, scope)) return false;
    for (const holds of type.invariants) if (!holds(object, resourceType, scope)) return false;
    return true;
  };
}
