import type { FhirPathAtom, TypedValue } from '@medplum/core';
import type { MedplumCore } from './medplum-r4.js';

/** A JSON object of a resource being validated. */
export type JsonObject = Record<string, unknown>;

/** Where an invariant is evaluated: the resource validated and the resource the value belongs to. */
export interface InvariantScope {
  /** The validated resource, typed as `@medplum/core` types it. */
  readonly root: TypedValue;
  /** The resources entered so far (the root, then contained / entry resources); the last one is `%resource`. */
  readonly resources: JsonObject[];
}

/**
 * True when the FHIRPath invariant surely holds on `value` (of FHIR type `type`), false when it
 * fails or cannot be evaluated. Only true is trusted: on false the resource goes to the reference
 * validator, which reports the exact issue.
 */
export type InvariantCheck = (value: unknown, type: string, scope: InvariantScope) => boolean;

/**
 * The invariants `@medplum/core`'s validator does not evaluate (it skips them by key): `ele-1`
 * (every element has a value or children, checked structurally), `dom-3` (contained resources are
 * referenced), `org-1` and `sdf-19`. Skipping a key the reference evaluates would let invalid
 * resources through, so this list must not grow beyond the library's.
 */
export const SKIPPED_INVARIANTS: ReadonlySet<string> = new Set(['ele-1', 'dom-3', 'org-1', 'sdf-19']);

/** The element names (JSON keys) of a type, for compiling `name.exists()` terms. */
export interface ElementKeys {
  /** The JSON keys of element `name` (several for a choice element `name[x]`), or undefined. */
  keysOf(name: string): readonly string[] | undefined;
}

const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);
const asArray = (v: unknown): unknown[] => (Array.isArray(v) ? v : v === undefined ? [] : [v]);

/** True when some of `codings` has `system` and one of `codes`. */
function hasCoding(concept: unknown, system: string, codes: readonly string[]): boolean {
  if (!isObject(concept)) return false;
  return asArray(concept.coding).some(
    (c) => isObject(c) && c.system === system && typeof c.code === 'string' && codes.includes(c.code),
  );
}

function anyKey(obj: JsonObject, keys: readonly string[]): boolean {
  for (const key of keys) if (obj[key] !== undefined) return true;
  return false;
}

/** `contained.<path>.empty()` over the contained resources. */
function noContained(resource: JsonObject, has: (contained: JsonObject) => boolean): boolean {
  return asArray(resource.contained).every((c) => !isObject(c) || !has(c));
}

const CONDITION_CLINICAL = 'http://terminology.hl7.org/CodeSystem/condition-clinical';
const CONDITION_VER = 'http://terminology.hl7.org/CodeSystem/condition-ver-status';
const ALLERGY_VER = 'http://terminology.hl7.org/CodeSystem/allergyintolerance-verification';

type Native = (value: unknown) => boolean | undefined;

/** A native check for objects only (anything else goes to the FHIRPath engine). */
const onObject =
  (holds: (v: JsonObject) => boolean | undefined): Native =>
  (v) =>
    isObject(v) ? holds(v) : undefined;

/**
 * Hand-written equivalents of the R4 invariants most resources meet, each for one exact expression
 * (a changed expression goes to the FHIRPath engine instead). They run on values that also pass the
 * structural checks (a resource failing those is re-validated by the reference anyway), where
 * `x.exists()` is "a key of element x is present". Answering undefined defers to the FHIRPath engine.
 */
const NATIVE: Record<
  string,
  { expression: string; compile: (keys: ElementKeys | undefined) => Native | undefined }
> = {
  'ext-1': {
    expression: 'extension.exists() != value.exists()',
    compile: (keys) => {
      const values = keys?.keysOf('value');
      return values && onObject((v) => (v.extension !== undefined) !== anyKey(v, values));
    },
  },
  'dom-2': {
    expression: 'contained.contained.empty()',
    compile: () => onObject((v) => noContained(v, (c) => c.contained !== undefined)),
  },
  'dom-4': {
    expression: 'contained.meta.versionId.empty() and contained.meta.lastUpdated.empty()',
    compile: () =>
      onObject((v) =>
        noContained(
          v,
          (c) => isObject(c.meta) && (c.meta.versionId !== undefined || c.meta.lastUpdated !== undefined),
        ),
      ),
  },
  'dom-5': {
    expression: 'contained.meta.security.empty()',
    compile: () => onObject((v) => noContained(v, (c) => isObject(c.meta) && c.meta.security !== undefined)),
  },
  // `htmlChecks()` is true whatever the input in @medplum/core 4.x.
  'txt-1': { expression: 'htmlChecks()', compile: () => () => true },
  'txt-2': { expression: 'htmlChecks()', compile: () => () => true },
  'obs-7': {
    expression:
      'value.empty() or component.code.where(coding.intersect(%resource.code.coding).exists()).empty()',
    compile: (keys) => {
      const values = keys?.keysOf('value');
      // Only the easy half: without a value or without components it holds.
      return values && onObject((v) => (!anyKey(v, values) || v.component === undefined ? true : undefined));
    },
  },
  'con-4': {
    expression:
      "abatement.empty() or clinicalStatus.coding.where(system='http://terminology.hl7.org/CodeSystem/condition-clinical' and (code='resolved' or code='remission' or code='inactive')).exists()",
    compile: (keys) => {
      const abatement = keys?.keysOf('abatement');
      return (
        abatement &&
        onObject(
          (v) =>
            !anyKey(v, abatement) ||
            hasCoding(v.clinicalStatus, CONDITION_CLINICAL, ['resolved', 'remission', 'inactive']),
        )
      );
    },
  },
  'con-5': {
    expression:
      "verificationStatus.coding.where(system='http://terminology.hl7.org/CodeSystem/condition-ver-status' and code='entered-in-error').empty() or clinicalStatus.empty()",
    compile: () =>
      onObject(
        (v) =>
          v.clinicalStatus === undefined ||
          !hasCoding(v.verificationStatus, CONDITION_VER, ['entered-in-error']),
      ),
  },
  'ait-1': {
    expression:
      "verificationStatus.coding.where(system = 'http://terminology.hl7.org/CodeSystem/allergyintolerance-verification' and code = 'entered-in-error').exists() or clinicalStatus.exists()",
    compile: () =>
      onObject(
        (v) =>
          v.clinicalStatus !== undefined ||
          hasCoding(v.verificationStatus, ALLERGY_VER, ['entered-in-error']),
      ),
  },
  'ait-2': {
    expression:
      "verificationStatus.coding.where(system = 'http://terminology.hl7.org/CodeSystem/allergyintolerance-verification' and code = 'entered-in-error').empty() or clinicalStatus.empty()",
    compile: () =>
      onObject(
        (v) =>
          v.clinicalStatus === undefined ||
          !hasCoding(v.verificationStatus, ALLERGY_VER, ['entered-in-error']),
      ),
  },
  'org-2': { expression: "where(use = 'home').empty()", compile: () => onObject((v) => v.use !== 'home') },
  'org-3': { expression: "where(use = 'home').empty()", compile: () => onObject((v) => v.use !== 'home') },
};

const TERM = /^([A-Za-z]+)\.(exists|empty)\(\)$/;

/**
 * Compiles `a.exists() or b.empty() xor …` (one operator throughout, terms on direct elements of the
 * context type) into a key-presence test; undefined for any other expression. Each term is a
 * definite boolean, so `or` / `and` / `xor` (left to right) are plain boolean logic, as in FHIRPath.
 */
function presenceCheck(expression: string, keys: ElementKeys): Native | undefined {
  const match = /^\S+ (or|and|xor) /.exec(expression);
  const operator = match?.[1];
  const parts = operator ? expression.split(` ${operator} `) : [expression];
  const terms: { keys: readonly string[]; exists: boolean }[] = [];
  for (const part of parts) {
    const term = TERM.exec(part);
    const elementKeys = term ? keys.keysOf(term[1]!) : undefined;
    if (!term || !elementKeys) return undefined;
    terms.push({ keys: elementKeys, exists: term[2] === 'exists' });
  }
  const value = (v: JsonObject, t: { keys: readonly string[]; exists: boolean }) =>
    anyKey(v, t.keys) === t.exists;
  if (operator === undefined || operator === 'or') return onObject((v) => terms.some((t) => value(v, t)));
  if (operator === 'and') return onObject((v) => terms.every((t) => value(v, t)));
  return onObject((v) => terms.reduce((acc, t) => acc !== value(v, t), false));
}

/**
 * Compiles one invariant of an element or type: a native check where one is known for exactly this
 * expression, with the FHIRPath engine of `@medplum/core` (same inputs and variables as its
 * validator) as the fallback. `keys` describes the context type when it is a complex type.
 */
export function compileInvariant(
  core: MedplumCore,
  constraint: { key: string; expression: string },
  keys: ElementKeys | undefined,
): InvariantCheck {
  const entry = NATIVE[constraint.key];
  const native =
    entry && entry.expression === constraint.expression
      ? entry.compile(keys)
      : keys
        ? presenceCheck(constraint.expression, keys)
        : undefined;
  let atom: FhirPathAtom | undefined;
  const engine: InvariantCheck = (value, type, scope) => {
    try {
      atom ??= core.parseFhirPath(constraint.expression);
      const context: TypedValue = { type, value };
      const current = scope.resources[scope.resources.length - 1];
      const variables: Record<string, TypedValue> = {
        '%context': context,
        '%ucum': core.toTypedValue(core.UCUM),
        '%rootResource': scope.root,
      };
      if (current !== undefined) variables['%resource'] = core.toTypedValue(current);
      const result = core.evalFhirPathTyped(atom, [context], variables);
      return result.length === 1 && result[0]?.value === true;
    } catch {
      return false;
    }
  };
  if (native === undefined) return engine;
  return (value, type, scope) => native(value) ?? engine(value, type, scope);
}
