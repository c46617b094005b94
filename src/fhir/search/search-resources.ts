import type { ResourcePage, ResourceQuery, StoredResource } from '../../storage/types.js';
import { loadSearchRegistry } from '../../search/definitions.js';
import type { OutcomeIssue } from '../../http/outcome.js';
import { checkType } from '../resource-checks.js';
import { authorize, searchLimitsOf, searchReads } from '../interactions.js';
import type { FhirContext } from '../context.js';
import { collectIncludes } from './search-includes.js';
import { admitted, deadlineOf } from './costly-reads.js';
import { parseSearch, type ParsedSearch, type SearchQueryOptions } from './search-query.js';
import { entrySubsetter, type EntrySubsetter } from './search-subset.js';
import { checkAccurateTotal, DEFAULT_MAX_ACCURATE_TOTAL, searchTotal } from './search-total.js';

/** Result of a search: the page, plus how it was parsed (for links and the ignored-parameter outcome). */
export interface SearchOutcome extends ParsedSearch {
  /** The matches of the page, and the total of all matches when the search asked for it (`_total`). */
  page: ResourcePage;
  /** What `_include` / `_revinclude` added (`search.mode = include`). */
  included: StoredResource[];
  /** Warnings of the `outcome` entry besides ignored parameters (includes left out or cut). */
  issues: OutcomeIssue[];
  /** Matches follow this page (a `next` link pages from its last entry). */
  hasNext: boolean;
  /** Matches precede this page (a `previous` link pages from its first entry, or by `_offset`). */
  hasPrevious: boolean;
  /** How `_summary` / `_elements` render each entry; undefined: whole. */
  subset?: EntrySubsetter;
}

/** Most resources `_include` / `_revinclude` add to one page. */
export const MAX_INCLUDED = 1000;
/** Most levels `:iterate` follows (the first level included). */
export const MAX_INCLUDE_DEPTH = 3;

/**
 * `GET [base]/[type]?…` and `POST [base]/[type]/_search`: one page of matches (see `parseSearch` for
 * what is supported), with what `_include` / `_revinclude` add (`collectIncludes`: at most
 * {@link MAX_INCLUDED}, `:iterate` {@link MAX_INCLUDE_DEPTH} levels), only ever of the principal's
 * project. The store is asked for one match more than the page to know whether another page follows,
 * and for the total `_total` asks (`searchTotal`: none by default), an exact one counted at most to
 * `maxAccurateTotal` (400 `too-costly` past it).
 * @see https://hl7.org/fhir/R4/http.html#search
 */
export async function searchResources(
  ctx: FhirContext,
  type: string,
  params: Iterable<readonly [string, string]>,
  options: SearchQueryOptions = {},
): Promise<SearchOutcome> {
  checkType(type);
  authorize(ctx, type, 'search');
  // Parsed (its bounds checked, the types its chains read authorized) before it waits for a turn
  // of the project: a search refused outright answers at once. Parsing reads no resource: the
  // store resolves chains and `_has` in the turn, within its deadline.
  const parsed = await parseSearch(type, params, { ...searchLimitsOf(ctx), ...options }, searchReads(ctx));
  return admitted(ctx, (turn) => answerSearch(turn, type, parsed));
}

/** The page, total and includes of a parsed search, read in the search's turn. */
async function answerSearch(ctx: FhirContext, type: string, parsed: ParsedSearch): Promise<SearchOutcome> {
  const { query, request } = parsed;
  const wanted = query.count ?? Infinity;
  const total = searchTotal(request);
  const maxAccurateTotal = ctx.searchLimits?.maxAccurateTotal ?? DEFAULT_MAX_ACCURATE_TOTAL;
  const asked: ResourceQuery = {
    ...query,
    ...(wanted > 0 && wanted < Infinity ? { count: wanted + 1 } : {}),
    total,
    ...(total === 'accurate' ? { maxTotal: maxAccurateTotal } : {}),
    ...deadlineOf(ctx),
  };
  const found = await ctx.storage.searchResources(ctx.projectId, type, asked);
  checkAccurateTotal(found.total, total, maxAccurateTotal);
  let resources = found.resources;
  const more = resources.length > wanted;
  // Backwards, the extra match is the furthest from the cursor: the first.
  if (more)
    resources = query.before ? resources.slice(resources.length - wanted) : resources.slice(0, wanted);
  // A store may count although none was asked: the Bundle gives what `_total` asked only.
  const page: ResourcePage =
    total === 'none' || found.total === undefined ? { resources } : { total: found.total, resources };
  const offset = query.offset ?? 0;
  let included: StoredResource[] = [];
  let issues: OutcomeIssue[] = [];
  if (resources.length > 0 && (request.include.length > 0 || request.revinclude.length > 0)) {
    const limits = {
      maxIncluded: ctx.searchLimits?.maxIncluded ?? MAX_INCLUDED,
      maxDepth: ctx.searchLimits?.maxIncludeDepth ?? MAX_INCLUDE_DEPTH,
    };
    const registry = await loadSearchRegistry();
    ({ resources: included, issues } = await collectIncludes(ctx, registry, request, resources, limits));
  }
  const subset = await entrySubsetter(request);
  return {
    ...parsed,
    page,
    included,
    issues,
    hasNext: query.before ? resources.length > 0 : more,
    hasPrevious: query.before ? more : offset > 0 || (query.after !== undefined && resources.length > 0),
    ...(subset ? { subset } : {}),
  };
}
