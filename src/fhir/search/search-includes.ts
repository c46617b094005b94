import { canAccess } from '../../auth/access/access.js';
import type { SearchParameterDefinition, SearchRegistry } from '../../search/definitions.js';
import { extractValues } from '../../search/extract.js';
import {
  compartmentSearch,
  filterSearch,
  idFilter,
  typeSearch,
  type IncludeTarget,
  type ParameterFilter,
  type SearchRequest,
} from '../../storage/search-request.js';
import type { FhirResource, ResourceQuery, StoredResource } from '../../storage/types.js';
import { patientSearchParams } from '../compartment.js';
import type { FhirContext } from '../context.js';
import { deadlineOf } from './costly-reads.js';
import type { OutcomeIssue } from '../../http/outcome.js';
import { isResourceType, isValidId } from '../../common/resource-types.js';

/** Bounds of {@link collectIncludes}. */
export interface IncludeLimits {
  /** Most resources included in one page (matches not counted). */
  maxIncluded: number;
  /** Most levels followed: 1 for plain includes, more only for `:iterate` ones. */
  maxDepth: number;
}

/** The included resources of a page, and what was left out and why. */
export interface IncludedResources {
  resources: StoredResource[];
  /** Warnings for the `outcome` entry: types not permitted, the limits reached. */
  issues: OutcomeIssue[];
}

const keyOf = (r: { resourceType: string; id: string }): string => `${r.resourceType}/${r.id}`;

/** The reference parameters an include target names (`*`: every one of its type). */
function parametersOf(registry: SearchRegistry, target: IncludeTarget): SearchParameterDefinition[] {
  if (target.searchParam === '*') {
    return registry.parameters(target.resourceType).filter((d) => d.type === 'reference');
  }
  const definition = registry.get(target.resourceType, target.searchParam);
  return definition ? [definition] : [];
}

/** The `Type/id` keys `resource` references through `definitions` (of `targetType` when given). */
function referencedKeys(
  registry: SearchRegistry,
  definitions: readonly SearchParameterDefinition[],
  resource: FhirResource,
  targetType: string | undefined,
): { resourceType: string; id: string }[] {
  const out: { resourceType: string; id: string }[] = [];
  for (const definition of definitions) {
    for (const v of extractValues(registry, definition, resource)) {
      if (v.type !== 'reference' || v.resourceType === undefined || v.id === undefined) continue;
      if (targetType !== undefined && v.resourceType !== targetType) continue;
      if (!isResourceType(v.resourceType) || !isValidId(v.id)) continue;
      out.push({ resourceType: v.resourceType, id: v.id });
    }
  }
  return out;
}

/**
 * The resources `_include` and `_revinclude` add to a page of `matches` (R4 search, "Including
 * other resources"): each include target's references from the matches of its type, each
 * revinclude target's resources referencing a match; `:iterate` targets also from what was
 * included, level after level, up to `limits.maxDepth` levels. Only ever of the caller's project
 * (every read goes through `ctx.storage` with `ctx.projectId`), only of types the principal may
 * `read` (and `search`, for a revinclude: it discovers what references a resource); the others are
 * left out with a `suppressed` warning. A resource already on the page is not repeated. At most
 * `limits.maxIncluded` resources; past that, a `too-costly` warning.
 *
 * Costs: an include reads its targets by id (the stores' id lookup). A revinclude on a
 * patient-compartment parameter (`subject`, `patient`, …) of Patient matches reads through the
 * compartment index; any other one reads every resource of its type in the project and tests its
 * references (until the search indexes of issue 30 answer `query.search`).
 * @see https://hl7.org/fhir/R4/search.html#include
 */
export async function collectIncludes(
  ctx: FhirContext,
  registry: SearchRegistry,
  request: SearchRequest,
  matches: readonly StoredResource[],
  limits: IncludeLimits,
): Promise<IncludedResources> {
  const included: StoredResource[] = [];
  const issues: OutcomeIssue[] = [];
  if (matches.length === 0 || (request.include.length === 0 && request.revinclude.length === 0)) {
    return { resources: included, issues };
  }
  const seen = new Set(matches.map(keyOf));
  const refused = new Set<string>();
  let cut = false;

  const permitted = (type: string, reverse: boolean): boolean => {
    const ok =
      canAccess(ctx.principal, type, 'read') && (!reverse || canAccess(ctx.principal, type, 'search'));
    if (!ok && !refused.has(type)) {
      refused.add(type);
      issues.push({
        severity: 'warning',
        code: 'suppressed',
        details: { text: `Included resources of type ${type} were left out: not permitted` },
      });
    }
    return ok;
  };
  /** Adds what a read found (unless already there), up to the limit (then `cut`). */
  const take = (found: readonly StoredResource[], level: StoredResource[]): void => {
    for (const resource of found) {
      const key = keyOf(resource);
      if (seen.has(key)) continue;
      if (included.length >= limits.maxIncluded) {
        cut = true;
        return;
      }
      seen.add(key);
      included.push(resource);
      level.push(resource);
    }
  };
  const room = (): number => limits.maxIncluded - included.length + 1;

  let sources: readonly StoredResource[] = matches;
  let depth = 0;
  while (sources.length > 0 && depth < limits.maxDepth && !cut) {
    const first = depth === 0;
    depth += 1;
    const level: StoredResource[] = [];
    for (const target of request.include) {
      if (!first && !target.iterate) continue;
      const definitions = parametersOf(registry, target);
      const wanted = new Map<string, Set<string>>();
      for (const source of sources) {
        if (source.resourceType !== target.resourceType) continue;
        for (const ref of referencedKeys(registry, definitions, source, target.targetType)) {
          if (seen.has(keyOf(ref))) continue;
          let ids = wanted.get(ref.resourceType);
          if (!ids) wanted.set(ref.resourceType, (ids = new Set()));
          ids.add(ref.id);
        }
      }
      for (const [type, ids] of wanted) {
        if (cut || !permitted(type, false)) continue;
        const page = await ctx.storage.searchResources(ctx.projectId, type, {
          search: typeSearch(type, [idFilter([...ids])]),
          count: room(),
          total: 'none',
          ...deadlineOf(ctx),
        });
        take(page.resources, level);
      }
    }
    for (const target of request.revinclude) {
      if ((!first && !target.iterate) || cut) continue;
      const definitions = parametersOf(registry, target);
      const pointed = sources.filter(
        (s) =>
          (target.targetType === undefined || s.resourceType === target.targetType) &&
          definitions.some((d) => d.targets.length === 0 || d.targets.includes(s.resourceType)),
      );
      if (pointed.length === 0 || !permitted(target.resourceType, true)) continue;
      const keys = new Set(pointed.map(keyOf));
      const query: ResourceQuery = {
        where: (candidate) =>
          referencedKeys(registry, definitions, candidate, target.targetType).some((ref) =>
            keys.has(keyOf(ref)),
          ),
        count: room(),
        total: 'none',
        ...deadlineOf(ctx),
      };
      if (target.searchParam !== '*') {
        const filter: ParameterFilter = {
          kind: 'parameter',
          code: target.searchParam,
          type: 'reference',
          values: pointed.map((s) => ({ type: 'reference', resourceType: s.resourceType, id: s.id })),
        };
        // References to Patients through a compartment parameter: the compartment index narrows.
        query.search =
          pointed.every((s) => s.resourceType === 'Patient') &&
          patientSearchParams(target.resourceType).includes(target.searchParam)
            ? compartmentSearch(
                target.resourceType,
                pointed.map((s) => s.id),
                [filter],
              )
            : filterSearch(target.resourceType, filter);
      }
      const page = await ctx.storage.searchResources(ctx.projectId, target.resourceType, query);
      take(page.resources, level);
    }
    sources = level;
  }
  if (cut) {
    issues.push({
      severity: 'warning',
      code: 'too-costly',
      details: {
        text: `Included resources were cut at ${limits.maxIncluded} for this page: use a smaller _count`,
      },
    });
  } else if (depth >= limits.maxDepth && iteratesFrom(request, sources)) {
    issues.push({
      severity: 'warning',
      code: 'too-costly',
      details: { text: `:iterate was followed ${limits.maxDepth} levels deep, no further` },
    });
  }
  return { resources: included, issues };
}

/** True when an `:iterate` target would read more from `sources` (the last level included). */
function iteratesFrom(request: SearchRequest, sources: readonly StoredResource[]): boolean {
  if (sources.length === 0) return false;
  return (
    request.include.some((t) => t.iterate && sources.some((s) => s.resourceType === t.resourceType)) ||
    request.revinclude.some((t) => t.iterate)
  );
}
