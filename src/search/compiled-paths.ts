import type { TypedValue } from '@medplum/core';

/*
 * Most R4 search expressions are plain paths (`Patient.name`, `(Observation.subject)`,
 * `Patient.address.city`, `(Observation.value as Quantity)`, `Observation.value.as(Quantity)`,
 * `valueDateTime | valuePeriod`, `Patient.telecom.where(system='email')`).
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

/** One step of a path: a property name, the choice type an `as` keeps, a `.where(name = 'text')`. */
interface Step {
  name: string;
  as?: string;
  where?: { name: string; value: string };
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
  let where: Step['where'];
  const filter = /\.where\(([A-Za-z]+) ?= ?'([^'\\]*)'\)$/.exec(text);
  if (filter) {
    where = { name: filter[1]!, value: filter[2]! };
    text = text.slice(0, filter.index);
  }
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
  if (names.length === 0)
    return as === undefined && where === undefined ? { ...(root ? { root } : {}), steps: [] } : undefined;
  if (as !== undefined && where !== undefined) return undefined;
  const steps: Step[] = names.map((name) => ({ name }));
  if (as !== undefined) steps[steps.length - 1]!.as = as;
  if (where !== undefined) steps[steps.length - 1]!.where = where;
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
  // A union of plain paths (`valueDateTime | valuePeriod`): each walked, in order.
  if (expression.includes('|')) {
    const paths = expression.split('|').map((part) => compileOne(part, rooted, choiceTypes));
    if (paths.some((path) => !path)) return undefined;
    return (input) => {
      const out: unknown[] = [];
      for (const path of paths) {
        const values = path!(input);
        if (!values) return undefined;
        out.push(...values);
      }
      return out;
    };
  }
  return compileOne(expression, rooted, choiceTypes);
}

function compileOne(
  expression: string,
  rooted: boolean,
  choiceTypes: readonly string[],
): CompiledPath | undefined {
  const parsed = parsePath(expression, rooted);
  if (!parsed) return undefined;
  const { root, steps } = parsed;
  // Choice suffix (`DateTime`) -> its place in `choiceTypes`: the first present in that order wins.
  const order = new Map(choiceTypes.map((t, i) => [t.charAt(0).toUpperCase() + t.slice(1), i]));
  return (input) => {
    if (root !== undefined && (input as { resourceType?: unknown } | null)?.resourceType !== root) return [];
    let nodes: unknown[] = [input];
    for (const { name, as, where } of steps) {
      const next: unknown[] = [];
      for (const node of nodes) {
        if (!node || typeof node !== 'object') continue;
        const object = node as Record<string, unknown>;
        let value: unknown;
        if (name in object) {
          if (as !== undefined) return undefined;
          value = object[name];
        } else {
          // The element's own keys (a few), not every choice name (dozens) per absent property.
          let at = -1;
          let found = '';
          for (const key in object) {
            if (key.length <= name.length || !key.startsWith(name)) continue;
            const place = order.get(key.slice(name.length));
            if (place !== undefined && (at === -1 || place < at)) [at, found] = [place, key];
          }
          if (at === -1 || (as !== undefined && choiceTypes[at] !== as)) continue;
          value = object[found];
        }
        if (Array.isArray(value)) {
          for (const item of value) if (item !== null && item !== undefined) next.push(item);
        } else if (value !== null && value !== undefined) next.push(value);
      }
      // FHIRPath `=` on a string: equal text; an absent or repeated element never is.
      nodes = where
        ? next.filter((node) => {
            const value = (node as Record<string, unknown> | null)?.[where.name];
            return Array.isArray(value)
              ? value.length === 1 && value[0] === where.value
              : value === where.value;
          })
        : next;
    }
    return nodes;
  };
}

/** The walked values as the typed values `convert` takes (typed by the schema's single type). */
export function typedValues(values: readonly unknown[], valueTypes: readonly string[]): TypedValue[] {
  const type = valueTypes.length === 1 ? valueTypes[0]! : 'unknown';
  return values.map((value) => ({ type, value }));
}
