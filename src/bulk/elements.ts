import type { FhirResource } from '../storage/types.js';

const SUBSETTED = {
  system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue',
  code: 'SUBSETTED',
  display: 'subsetted',
};

/**
 * The element names `_elements` keeps for `resourceType`, or undefined when no entry applies to it
 * (then the resource is exported whole). Entries are `Type.element` or `element` (any type).
 */
export function elementsFor(resourceType: string, elements: readonly string[]): Set<string> | undefined {
  const kept = new Set<string>();
  for (const entry of elements) {
    const dot = entry.indexOf('.');
    if (dot < 0) kept.add(entry);
    else if (entry.slice(0, dot) === resourceType) kept.add(entry.slice(dot + 1));
  }
  return kept.size > 0 ? kept : undefined;
}

/**
 * Bulk Data `_elements`: keeps `resourceType`, `id`, `meta` and the listed top-level elements, and
 * tags the result `SUBSETTED` so that it is never mistaken for the full resource.
 */
export function projectElements(resource: FhirResource, kept: ReadonlySet<string>): FhirResource {
  const out: FhirResource = { resourceType: resource.resourceType };
  for (const [key, value] of Object.entries(resource)) {
    if (key === 'resourceType' || key === 'meta') continue;
    const base = key.replace(/^_/, '');
    if (
      key === 'id' ||
      kept.has(base) ||
      [...kept].some((k) => k.endsWith('[x]') && base.startsWith(k.slice(0, -3)))
    ) {
      out[key] = value;
    }
  }
  const meta = { ...(resource.meta ?? {}) };
  const tags = Array.isArray(meta.tag) ? [...(meta.tag as unknown[])] : [];
  tags.push(SUBSETTED);
  meta.tag = tags;
  out.meta = meta;
  return out;
}
