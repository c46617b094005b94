import { randomUUID } from 'node:crypto';
import type { BundleJson } from './bundle-response.js';
import type { SearchOutcome } from './interactions.js';
import { outcomeOf } from '../http/outcome.js';

function link(
  baseUrl: string,
  type: string,
  applied: [string, string][],
  count: number,
  offset: number,
): string {
  const params = new URLSearchParams(applied);
  params.set('_count', String(count));
  if (offset > 0) params.set('_offset', String(offset));
  return `${baseUrl}/${type}?${params.toString()}`;
}

/**
 * The `searchset` Bundle of one page: `total`, absolute `self` / `first` / `previous` / `next` links
 * (repeating the applied parameters with `_count` and `_offset`), one `match` entry per resource, and
 * an `outcome` entry listing ignored parameters when some were.
 * @see https://hl7.org/fhir/R4/http.html#paging
 */
export function buildSearchBundle(baseUrl: string, type: string, result: SearchOutcome): BundleJson {
  const { query, page, applied, ignored } = result;
  const count = query.count ?? page.resources.length;
  const offset = query.offset ?? 0;
  const links = [{ relation: 'self', url: link(baseUrl, type, applied, count, offset) }];
  if (count > 0) {
    links.push({ relation: 'first', url: link(baseUrl, type, applied, count, 0) });
    if (offset > 0)
      links.push({
        relation: 'previous',
        url: link(baseUrl, type, applied, count, Math.max(0, offset - count)),
      });
    if (offset + count < page.total)
      links.push({ relation: 'next', url: link(baseUrl, type, applied, count, offset + count) });
  }
  const entry: Record<string, unknown>[] = page.resources.map((resource) => ({
    fullUrl: `${baseUrl}/${resource.resourceType}/${resource.id}`,
    resource,
    search: { mode: 'match' },
  }));
  if (ignored.length > 0) {
    entry.push({
      resource: outcomeOf(
        ignored.map((name) => ({
          severity: 'warning',
          code: 'not-supported',
          details: { text: `Search parameter ${name} is not supported and was ignored` },
          expression: [name],
        })),
      ),
      search: { mode: 'outcome' },
    });
  }
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    meta: { lastUpdated: new Date().toISOString() },
    type: 'searchset',
    total: page.total,
    link: links,
    entry,
  };
}
