import { FhirError } from '../../http/http-error.js';
import type { SearchRegistry } from '../../search/definitions.js';
import {
  unresolvedTerminology,
  type ParameterFilter,
  type SearchFilter,
  type SearchRequest,
  type TokenSearchValue,
} from '../../storage/search-request.js';
import {
  TerminologyError,
  type SystemCode,
  type Terminology,
  type TerminologySource,
} from '../../terminology/terminology-types.js';

/*
 * The token modifiers `:in`, `:not-in`, `:below` and `:above` are answered by the terminology, not
 * by a store: before a search is admitted and asked of the store, each such filter (in chains and
 * `_has` too) becomes the plain token filter it stands for, every `system|code` of the value set or
 * of the hierarchy as one value. Every store then answers it as any token list (PostgreSQL in SQL,
 * the memory and file stores from their postings), with the same answers.
 *
 * An element of type `code` (`Observation.status`, `Patient.gender`) has no system of its own: the
 * value set of its binding implies it, and the index holds its code alone. For a parameter that
 * reads one, each code is also given as `|code` (no system), so that `status:in=…observation-status`
 * finds `"status": "final"`.
 */

/** Most codes one terminology filter may stand for, by default (`searchLimits.maxTerminologyCodes`). */
export const DEFAULT_MAX_TERMINOLOGY_CODES = 10_000;

/** What resolving terminology filters needs: the request context's terminology and the bound. */
export interface TerminologyResolution {
  service: Terminology;
  /** The project's own `CodeSystem` / `ValueSet` resources, read with the caller's rights. */
  source: TerminologySource;
  /** Most codes one filter may stand for (400 `too-costly` beyond). */
  maxCodes: number;
}

/**
 * `request` with every terminology filter, at any depth, replaced by the plain token filter it
 * stands for (the request itself when it has none):
 * - `:in` = the codes of the value sets given (`valueSetCodes`); none: nothing matches;
 * - `:not-in` = `:not` of those codes (a resource with none of them, or without the element);
 * - `:below` / `:above` = the code and the codes it subsumes / that subsume it (`hierarchy`).
 *
 * Errors, each a `FhirError` naming the parameter: 400 `not-supported` without a terminology; 400
 * `not-found` for an unknown value set or code system (a search parameter's value, not the
 * resource asked for); 400 `invalid` for an unknown code; 400 `too-costly` past `maxCodes`; 400
 * `not-supported` for what the terminology cannot expand (a code system it does not hold). A
 * caller without the right to search `ValueSet` / `CodeSystem` resources still has the R4 ones (the
 * project's own are then not read, `withoutRefusals`); a value set or code system found nowhere
 * else then answers the source's refusal (403).
 * @see https://hl7.org/fhir/R4/search.html#token
 */
export async function resolveTerminologyFilters(
  registry: SearchRegistry,
  request: SearchRequest,
  terminology: TerminologyResolution | undefined,
): Promise<SearchRequest> {
  let changed = false;
  const filters: SearchFilter[] = [];
  const walk: Walk = { registry, terminology };
  for (const filter of request.filters) {
    const resolved = await resolveFilter(walk, request.resourceType, filter, '');
    if (resolved !== filter) changed = true;
    filters.push(resolved);
  }
  return changed ? { ...request, filters } : request;
}

/** What a walk of a request's filters resolves with. */
interface Walk {
  registry: SearchRegistry;
  terminology: TerminologyResolution | undefined;
}

/** `filter` of a `resourceType` search (named after `prefix` in the request), its terminology resolved. */
async function resolveFilter<F extends SearchFilter>(
  walk: Walk,
  resourceType: string,
  filter: F,
  prefix: string,
): Promise<F> {
  switch (filter.kind) {
    case 'parameter': {
      if (!unresolvedTerminology(filter)) return filter;
      const name = `${prefix}${filter.code}:${filter.modifier}`;
      const bare = readsCode(walk.registry, resourceType, filter.code);
      return (await resolveParameter(filter, name, bare, walk.terminology)) as F;
    }
    case 'chain': {
      // The parser made sure every target reads the next parameter alike: the first one tells.
      const target = filter.targetTypes[0] ?? resourceType;
      const inner = await resolveFilter(walk, target, filter.filter, `${prefix}${filter.code}.`);
      return inner === filter.filter ? filter : { ...filter, filter: inner };
    }
    case 'has': {
      const here = `${prefix}_has:${filter.resourceType}:${filter.referenceParam}:`;
      const inner = await resolveFilter(walk, filter.resourceType, filter.filter, here);
      return inner === filter.filter ? filter : { ...filter, filter: inner };
    }
    default:
      return filter;
  }
}

/** True when parameter `code` of `resourceType` reads elements of type `code` (no system of their own). */
function readsCode(registry: SearchRegistry, resourceType: string, code: string): boolean {
  return registry.get(resourceType, code)?.branches.some((b) => b.valueTypes.includes('code')) === true;
}

/** The plain token filter (`:not` for `:not-in`) of one terminology filter named `name`. */
async function resolveParameter(
  filter: ParameterFilter,
  name: string,
  /** The parameter reads `code` elements: each code without a system too. */
  bare: boolean,
  terminology: TerminologyResolution | undefined,
): Promise<ParameterFilter> {
  if (!terminology) {
    throw new FhirError(400, 'not-supported', `${name} is not supported here (no terminology)`, {
      expression: [name],
    });
  }
  const codes = new Map<string, TokenSearchValue>();
  for (const value of filter.values) {
    for (const code of await codesOf(filter, value, name, terminology)) {
      codes.set(`${code.system}|${code.code}`, token(code));
    }
    if (codes.size > terminology.maxCodes) throw tooMany(name, terminology.maxCodes);
  }
  const values = [...codes.values()];
  if (bare) {
    const seen = new Set<string>();
    for (const { code } of codes.values())
      if (!seen.has(code!)) {
        seen.add(code!);
        values.push({ type: 'token', system: null, code: code! });
      }
  }
  return {
    kind: 'parameter',
    code: filter.code,
    type: filter.type,
    ...(filter.modifier === 'not-in' ? { modifier: 'not' as const } : {}),
    values,
  };
}

/** The codes one value of a terminology filter stands for. */
async function codesOf(
  filter: ParameterFilter,
  value: ParameterFilter['values'][number],
  name: string,
  { service, source: given, maxCodes }: TerminologyResolution,
): Promise<readonly SystemCode[]> {
  const { source, refusal } = withoutRefusals(given);
  try {
    if (value.type === 'uri') return await service.valueSetCodes(value.value, maxCodes, source);
    if (value.type === 'token' && typeof value.system === 'string' && value.code !== undefined) {
      const direction = filter.modifier === 'above' ? 'above' : 'below';
      return await service.hierarchy(value.system, value.code, direction, maxCodes, source);
    }
  } catch (error) {
    // Not found among what the caller may read: it may be the project's, which it may not search.
    const refused = refusal();
    if (refused && error instanceof TerminologyError && error.issueCode === 'not-found') throw refused;
    if (error instanceof TerminologyError) throw terminologyRefusal(error, name, maxCodes);
    throw error;
  }
  // The parser gives neither: a request built by hand.
  throw new FhirError(400, 'invalid', `${name} has a value of the wrong form`, { expression: [name] });
}

/**
 * `source` as a caller without the right to read the project's terminology resources sees it: a
 * refused read (403) finds nothing, so that the R4 definitions, which need no right, still answer;
 * `refusal` tells whether one was refused.
 */
function withoutRefusals(source: TerminologySource): {
  source: TerminologySource;
  refusal: () => FhirError | undefined;
} {
  let refused: FhirError | undefined;
  const unlessRefused = async <T>(read: () => Promise<T>, none: T): Promise<T> => {
    try {
      return await read();
    } catch (error) {
      if (!(error instanceof FhirError) || error.status !== 403) throw error;
      refused ??= error;
      return none;
    }
  };
  return {
    source: {
      key: source.key,
      find: (type, url, version) => unlessRefused(() => source.find(type, url, version), undefined),
    },
    refusal: () => refused,
  };
}

const token = (code: SystemCode): TokenSearchValue => ({
  type: 'token',
  system: code.system === '' ? null : code.system,
  code: code.code,
});

const tooMany = (name: string, maxCodes: number): FhirError =>
  new FhirError(
    400,
    'too-costly',
    `${name} stands for more than ${maxCodes} codes (searchLimits.maxTerminologyCodes): narrow the value set or the code`,
    { expression: [name] },
  );

/** A terminology refusal as the search's 400, naming the parameter. */
function terminologyRefusal(error: TerminologyError, name: string, maxCodes: number): FhirError {
  if (error.issueCode === 'too-costly') return tooMany(name, maxCodes);
  return new FhirError(400, error.issueCode, `${name}: ${error.message}`, {
    expression: [name],
    cause: error,
  });
}
