import { FhirError } from '../../http/http-error.js';
import { elementsFor, projectElements } from '../../search/elements.js';
import type { FhirResource } from '../../storage/types.js';
import { loadSummaryTable, summaryElements } from './summary-elements.js';
import type { CapabilityStatementJson } from './capability-statement.js';

/** What `GET metadata` is asked to leave out: `_summary` (`true`, `text`, `data`) or `_elements`. */
export type MetadataSubset =
  { kind: 'summary'; summary: 'true' | 'text' | 'data' } | { kind: 'elements'; names: readonly string[] };

function invalid(parameter: string, message: string): FhirError {
  return new FhirError(400, 'invalid', message, { expression: [parameter] });
}

/** The one value of `name` in `params` (400 when repeated), or undefined. */
function single(params: URLSearchParams, name: string): string | undefined {
  const values = params.getAll(name);
  if (values.length > 1) throw invalid(name, `${name} may be given once`);
  return values[0];
}

/**
 * The subset `GET metadata` asks for in its query string: undefined for the whole statement
 * (neither parameter, or `_summary=false`). 400 for `_summary=count` (a search's), another value,
 * a malformed `_elements`, or both parameters.
 * @see https://hl7.org/fhir/R4/search.html#summary
 * @see https://hl7.org/fhir/R4/search.html#elements
 */
export function parseMetadataSubset(params: URLSearchParams): MetadataSubset | undefined {
  const summary = single(params, '_summary');
  const elements = single(params, '_elements');
  if (summary === 'count') throw invalid('_summary', '_summary=count applies to searches only');
  if (summary !== undefined && !['true', 'text', 'data', 'false'].includes(summary))
    throw invalid('_summary', '_summary must be true, text, data or false');
  const summarized = summary !== undefined && summary !== 'false';
  if (elements !== undefined) {
    if (summarized) throw invalid('_elements', '_elements does not combine with _summary=true, text or data');
    const names = elements
      .split(',')
      .map((n) => n.trim())
      .map((n) => (n.startsWith('CapabilityStatement.') ? n.slice('CapabilityStatement.'.length) : n));
    if (names.some((n) => !/^[a-z][A-Za-z0-9]{0,63}$/.test(n)))
      throw invalid('_elements', '_elements must be a comma-separated list of element names');
    return { kind: 'elements', names };
  }
  return summarized ? { kind: 'summary', summary: summary as 'true' | 'text' | 'data' } : undefined;
}

/**
 * `statement` as `subset` asks, with the `SUBSETTED` tag: `_summary=true` keeps the elements the
 * R4 CapabilityStatement definition marks `isSummary`, at every depth (in `rest.resource`, the
 * type, profiles and operations); `text` keeps `text`, `id`, `meta` and the mandatory elements;
 * `data` leaves out `text`; `_elements` keeps the named top-level elements and the mandatory ones.
 */
export async function subsetStatement(
  statement: CapabilityStatementJson,
  subset: MetadataSubset,
): Promise<FhirResource> {
  const table = await loadSummaryTable('CapabilityStatement');
  const select = (names: readonly string[]) => elementsFor('CapabilityStatement', names, table.mandatory);
  if (subset.kind === 'elements') return projectElements(statement, select(subset.names));
  if (subset.summary === 'text') return projectElements(statement, select(['text']));
  if (subset.summary === 'data') {
    const names = Object.keys(statement).filter((key) => key !== 'text' && key !== '_text');
    return projectElements(statement, select(names));
  }
  // `projectElements` with every top-level name: the `SUBSETTED` tag, placed as elsewhere.
  const summary = summaryElements(statement, table);
  return projectElements(summary, select(Object.keys(summary)));
}
