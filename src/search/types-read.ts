import { assertNever } from '../storage/assert-never.js';
import type { SearchFilter } from '../storage/search-request.js';

/**
 * The resource types a search's filters read besides the searched type, at every depth, each once
 * in the order first met: every target type a chain may follow (`subject.name` tries each target
 * of `subject` that defines `name`) and the referencing type of every `_has`. What an authorization
 * check must cover before the search runs, whichever store answers it: a search through a type
 * answers yes/no questions about that type's resources.
 *
 * Exhaustive over the filter kinds: a new kind does not compile until it says what it reads.
 * @see https://hl7.org/fhir/R4/search.html#chaining
 */
export function typesReadByFilters(filters: readonly SearchFilter[]): string[] {
  const types = new Set<string>();
  const visit = (filter: SearchFilter): void => {
    switch (filter.kind) {
      case 'parameter':
        return;
      case 'chain':
        for (const type of filter.targetTypes) types.add(type);
        visit(filter.filter);
        return;
      case 'has':
        types.add(filter.resourceType);
        visit(filter.filter);
        return;
      default:
        assertNever(filter);
    }
  };
  for (const filter of filters) visit(filter);
  return [...types];
}
