import { RE2JS } from 're2js';
import { closure, propertyText, type CodeSystemIndex, type Concept } from './code-system-index.js';
import { TerminologyError } from './terminology-types.js';

/*
 * The filters of a value set's `compose.include.filter`: each a test of a concept of one code
 * system. The filters of one include all apply (AND).
 * @see https://hl7.org/fhir/R4/valueset-definitions.html#ValueSet.compose.include.filter
 * @see https://hl7.org/fhir/R4/valueset-filter-operator.html
 */

/** One `compose.include.filter` entry. */
export interface ComposeFilter {
  property?: string;
  op?: string;
  value?: string;
}

type ConceptTest = (concept: Concept) => boolean;

/** The concepts of `system` that pass every filter, in the system's order. */
export function filterConcepts(system: CodeSystemIndex, filters: readonly ComposeFilter[]): Concept[] {
  const tests = filters.map((filter) => conceptTest(system, filter));
  return [...system.concepts.values()].filter((concept) => tests.every((test) => test(concept)));
}

/** The test of one filter: `not-supported` for an operator this server does not know. */
export function conceptTest(system: CodeSystemIndex, filter: ComposeFilter): ConceptTest {
  const property = filter.property ?? '';
  const value = filter.value ?? '';
  switch (filter.op) {
    case 'is-a':
      return inSet(subsumed(system, value, 'down', true));
    case 'descendent-of':
      return inSet(subsumed(system, value, 'down', false));
    case 'is-not-a': {
      const below = subsumed(system, value, 'down', true);
      return (concept) => !below.has(concept.code);
    }
    case 'generalizes':
      return inSet(subsumed(system, value, 'up', true));
    case '=':
      return (concept) => propertyValues(concept, property).includes(value);
    case 'in':
    case 'not-in': {
      const listed = new Set(value.split(',').map((v) => v.trim()));
      const any = (concept: Concept): boolean => propertyValues(concept, property).some((v) => listed.has(v));
      return filter.op === 'in' ? any : (concept) => !any(concept);
    }
    case 'regex': {
      const pattern = compileRegex(value);
      return (concept) => propertyValues(concept, property).some((v) => pattern.test(v));
    }
    case 'exists': {
      const wanted = value !== 'false';
      return (concept) => propertyValues(concept, property).length > 0 === wanted;
    }
    default:
      throw new TerminologyError(
        'not-supported',
        `The filter operator '${String(filter.op)}' is not supported (system ${system.url})`,
      );
  }
}

function inSet(codes: ReadonlySet<string>): ConceptTest {
  return (concept) => codes.has(concept.code);
}

/** The codes at or below (or above) `code` by subsumption; `orSelf` false leaves `code` out. */
function subsumed(
  system: CodeSystemIndex,
  code: string,
  direction: 'down' | 'up',
  orSelf: boolean,
): Set<string> {
  if (!system.concepts.has(code)) return new Set();
  const codes = new Set(closure(system, code, direction));
  if (!orSelf) codes.delete(code);
  return codes;
}

/**
 * The values of `property` for `concept`: the code itself for `concept`/`code`, the display, the
 * parents and children as linked (explicit or nested), the derived status, or the concept's own
 * property entries.
 */
export function propertyValues(concept: Concept, property: string): string[] {
  const own = (concept.properties ?? []).filter((p) => p.code === property).map(propertyText);
  if (own.length > 0) return own;
  switch (property) {
    case 'concept':
    case 'code':
      return [concept.code];
    case 'display':
      return concept.display === undefined ? [] : [concept.display];
    case 'parent':
      return concept.parents;
    case 'child':
      return concept.children;
    case 'inactive':
      return [String(concept.inactive)];
    case 'notSelectable':
      return [String(concept.abstract)];
    default:
      return [];
  }
}

/** The longest `regex` filter value compiled. */
const MAX_PATTERN_LENGTH = 1000;

/**
 * A `regex` filter's test. A value set is data a caller writes: its pattern runs on RE2's engine
 * (re2js), whose time is linear in the input, so that no pattern (`(a+)+b`) can hold the event loop
 * that every project shares, as a backtracking `RegExp` could.
 */
function compileRegex(source: string): { test(value: string): boolean } {
  if (source.length > MAX_PATTERN_LENGTH) {
    throw new TerminologyError(
      'invalid',
      `A regex filter value may have at most ${MAX_PATTERN_LENGTH} characters`,
    );
  }
  try {
    const pattern = RE2JS.compile(source);
    // The whole value must match, as in XML Schema patterns (FHIR's regex semantics).
    return { test: (value) => pattern.matches(value) };
  } catch {
    throw new TerminologyError('invalid', `The regex filter value '${source}' is not a valid pattern`);
  }
}
