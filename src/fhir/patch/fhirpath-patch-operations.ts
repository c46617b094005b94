/**
 * The operations of a FHIRPath Patch `Parameters` resource, read and checked (a 400 for a malformed
 * one) before any is applied (fhirpath-patch.ts).
 * @see https://hl7.org/fhir/R4/fhirpatch.html
 */
import { FhirError } from '../../http/http-error.js';
import type { FhirResource } from '../../storage/types.js';

export type OperationType = 'add' | 'insert' | 'delete' | 'replace' | 'move';

/** One `operation` parameter, read and checked. */
export interface PatchOperation {
  /** Its position in `Parameters.parameter`, for error expressions. */
  at: number;
  type: OperationType;
  path: string;
  name?: string;
  value?: unknown;
  /** The type part of the value's `value[x]` name (`Boolean` of `valueBoolean`); a choice element takes it. */
  valueType?: string;
  index?: number;
  source?: number;
  destination?: number;
}

const REQUIRED: Record<OperationType, readonly (keyof PatchOperation)[]> = {
  add: ['path', 'name', 'value'],
  insert: ['path', 'index', 'value'],
  delete: ['path'],
  replace: ['path', 'value'],
  move: ['path', 'source', 'destination'],
};

/**
 * Longest FHIRPath of an operation. Parsing and locating recurse once per step, so a path of
 * thousands of steps would overflow the stack; real ones are a few dozen characters.
 */
const MAX_PATH_LENGTH = 1000;

/** An element name a patch may write: FHIR's syntax, and never a property every object inherits. */
function isElementName(name: string): boolean {
  return /^[a-z][A-Za-z0-9]{0,63}$/.test(name) && !(name in Object.prototype);
}

export function malformed(at: number | undefined, message: string): FhirError {
  return new FhirError(400, 'invalid', `FHIRPath Patch: ${message}`, {
    expression: [at === undefined ? 'Parameters' : `Parameters.parameter[${at}]`],
  });
}

export const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** Sets an own property (never a setter or the prototype, whatever the key). */
export function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** The `value[x]` of a parameter or part: its value and type suffix; undefined when it has none. */
function valueOf(part: Record<string, unknown>): { value: unknown; type: string } | undefined {
  for (const key of Object.keys(part)) {
    if (key.length > 5 && key.startsWith('value') && /^[A-Z]/.test(key.slice(5))) {
      return { value: part[key], type: key.slice(5) };
    }
  }
  return undefined;
}

/** The value of nested `part`s (an element of a BackboneElement type): an object, repeated names as lists. */
function valueOfParts(at: number, parts: unknown, depth = 0): Record<string, unknown> {
  if (!Array.isArray(parts) || depth > 32) throw malformed(at, 'value parts must be a list');
  const out: Record<string, unknown> = {};
  for (const part of parts) {
    if (!isObject(part) || typeof part.name !== 'string' || !isElementName(part.name)) {
      throw malformed(at, 'each value part needs an element name');
    }
    const value =
      valueOf(part)?.value ?? (part.part !== undefined ? valueOfParts(at, part.part, depth + 1) : undefined);
    if (value === undefined) throw malformed(at, `value part ${part.name} has no value`);
    const current = Object.hasOwn(out, part.name) ? out[part.name] : undefined;
    if (current === undefined) setOwn(out, part.name, value);
    else
      setOwn(out, part.name, Array.isArray(current) ? [...(current as unknown[]), value] : [current, value]);
  }
  return out;
}

function integerPart(at: number, part: Record<string, unknown>, name: string): number {
  const value = part.valueInteger;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw malformed(at, `${name} must be a valueInteger of 0 or more`);
  }
  return value;
}

/** Reads the operations of a FHIRPath Patch `Parameters` resource (400 when malformed). */
export function parseFhirPathPatch(parameters: FhirResource): PatchOperation[] {
  const list = parameters.parameter ?? [];
  if (!Array.isArray(list)) throw malformed(undefined, 'Parameters.parameter must be a list');
  return list.map((raw, at): PatchOperation => {
    if (!isObject(raw) || raw.name !== 'operation' || !Array.isArray(raw.part)) {
      throw malformed(at, 'each parameter must be an operation with parts');
    }
    const op: Partial<PatchOperation> = { at };
    for (const part of raw.part as unknown[]) {
      if (!isObject(part) || typeof part.name !== 'string') throw malformed(at, 'each part needs a name');
      switch (part.name) {
        case 'type':
          if (!['add', 'insert', 'delete', 'replace', 'move'].includes(part.valueCode as string)) {
            throw malformed(at, 'type must be add, insert, delete, replace or move');
          }
          op.type = part.valueCode as OperationType;
          break;
        case 'path':
          if (typeof part.valueString !== 'string' || part.valueString === '') {
            throw malformed(at, 'path must be a valueString');
          }
          if (part.valueString.length > MAX_PATH_LENGTH) {
            throw malformed(at, `path is longer than ${MAX_PATH_LENGTH} characters`);
          }
          op.path = part.valueString;
          break;
        case 'name':
          if (typeof part.valueString !== 'string' || !isElementName(part.valueString)) {
            throw malformed(at, 'name must be a valueString naming an element');
          }
          op.name = part.valueString;
          break;
        case 'value': {
          const value = valueOf(part);
          if (value) {
            op.value = value.value;
            op.valueType = value.type;
          } else if (part.part !== undefined) op.value = valueOfParts(at, part.part);
          else throw malformed(at, 'value needs a value[x] or parts');
          break;
        }
        case 'index':
        case 'source':
        case 'destination':
          op[part.name] = integerPart(at, part, part.name);
          break;
        default:
          throw malformed(at, `unknown part ${part.name}`);
      }
    }
    if (op.type === undefined) throw malformed(at, 'an operation needs a type');
    for (const name of REQUIRED[op.type]) {
      if (op[name] === undefined) throw malformed(at, `${op.type} needs ${name}`);
    }
    return op as PatchOperation;
  });
}
