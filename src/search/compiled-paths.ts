import type { TypedValue } from '@medplum/core';

/*
 * Most R4 search expressions are plain paths (`Patient.name`, `(Observation.subject)`,
 * `Patient.address.city`, `(Observation.value as Quantity)`, `Observation.value.as(Quantity)`).
 * Walking the JSON for those is about a hundred times cheaper than the FHIRPath interpreter, and
 * indexing runs on every write. The walk reproduces what `@medplum/core`'s evaluator does on
 * plain JSON (without StructureDefinitions loaded): a property present is taken as is (each item
 * of an array, `null`s left out); a property absent is
 * looked up as a choice, `name` + each FHIR type name in `@medplum/core`'s `PropertyType` order,
 * the first present one winning. Anything else (`where`, `exists`, `[0]`, functions, `%resource`)
 * stays with the interpreter, and so does a resource on which a walk cannot be sure (an `as` on a
 * property present under its plain name). test/search/compiled-paths.test.ts checks that both
 * agree on every parameter over Synthea and generated resources.
 */

/** One step of a path: a property name, and the choice type an `as` keeps. */
interface Step {
  name: string;
  as?: string;
}

/**
 * A compiled path: the values it selects from `input` (flattened, in document order), or
 * undefined when the interpreter must decide for this input.
 */
export type CompiledPath = (input: unknown) => unknown[] | undefined;

const NAME = /^[A-Za-z][A-Za-z0-9]*$/;

/** The steps of a plain path expression, with its root type when rooted; undefined otherwise. */
function parsePath(expression: string, rooted: boolean): { root?: string; steps: Step[] } | undefined {
  let text = expression.trim();
  if (text.startsWith('(') && text.endsWith(')') && !text.slice(1, -1).includes('('))
    text = text.slice(1, -1).trim();
  let as: string | undefined;
  const infix = / as ([A-Za-z]+)$/.exec(text);
  const call = /\.as\(([A-Za-z]+)\)$/.exec(text);
  if (infix) {
    as = infix[1];
    text = text.slice(0, infix.index).trim();
  } else if (call) {
    as = call[1];
    text = text.slice(0, call.index);
  }
  const names = text.split('.');
  if (!names.every((n) => NAME.test(n))) return undefined;
  const root = rooted ? names.shift() : undefined;
  if (names.length === 0) return as === undefined ? { ...(root ? { root } : {}), steps: [] } : undefined;
  const steps: Step[] = names.map((name) => ({ name }));
  if (as !== undefined) steps[steps.length - 1]!.as = as;
  return { ...(root ? { root } : {}), steps };
}

/**
 * Compiles `expression` (rooted at a resource type when `rooted`, else relative to the element it
 * is evaluated on) into a JSON walk, or answers undefined when it is not a plain path.
 * `choiceTypes`: `@medplum/core`'s `PropertyType` values, in order.
 */
export function compilePath(
  expression: string,
  rooted: boolean,
  choiceTypes: readonly string[],
): CompiledPath | undefined {
  const parsed = parsePath(expression, rooted);
  if (!parsed) return undefined;
  const { root, steps } = parsed;
  const suffixes = choiceTypes.map((t) => t.charAt(0).toUpperCase() + t.slice(1));
  return (input) => {
    if (root !== undefined && (input as { resourceType?: unknown } | null)?.resourceType !== root) return [];
    let nodes: unknown[] = [input];
    for (const { name, as } of steps) {
      const next: unknown[] = [];
      for (const node of nodes) {
        if (!node || typeof node !== 'object') continue;
        const object = node as Record<string, unknown>;
        let value: unknown;
        if (name in object) {
          if (as !== undefined) return undefined;
          value = object[name];
        } else {
          const at = suffixes.findIndex((suffix) => `${name}${suffix}` in object);
          if (at === -1 || (as !== undefined && choiceTypes[at] !== as)) continue;
          value = object[`${name}${suffixes[at]!}`];
        }
        if (Array.isArray(value)) {
          for (const item of value) if (item !== null && item !== undefined) next.push(item);
        } else if (value !== null && value !== undefined) next.push(value);
      }
      nodes = next;
    }
    return nodes;
  };
}

/** The walked values as the typed values `convert` takes (typed by the schema's single type). */
export function typedValues(values: readonly unknown[], valueTypes: readonly string[]): TypedValue[] {
  const type = valueTypes.length === 1 ? valueTypes[0]! : 'unknown';
  return values.map((value) => ({ type, value }));
}
