import { randomUUID } from 'node:crypto';
import { outcomeOf } from '../../http/outcome.js';
import type { BundleJson } from '../bundle/bundle-response.js';
import type { EverythingPage } from './everything.js';
import { ignoredParameterIssue } from '../search/ignored-parameter-issue.js';
import { encodeEverythingCursor, type EverythingParams } from './everything-params.js';

/** What the audit trail records as the query of a `$everything` page: `$everything?` and the parameters applied. */
export function everythingQuery(params: EverythingParams): string {
  const applied = new URLSearchParams(params.applied).toString();
  return `$everything${applied === '' ? '' : `?${applied}`}`;
}

/**
 * The searchset Bundle of a `$everything` page (`url`: the operation's absolute URL, `baseUrl`: the
 * FHIR base, for the entries' `fullUrl`s): a `self` link (as asked) and a `next` link (the same parameters
 * with the `_cursor` of the page's last entry) when more follows; no `total` (counting would walk
 * the whole record).
 */
export function everythingBundle(
  url: string,
  params: EverythingParams,
  page: EverythingPage,
  baseUrl: string,
): BundleJson {
  const link = (cursor: string | undefined): string => {
    const query = new URLSearchParams(params.applied);
    query.set('_count', String(params.count));
    if (cursor !== undefined) query.set('_cursor', cursor);
    return `${url}?${query.toString()}`;
  };
  const self = params.cursor ? encodeEverythingCursor(params.cursor) : undefined;
  const links = [{ relation: 'self', url: link(self) }];
  if (page.next) links.push({ relation: 'next', url: link(encodeEverythingCursor(page.next)) });
  const entry: Record<string, unknown>[] = page.entries.map(({ resource, mode }) => ({
    fullUrl: `${baseUrl}/${resource.resourceType}/${resource.id}`,
    resource,
    search: { mode },
  }));
  if (params.ignored.length > 0) {
    const issues = params.ignored.map((param) => ignoredParameterIssue(param, 'Parameter'));
    entry.push({ resource: outcomeOf(issues), search: { mode: 'outcome' } });
  }
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    meta: { lastUpdated: new Date().toISOString() },
    type: 'searchset',
    link: links,
    entry,
  };
}
