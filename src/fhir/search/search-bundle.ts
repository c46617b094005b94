import { randomUUID } from 'node:crypto';
import type { StoredResource } from '../../storage/types.js';
import type { BundleJson } from '../bundle/bundle-response.js';
import type { SearchOutcome } from './search-resources.js';
import { outcomeOf, type OutcomeIssue } from '../../http/outcome.js';
import { ignoredParameterIssue } from './ignored-parameter-issue.js';
import { encodeCursor, type PageCursor } from './search-cursor.js';

/** The paging parameters of one link: `_count` always, then an `_offset` or a `_cursor`. */
type Paging = { offset?: number; cursor?: PageCursor };

function link(baseUrl: string, type: string, result: SearchOutcome, count: number, paging: Paging): string {
  const params = new URLSearchParams(result.applied);
  params.set('_count', String(count));
  if (paging.offset !== undefined && paging.offset > 0) params.set('_offset', String(paging.offset));
  if (paging.cursor) params.set('_cursor', encodeCursor(paging.cursor, result.cursorShape.sort));
  return `${baseUrl}/${type}?${params.toString()}`;
}

/**
 * The paging links of a page: `self` (as asked), `first`, and `next` / `previous` when there are
 * matches that way. `next` and `previous` page by keyset (`_cursor`: the position of the page's
 * last / first entry in the search's order), so a walk neither repeats nor skips a match when other
 * matches are written or deleted meanwhile; a page asked by `_offset` links back by `_offset`.
 * @see https://hl7.org/fhir/R4/http.html#paging
 */
function pagingLinks(
  baseUrl: string,
  type: string,
  result: SearchOutcome,
): { relation: string; url: string }[] {
  const { query, page, cursor } = result;
  const count = query.count ?? page.resources.length;
  const offset = query.offset ?? 0;
  const self: Paging = cursor ? { cursor } : { offset };
  const links = [{ relation: 'self', url: link(baseUrl, type, result, count, self) }];
  if (count === 0) return links;
  links.push({ relation: 'first', url: link(baseUrl, type, result, count, {}) });
  const first = page.resources[0];
  const last = page.resources.at(-1);
  if (result.hasPrevious) {
    if (offset > 0) {
      links.push({
        relation: 'previous',
        url: link(baseUrl, type, result, count, { offset: Math.max(0, offset - count) }),
      });
    } else if (first) {
      const before: PageCursor = { direction: 'before', position: result.positionOf(first) };
      links.push({ relation: 'previous', url: link(baseUrl, type, result, count, { cursor: before }) });
    }
  }
  if (result.hasNext && last) {
    const after: PageCursor = { direction: 'after', position: result.positionOf(last) };
    links.push({ relation: 'next', url: link(baseUrl, type, result, count, { cursor: after }) });
  }
  return links;
}

/**
 * The `searchset` Bundle of one page: `total` when the search counted (`_total=accurate` or
 * `estimate`, `_summary=count`, `_count=0`; see `searchTotal`), absolute `self` / `first` /
 * `previous` / `next` links (repeating the applied parameters with `_count` and `_offset` or
 * `_cursor`), one `match` entry per resource, one `include` entry per included resource, both as
 * `_summary` / `_elements` render them, and an `outcome` entry when parameters were ignored or
 * included resources left out.
 * @see https://hl7.org/fhir/R4/search.html
 */
export function buildSearchBundle(baseUrl: string, type: string, result: SearchOutcome): BundleJson {
  const { page, ignored, subset } = result;
  const entry: Record<string, unknown>[] = [];
  const add = (resource: StoredResource, mode: 'match' | 'include'): void => {
    entry.push({
      fullUrl: `${baseUrl}/${resource.resourceType}/${resource.id}`,
      resource: subset ? subset(resource, mode) : resource,
      search: { mode },
    });
  };
  for (const resource of page.resources) add(resource, 'match');
  for (const resource of result.included) add(resource, 'include');
  const issues: OutcomeIssue[] = ignored.map((param) => ignoredParameterIssue(param, 'Search parameter'));
  issues.push(...result.issues);
  if (issues.length > 0) entry.push({ resource: outcomeOf(issues), search: { mode: 'outcome' } });
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    meta: { lastUpdated: new Date().toISOString() },
    type: 'searchset',
    ...(page.total === undefined ? {} : { total: page.total }),
    link: pagingLinks(baseUrl, type, result),
    entry,
  };
}
