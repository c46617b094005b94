import { elementsFor, projectElements, type ElementSelection } from '../../search/elements.js';
import { loadElementTables } from '../../search/element-tables.js';
import type { SearchRequest } from '../../storage/search-request.js';
import type { FhirResource } from '../../storage/types.js';

/** How a search entry is rendered: its resource, whole or subsetted. */
export type EntrySubsetter = (resource: FhirResource, mode: 'match' | 'include') => FhirResource;

/**
 * What `_summary` (`true`, `text`, `data`) and `_elements` keep of the resources of a searchset;
 * undefined when the resources go whole. Every subsetted resource keeps `resourceType`, `id`,
 * `meta` and its type's mandatory elements, and carries the `SUBSETTED` tag (`system` and `code`
 * only). `_summary=true` keeps the elements the R4 definitions mark `isSummary`; `text` keeps
 * `text`; `data` drops `text`; these apply to included resources too. `_elements` names elements of
 * the searched type, so it applies to the matches only (an included Patient keeps what a Patient
 * has, not what an Observation search named).
 * @see https://hl7.org/fhir/R4/search.html#summary
 * @see https://hl7.org/fhir/R4/search.html#elements
 */
export async function entrySubsetter(request: SearchRequest): Promise<EntrySubsetter | undefined> {
  const { summary, elements } = request;
  const summarized = summary === 'true' || summary === 'text' || summary === 'data';
  if (!summarized && !elements) return undefined;
  if (summary === 'data') {
    return (resource) => {
      // By base name: a primitive's `_name` extension goes with it.
      const names = new Set(Object.keys(resource).map((key) => (key.startsWith('_') ? key.slice(1) : key)));
      names.delete('text');
      return projectElements(resource, { names, choices: [] });
    };
  }
  const tables = await loadElementTables();
  const selections = new Map<string, ElementSelection>();
  const selectionOf = (type: string, names: () => readonly string[]): ElementSelection => {
    let selection = selections.get(type);
    if (!selection) {
      selection = elementsFor(type, names(), tables.mandatory.get(type));
      selections.set(type, selection);
    }
    return selection;
  };
  if (summary === 'true' || summary === 'text') {
    const names = (type: string): readonly string[] =>
      summary === 'text' ? ['text'] : (tables.summary.get(type) ?? []);
    return (resource) =>
      projectElements(
        resource,
        selectionOf(resource.resourceType, () => names(resource.resourceType)),
      );
  }
  const named = elements ?? [];
  return (resource, mode) =>
    mode === 'match'
      ? projectElements(
          resource,
          selectionOf(resource.resourceType, () => named),
        )
      : resource;
}
