import type { InternalSchemaElement, InternalTypeSchema } from '@medplum/core';
import { compileInvariant, SKIPPED_INVARIANTS, type ElementKeys, type InvariantCheck } from './invariants.js';
import type { MedplumCore } from './medplum-r4.js';

/** The checks of a primitive value: its JSON type, then its lexical form. */
export interface PrimitiveRule {
  readonly jsType: 'string' | 'number' | 'boolean';
  readonly regex: RegExp | undefined;
  readonly integer: boolean;
  /** positiveInt: > 0. */
  readonly positive: boolean;
  /** unsignedInt: >= 0. */
  readonly unsigned: boolean;
}

/** The resource types a `Reference` element may point to: `any`, or those listed. */
export interface ReferenceTargets {
  readonly any: boolean;
  readonly types: ReadonlySet<string>;
}

/** One element of a type (a choice element `value[x]` is one element with several JSON keys). */
export interface CompiledElement {
  readonly min: number;
  readonly max: number;
  readonly isArray: boolean;
  readonly choice: boolean;
  /** The element's invariants, evaluated on each of its values. */
  readonly invariants: readonly InvariantCheck[];
}

/** One JSON key of a type: its element and the FHIR type of the value under this key. */
export interface CompiledField {
  readonly element: CompiledElement;
  /** The FHIR type code (`string`, `CodeableConcept`, `ObservationComponent`, `Resource`, …). */
  readonly code: string;
  readonly primitive: PrimitiveRule | undefined;
  /** A `Resource` element (`contained`, `Bundle.entry.resource`): typed by the value's `resourceType`. */
  readonly resource: boolean;
  readonly reference: ReferenceTargets | undefined;
  /**
   * The fast path does not decide values of this key: the element has a fixed value, a pattern or
   * slices, or the key is also read as a choice element's (`amountType` next to `amount[x]`).
   */
  readonly undecided: boolean;
  /** The compiled type of a complex (not `Resource`) value, filled in on first use. */
  target?: CompiledType;
}

/** A complex type or resource, compiled from the `@medplum/core` schema its validator walks. */
export interface CompiledType {
  readonly name: string;
  /** A concrete resource type (not `Resource` / `DomainResource`). */
  readonly resource: boolean;
  /** Every JSON key the type accepts (a choice element once per type: `valueString`, `valueQuantity`, …). */
  readonly fields: ReadonlyMap<string, CompiledField>;
  /** The JSON keys of each element with a minimum cardinality above 0. */
  readonly required: readonly (readonly string[])[];
  /** The type's own invariants (the validator evaluates them on the validated resource only). */
  readonly invariants: readonly InvariantCheck[];
}

const HL7_TYPES = 'http://hl7.org/fhir/StructureDefinition/';
const MEDPLUM_TYPES = 'https://medplum.com/fhir/StructureDefinition/';

const capitalize = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

/**
 * The choice element `x[x]` the reference validator reads a JSON key as: it tries the key's prefixes
 * ending before each capital letter, shortest first (`amountType` → `amount[x]`).
 */
function choiceElementOf(key: string, elements: Record<string, unknown>): string | undefined {
  const name = key.startsWith('_') ? key.slice(1) : key;
  for (let i = 1; i <= name.length; i++) {
    if (i < name.length && !/[A-Z]/.test(name.charAt(i))) continue;
    const candidate = `${name.slice(0, i)}[x]`;
    if (Object.hasOwn(elements, candidate)) return candidate;
  }
  return undefined;
}

/** The JSON keys of each element of `schema`. */
function elementKeys(schema: InternalTypeSchema): ElementKeys {
  return {
    keysOf(name) {
      const plain = Object.hasOwn(schema.elements, name) ? schema.elements[name] : undefined;
      if (plain) return [name];
      const choice = Object.hasOwn(schema.elements, `${name}[x]`) ? schema.elements[`${name}[x]`] : undefined;
      return choice?.type.map((t) => name + capitalize(t.code));
    },
  };
}

/** The reference validator's rule: a target profile of `Resource`, of the type, or one it does not know. */
function referenceTargets(profiles: readonly string[] | undefined): ReferenceTargets {
  if (profiles === undefined) return { any: true, types: new Set() };
  const types = new Set<string>();
  let any = false;
  for (const profile of profiles) {
    const base = profile.startsWith(HL7_TYPES)
      ? HL7_TYPES
      : profile.startsWith(MEDPLUM_TYPES)
        ? MEDPLUM_TYPES
        : '';
    if (base === '' || profile === `${HL7_TYPES}Resource`) any = true;
    else types.add(profile.slice(base.length));
  }
  return { any, types };
}

/**
 * Compiles the `@medplum/core` type schemas (parsed from the R4 StructureDefinitions) into per-key
 * lookups, one type at a time on first use, and caches them. One compiler per validator.
 */
export class TypeCompiler {
  readonly #core: MedplumCore;
  readonly #types = new Map<string, CompiledType | null>();
  readonly #primitives = new Map<string, PrimitiveRule | null>();

  constructor(core: MedplumCore) {
    this.#core = core;
  }

  /** The compiled complex type or resource `name`, or undefined when the index does not know it. */
  type(name: string): CompiledType | undefined {
    let compiled = this.#types.get(name);
    if (compiled === undefined) {
      const schema = this.#core.tryGetDataType(name);
      compiled = schema && !Object.hasOwn(this.#core.fhirTypeToJsType, name) ? this.#compile(schema) : null;
      this.#types.set(name, compiled);
    }
    return compiled ?? undefined;
  }

  /** The compiled resource type `name` when it is a concrete R4 resource type. */
  resourceType(name: string): CompiledType | undefined {
    const type = this.type(name);
    return type?.resource ? type : undefined;
  }

  #primitive(code: string): PrimitiveRule | undefined {
    let rule = this.#primitives.get(code);
    if (rule === undefined) {
      const jsTypes = this.#core.fhirTypeToJsType as Record<string, 'string' | 'number' | 'boolean'>;
      const jsType = Object.hasOwn(jsTypes, code) ? jsTypes[code] : undefined;
      const regexes = this.#core.validationRegexes;
      const regex = Object.hasOwn(regexes, code) ? regexes[code] : undefined;
      rule =
        jsType === undefined
          ? null
          : {
              jsType,
              // A global or sticky regex would carry lastIndex from one value to the next.
              regex:
                regex && (regex.global || regex.sticky)
                  ? new RegExp(regex.source, regex.flags.replace(/[gy]/g, ''))
                  : regex,
              integer: code === 'integer' || code === 'positiveInt' || code === 'unsignedInt',
              positive: code === 'positiveInt',
              unsigned: code === 'unsignedInt',
            };
      this.#primitives.set(code, rule);
    }
    return rule ?? undefined;
  }

  #compile(schema: InternalTypeSchema): CompiledType {
    const fields = new Map<string, CompiledField>();
    const required: string[][] = [];
    const clashes = new Set<string>();
    for (const [name, element] of Object.entries(schema.elements)) {
      const choice = name.endsWith('[x]');
      const base = choice ? name.slice(0, -3) : name;
      const lastSegment = element.path.slice(element.path.lastIndexOf('.') + 1);
      const decided =
        !element.fixed &&
        !element.pattern &&
        !element.slicing &&
        lastSegment === name &&
        (choice || element.type.length === 1);
      const compiled: CompiledElement = {
        min: element.min,
        max: element.max,
        isArray: element.isArray === true,
        choice,
        invariants: this.#invariants(element),
      };
      const keys: string[] = [];
      for (const type of element.type) {
        const key = choice ? base + capitalize(type.code) : name;
        if (fields.has(key)) clashes.add(key);
        keys.push(key);
        fields.set(key, {
          element: compiled,
          code: type.code,
          primitive: this.#primitive(type.code),
          resource: type.code === 'Resource',
          reference:
            type.code === 'Reference'
              ? referenceTargets(element.type.find((t) => t.code === 'Reference')?.targetProfile)
              : undefined,
          undecided: !decided || choiceElementOf(key, schema.elements) !== (choice ? name : undefined),
        });
      }
      if (element.min > 0) required.push(keys);
    }
    for (const key of clashes) fields.set(key, { ...fields.get(key)!, undecided: true });
    const keys = elementKeys(schema);
    return {
      name: schema.name,
      resource: this.#core.isResourceTypeSchema(schema),
      fields,
      required,
      invariants: (schema.constraints ?? [])
        .filter((c) => c.severity === 'error' && !SKIPPED_INVARIANTS.has(c.key))
        .map((c) => compileInvariant(this.#core, c, keys)),
    };
  }

  #invariants(element: InternalSchemaElement): InvariantCheck[] {
    const constraints = (element.constraints ?? []).filter(
      (c) => c.severity === 'error' && !SKIPPED_INVARIANTS.has(c.key),
    );
    if (constraints.length === 0) return [];
    // Native checks read the keys of the value's type; a choice of several types gets the engine.
    const only = element.type.length === 1 ? element.type[0]!.code : undefined;
    const schema =
      only && only !== 'Resource' && !Object.hasOwn(this.#core.fhirTypeToJsType, only)
        ? this.#core.tryGetDataType(only)
        : undefined;
    const keys = schema ? elementKeys(schema) : undefined;
    return constraints.map((c) => compileInvariant(this.#core, c, keys));
  }
}
