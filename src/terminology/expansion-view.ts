import { randomUUID } from 'node:crypto';
import type { FhirResource } from '../storage/types.js';
import { findConcept } from './code-system-index.js';
import type { ComposeResult } from './expansion.js';
import type { TerminologyResolver } from './terminology-scope.js';
import type { ExpandOptions, Expansion, SystemCode } from './terminology-types.js';

/*
 * What `$expand` answers from a value set's codes: the text filter, `activeOnly`, the page, and the
 * value set with its `expansion` element (parameters echoed, `used-codesystem` named).
 * @see https://hl7.org/fhir/R4/valueset-operation-expand.html
 */

/** The codes `options` select (text filter, active only), before paging. */
export function selectCodes(codes: readonly SystemCode[], options: ExpandOptions): SystemCode[] {
  const words = textWords(options.filter);
  return codes.filter(
    (code) => !(options.activeOnly && code.inactive) && (words.length === 0 || matchesText(code, words)),
  );
}

function textWords(filter: string | undefined): string[] {
  return (filter ?? '').toLowerCase().split(/\s+/).filter(Boolean);
}

/**
 * A code matches the text filter when its code contains the whole filter, or each filter word
 * starts a word of its display (both without case).
 */
function matchesText(code: SystemCode, words: readonly string[]): boolean {
  if (code.code.toLowerCase().includes(words.join(' '))) return true;
  const displayWords = (code.display ?? '').toLowerCase().split(/[^\p{L}\p{N}]+/u);
  return words.every((word) => displayWords.some((d) => d.startsWith(word)));
}

/** The expansion of `valueSet`: `selected` paged by `options`, in the resource and as data. */
export function buildExpansion(
  valueSet: FhirResource,
  composed: ComposeResult,
  selected: readonly SystemCode[],
  options: ExpandOptions,
  resolver: TerminologyResolver,
): Expansion {
  const offset = Math.max(0, options.offset ?? 0);
  const end = options.count === undefined ? undefined : offset + Math.max(0, options.count);
  const contains = selected.slice(offset, end);
  const { expansion: stored, text, ...definition } = valueSet;
  void stored;
  void text;
  const resource: FhirResource = {
    ...definition,
    expansion: {
      identifier: `urn:uuid:${randomUUID()}`,
      timestamp: new Date().toISOString(),
      total: selected.length,
      offset,
      parameter: echoedParameters(options, composed),
      ...(contains.length > 0
        ? { contains: contains.map((code) => containsEntry(code, options, resolver)) }
        : {}),
    },
  };
  return {
    ...(typeof valueSet.url === 'string' ? { url: valueSet.url } : {}),
    ...(typeof valueSet.version === 'string' ? { version: valueSet.version } : {}),
    total: selected.length,
    offset,
    contains,
    resource,
  };
}

function echoedParameters(options: ExpandOptions, composed: ComposeResult): Record<string, unknown>[] {
  const parameters: Record<string, unknown>[] = [];
  if (options.filter !== undefined) parameters.push({ name: 'filter', valueString: options.filter });
  if (options.offset !== undefined) parameters.push({ name: 'offset', valueInteger: options.offset });
  if (options.count !== undefined) parameters.push({ name: 'count', valueInteger: options.count });
  if (options.activeOnly !== undefined)
    parameters.push({ name: 'activeOnly', valueBoolean: options.activeOnly });
  if (options.includeDesignations !== undefined) {
    parameters.push({ name: 'includeDesignations', valueBoolean: options.includeDesignations });
  }
  for (const used of composed.usedSystems) {
    parameters.push({ name: 'used-codesystem', valueUri: used.endsWith('|') ? used.slice(0, -1) : used });
  }
  return parameters;
}

function containsEntry(
  code: SystemCode,
  options: ExpandOptions,
  resolver: TerminologyResolver,
): Record<string, unknown> {
  const entry: Record<string, unknown> = { ...code };
  if (options.includeDesignations) {
    const system = resolver.codeSystem(code.system, code.version);
    const designations = system ? findConcept(system, code.code)?.designations : undefined;
    if (designations) entry.designation = designations;
  }
  return entry;
}
