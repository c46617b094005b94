import { randomUUID } from 'node:crypto';
import { canAccess } from '../../auth/access/access.js';
import { parseDateRange } from '../../common/date-range.js';
import { isValidId, R4_RESOURCE_TYPES } from '../../common/resource-types.js';
import { FhirError } from '../../http/http-error.js';
import { NotFoundError } from '../../storage/errors.js';
import type {
  HistoryEntry,
  HistoryMethod,
  HistoryPage,
  HistoryQuery,
  Storage,
  StoredResource,
} from '../../storage/types.js';
import type { BundleJson } from '../bundle/bundle-response.js';
import { authorize } from '../interactions.js';
import type { FhirContext } from '../context.js';
import { checkId, checkType } from '../resource-checks.js';
import { permittedEntries, scopedStorage } from '../scoped-storage.js';
import { etagOf } from '../versioning.js';

/**
 * Old versions and history: `GET [type]/[id]/_history/[vid]` (vread) and the `history` Bundles of
 * `GET [type]/[id]/_history`, `GET [type]/_history` and `GET _history`, newest first, paged by the
 * store's cursor (`_cursor` in the `next` link).
 * @see https://hl7.org/fhir/R4/http.html#vread
 * @see https://hl7.org/fhir/R4/http.html#history
 */

/** The store as the principal may see it: a SMART user's limited view (`scopedStorage`). */
function visibleStore(ctx: FhirContext, storage: Storage): Storage {
  return ctx.access ? scopedStorage(storage, ctx.access) : storage;
}

/** `GET [type]/[id]/_history/[vid]`: any version the store keeps; a deletion is 410 Gone. */
export async function readVersion(
  ctx: FhirContext,
  storage: Storage,
  type: string,
  id: string,
  versionId: string,
): Promise<StoredResource> {
  checkType(type);
  checkId(id);
  authorize(ctx, type, 'read');
  // `meta.versionId` is an `id`: anything else names no version.
  if (!isValidId(versionId))
    throw new FhirError(400, 'invalid', 'The version id does not match the FHIR id syntax', {
      expression: ['vid'],
    });
  const resource = await visibleStore(ctx, storage).readResourceVersion(ctx.projectId, type, id, versionId);
  // A version outside what a SMART user may see is not there for it (as its read). The user's view
  // refused it already: this is a second line.
  if (ctx.access && !(await ctx.access.permits(resource, 'read')))
    throw new NotFoundError(`${type}/${id} has no version ${versionId}`);
  return resource;
}

/** Which history: the whole project's, a type's, or one resource's. */
export interface HistoryTarget {
  type?: string;
  id?: string;
}

/** Parameters a history request may carry; `_format` and `_pretty` are read elsewhere or ignored. */
const HISTORY_PARAMS = new Set(['_count', '_since', '_at', '_cursor', '_format', '_pretty']);

function invalid(param: string, text: string): FhirError {
  return new FhirError(400, 'invalid', text, { expression: [param] });
}

/** A parameter given at most once. */
function single(params: URLSearchParams, name: string): string | undefined {
  const values = params.getAll(name);
  if (values.length > 1) throw invalid(name, `${name} may be given once`);
  return values[0];
}

/** What a history request asks: its query for the store and the parameters its links repeat. */
export interface HistoryRequest {
  query: HistoryQuery;
  /** `_count`, `_since` and `_at` as given (for the links). */
  applied: [string, string][];
}

/**
 * Reads `_count` (at most `maxCount`, `defaultCount` when absent), `_since` (an instant: versions
 * made at or after it), `_at` (a date, dateTime or instant: versions current at some moment of the
 * range it stands for) and `_cursor`. Other parameters are a 400 unless `lenient`.
 */
export function parseHistoryRequest(
  target: HistoryTarget,
  params: URLSearchParams,
  options: { defaultCount: number; maxCount: number; lenient: boolean },
): HistoryRequest {
  for (const name of new Set(params.keys())) {
    if (!HISTORY_PARAMS.has(name) && !options.lenient)
      throw new FhirError(400, 'not-supported', `History parameter ${name} is not supported`, {
        expression: [name],
      });
  }
  const query: HistoryQuery = { count: options.defaultCount, ...target };
  const applied: [string, string][] = [];
  const count = single(params, '_count');
  if (count !== undefined) {
    if (!/^\d{1,9}$/.test(count)) throw invalid('_count', '_count must be a non-negative integer');
    query.count = Math.min(Number(count), options.maxCount);
    applied.push(['_count', String(query.count)]);
  }
  const since = single(params, '_since');
  if (since !== undefined) {
    const range = parseDateRange(since);
    if (!range || !/T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(since))
      throw invalid('_since', '_since must be an instant (a dateTime with seconds and a time zone)');
    query.since = range.start;
    applied.push(['_since', since]);
  }
  const at = single(params, '_at');
  if (at !== undefined) {
    const range = parseDateRange(at);
    if (!range) throw invalid('_at', '_at must be a date, dateTime or instant');
    query.at = { from: range.start, to: range.end };
    applied.push(['_at', at]);
  }
  const cursor = single(params, '_cursor');
  if (cursor !== undefined) {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) throw invalid('_cursor', '_cursor is not a history position');
    query.cursor = cursor;
  }
  return { query, applied };
}

/** The types the principal may list in a system history (403 when none). */
function listableTypes(ctx: FhirContext): (type: string) => boolean {
  const allowed = new Set(R4_RESOURCE_TYPES.filter((t) => canAccess(ctx.principal, t, 'search')));
  if (allowed.size === 0) throw new FhirError(403, 'forbidden', 'Not allowed to search any resource type');
  return (type) => allowed.has(type);
}

/**
 * One page of a history. The resource history needs `read` on the type, the type history `search`;
 * the system history lists only the types the principal may search (a page may then hold fewer
 * entries than `_count`; `next` still continues where the store stopped).
 */
export async function readHistoryPage(
  ctx: FhirContext,
  storage: Storage,
  request: HistoryRequest,
): Promise<HistoryPage> {
  const { type, id } = request.query;
  if (type !== undefined) {
    checkType(type);
    if (id !== undefined) checkId(id);
    authorize(ctx, type, id !== undefined ? 'read' : 'search');
  }
  const visible = type === undefined ? listableTypes(ctx) : () => true;
  const store = visibleStore(ctx, storage);
  let page: HistoryPage;
  try {
    page = await store.readHistory(ctx.projectId, request.query);
  } catch (error) {
    // A cursor the store does not know (of another store, or altered).
    if ((error as { code?: string }).code === 'ERR_STORAGE_INVALID')
      throw invalid('_cursor', '_cursor is not a history position of this server');
    throw error;
  }
  let entries = page.entries.filter((e) => visible(e.resourceType));
  // The user's view kept only what it may see: this is a second line.
  if (ctx.access) entries = await permittedEntries(ctx.access, entries, id !== undefined ? 'read' : 'search');
  // A resource that never existed has no history: 404, as its read (a deleted one has its history).
  // For a SMART user, read through its limited view: one it may not see is a 404 as well.
  if (id !== undefined && entries.length === 0 && request.query.cursor === undefined) {
    await store.readResource(ctx.projectId, type!, id).catch((error: unknown) => {
      if (!(error instanceof NotFoundError && error.deleted)) throw error;
    });
  }
  // A total counts the versions left out as well: not given then.
  const { total, ...rest } = page;
  const counted = total !== undefined && entries.length === page.entries.length ? { total } : {};
  return { ...rest, ...counted, entries };
}

const STATUS: Record<HistoryMethod, string> = {
  POST: '201 Created',
  PUT: '200 OK',
  DELETE: '204 No Content',
};

function bundleEntry(baseUrl: string, entry: HistoryEntry): Record<string, unknown> {
  const path = `${entry.resourceType}/${entry.id}`;
  return {
    fullUrl: `${baseUrl}/${path}`,
    ...(entry.resource ? { resource: entry.resource } : {}),
    request: { method: entry.method, url: entry.method === 'POST' ? entry.resourceType : path },
    response: {
      status: STATUS[entry.method],
      etag: etagOf(entry.versionId),
      lastModified: entry.lastUpdated,
    },
  };
}

/** The path of a history under the base: `_history`, `Type/_history` or `Type/id/_history`. */
export function historyPath(target: HistoryTarget): string {
  if (target.type === undefined) return '_history';
  return target.id === undefined ? `${target.type}/_history` : `${target.type}/${target.id}/_history`;
}

/**
 * The `history` Bundle of a page: `total` when the store counted it (a resource's history), `self`
 * and `next` links (`next` repeats `_count`, `_since` and `_at` with the store's `_cursor`), one
 * entry per version with its `request` and `response`; a deletion has no `resource`.
 */
export function buildHistoryBundle(baseUrl: string, request: HistoryRequest, page: HistoryPage): BundleJson {
  const url = (cursor: string | undefined): string => {
    const params = new URLSearchParams(request.applied);
    if (cursor !== undefined) params.set('_cursor', cursor);
    const text = params.toString();
    return `${baseUrl}/${historyPath(request.query)}${text ? `?${text}` : ''}`;
  };
  const link = [{ relation: 'self', url: url(request.query.cursor) }];
  if (page.next !== undefined) link.push({ relation: 'next', url: url(page.next) });
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    meta: { lastUpdated: new Date().toISOString() },
    type: 'history',
    ...(page.total !== undefined ? { total: page.total } : {}),
    link,
    entry: page.entries.map((e) => bundleEntry(baseUrl, e)),
  };
}
