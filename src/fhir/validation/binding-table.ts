import type { InternalSchemaElement, InternalTypeSchema } from '@medplum/core';
import type { MedplumCore } from './medplum-r4.js';

/** The strengths a binding check acts on (`example` bindings are left out of the table). */
export type BindingStrength = 'required' | 'extensible' | 'preferred';

/** How a coded value is read: its code, and its system when it carries one. */
export type CodedKind = 'code' | 'Coding' | 'CodeableConcept' | 'Quantity';

/** A bound element's binding: its strength and value set (canonical URL, without `|version`). */
export interface Binding {
  readonly strength: BindingStrength;
  readonly valueSet: string;
}

/**
 * One JSON key of a type worth walking: a coded value with its binding, a complex value whose type
 * has coded elements somewhere below, or a resource (`contained`, `Bundle.entry.resource`), walked
 * by its own `resourceType`.
 */
export interface BoundField {
  /** The FHIRPath step of the key (`gender`, `value.ofType(Quantity)` for `valueQuantity`). */
  readonly step: string;
  /** A coded value checked against `binding`. */
  readonly binding?: Binding;
  readonly kind?: CodedKind;
  /** A complex type to walk into (its own bound fields), by name. */
  readonly walk?: string;
  /** A `Resource` element: walked by the value's `resourceType`. */
  readonly resource?: boolean;
}

/** The keys of a type worth walking, by JSON key; empty when nothing below it is bound. */
export type BoundFields = ReadonlyMap<string, BoundField>;

const CODED_KINDS: Readonly<Record<string, CodedKind>> = {
  code: 'code',
  string: 'code',
  uri: 'code',
  Coding: 'Coding',
  CodeableConcept: 'CodeableConcept',
  Quantity: 'Quantity',
};

/**
 * Extensions are defined by their own StructureDefinitions, not the base ones: their values are
 * left to those. Walking them would also mean walking every complex value (every one may have some).
 */
const UNWALKED = new Set(['extension', 'modifierExtension']);

const capitalize = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

function bindingOf(element: InternalSchemaElement): Binding | undefined {
  const binding = element.binding as { strength?: string; valueSet?: string } | undefined;
  const strength = binding?.strength;
  const valueSet = binding?.valueSet;
  if (strength !== 'required' && strength !== 'extensible' && strength !== 'preferred') return undefined;
  if (!valueSet) return undefined;
  const bar = valueSet.indexOf('|');
  return { strength, valueSet: bar === -1 ? valueSet : valueSet.slice(0, bar) };
}

/**
 * The bound elements of the R4 types, compiled once per type from the `@medplum/core` schemas
 * parsed from the R4 StructureDefinitions (the snapshots of resources and of the data types they
 * use): for each type, the JSON keys to follow to reach every coded value under a binding of
 * strength `required`, `extensible` or `preferred` (elements of type `code`, `Coding`,
 * `CodeableConcept`, `Quantity`, and `string`/`uri` with a binding). A walk along them costs per
 * coded value, not per element. Extensions are not walked.
 * @see https://hl7.org/fhir/R4/terminologies.html#binding
 */
export class BindingTable {
  readonly #core: MedplumCore;
  readonly #types = new Map<string, BoundFields>();
  /** Types being compiled: a recursive type (`Extension`, `QuestionnaireItem`) is assumed worth walking. */
  readonly #compiling = new Set<string>();

  constructor(core: MedplumCore) {
    this.#core = core;
  }

  /** The bound fields of type `name` (a resource, a data type or a backbone element's type). */
  fields(name: string): BoundFields {
    let fields = this.#types.get(name);
    if (fields === undefined) {
      const schema = this.#isComplex(name) ? this.#core.tryGetDataType(name) : undefined;
      this.#compiling.add(name);
      fields = schema ? this.#compile(schema) : new Map<string, BoundField>();
      this.#compiling.delete(name);
      this.#types.set(name, fields);
    }
    return fields;
  }

  /** True when `name` is a concrete R4 resource type the table knows. */
  isResourceType(name: string): boolean {
    const schema = this.#core.tryGetDataType(name);
    return schema !== undefined && this.#core.isResourceTypeSchema(schema);
  }

  #isComplex(name: string): boolean {
    return !Object.hasOwn(this.#core.fhirTypeToJsType, name);
  }

  #compile(schema: InternalTypeSchema): Map<string, BoundField> {
    const fields = new Map<string, BoundField>();
    for (const [name, element] of Object.entries(schema.elements)) {
      if (UNWALKED.has(name)) continue;
      const choice = name.endsWith('[x]');
      const base = choice ? name.slice(0, -3) : name;
      const binding = bindingOf(element);
      for (const { code } of element.type) {
        const key = choice ? base + capitalize(code) : name;
        const step = choice ? `${base}.ofType(${code})` : name;
        const field = this.#field(step, code, binding);
        if (field) fields.set(key, field);
      }
    }
    return fields;
  }

  #field(step: string, code: string, binding: Binding | undefined): BoundField | undefined {
    const kind = Object.hasOwn(CODED_KINDS, code) ? CODED_KINDS[code] : undefined;
    // A Quantity is walked for its own bound `comparator` whether or not the element is bound.
    const walk = this.#worthWalking(code) ? code : undefined;
    if (binding && kind) return { step, binding, kind, ...(walk ? { walk } : {}) };
    if (code === 'Resource') return { step, resource: true };
    return walk ? { step, walk } : undefined;
  }

  #worthWalking(code: string): boolean {
    if (code === 'Resource' || !this.#isComplex(code)) return false;
    if (this.#compiling.has(code)) return true;
    return this.fields(code).size > 0;
  }
}
