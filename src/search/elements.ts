import type { FhirResource } from '../storage/types.js';

const SUBSETTED_SYSTEM = 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue';
// `system` and `code` only, as in the Bulk Data IG's examples: conformance kits compare the tag
// exactly (smart-on-fhir/bdt fails on an added `display`).
const SUBSETTED = { system: SUBSETTED_SYSTEM, code: 'SUBSETTED' };

/** What `_elements` keeps of the resources of one type. */
export interface ElementSelection {
  /** Top-level element names kept (besides `resourceType`, `id` and `meta`, always kept). */
  names: ReadonlySet<string>;
  /** Choice elements by their stem (`value` for `value[x]`): every `valueXxx` is kept. */
  choices: readonly string[];
}

/**
 * What Bulk Data 2.0.0 `_elements` (and FHIR search's `_elements`, `_summary`) keeps of a resource of `resourceType`: the unqualified entries
 * (`status`), the entries qualified with this type (`Observation.code`) and the type's mandatory
 * elements (`mandatory`, min cardinality ≥ 1). Every type gets a selection: the IG asks the server
 * to "omit unlisted, non-mandatory elements from the resources returned", so a type no entry
 * names keeps its mandatory elements only.
 */
export function elementsFor(
  resourceType: string,
  elements: readonly string[],
  mandatory: readonly string[] = [],
): ElementSelection {
  const names = new Set<string>();
  const choices: string[] = [];
  const add = (name: string): void => {
    if (!name.endsWith('[x]')) names.add(name);
    else if (!choices.includes(name.slice(0, -3))) choices.push(name.slice(0, -3));
  };
  for (const entry of elements) {
    const dot = entry.indexOf('.');
    if (dot < 0) add(entry);
    else if (entry.slice(0, dot) === resourceType) add(entry.slice(dot + 1));
  }
  for (const name of mandatory) add(name);
  return { names, choices };
}

/** True when `name` is `stem` followed by a type name (`valueQuantity` for `value`). */
function isChoiceOf(name: string, stem: string): boolean {
  if (name.length <= stem.length || !name.startsWith(stem)) return false;
  const next = name.charCodeAt(stem.length);
  return next >= 65 && next <= 90; // A-Z
}

/**
 * Bulk Data and FHIR search `_elements`: keeps `resourceType`, `id`, `meta` and the selected top-level elements
 * (with their `_element` primitive extensions), and adds the `SUBSETTED` tag to `meta.tag` (after
 * the existing tags, once) so that the result is never mistaken for the full resource.
 */
export function projectElements(resource: FhirResource, selection: ElementSelection): FhirResource {
  const meta = { ...(resource.meta ?? {}) };
  const tags: unknown[] = Array.isArray(meta.tag) ? [...(meta.tag as unknown[])] : [];
  const tagged = tags.some((tag) => {
    const t = tag as { system?: unknown; code?: unknown } | null;
    return t?.system === SUBSETTED_SYSTEM && t.code === 'SUBSETTED';
  });
  if (!tagged) tags.push(SUBSETTED);
  meta.tag = tags;

  const out: FhirResource = { resourceType: resource.resourceType };
  for (const [key, value] of Object.entries(resource)) {
    if (key === 'resourceType') continue;
    if (key === 'meta') {
      out.meta = meta; // where it was (stored resources have it right after id)
      continue;
    }
    const base = key.charCodeAt(0) === 95 /* _ */ ? key.slice(1) : key;
    if (
      base === 'id' ||
      selection.names.has(base) ||
      (selection.choices.length > 0 && selection.choices.some((stem) => isChoiceOf(base, stem)))
    ) {
      out[key] = value;
    }
  }
  out.meta ??= meta;
  return out;
}
