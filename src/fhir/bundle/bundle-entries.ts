/**
 * The entries of a batch or transaction Bundle: each entry's request read and checked, the
 * references between entries resolved. Pure functions: `batch.ts` runs them.
 */
import { FhirError, type FhirIssueCode } from '../../http/http-error.js';
import type { FhirResource } from '../../storage/types.js';
import { patchDocumentOfEntry, type EntryPatchOptions, type PatchDocument } from '../patch/patch-document.js';
import { checkId, checkResource, withoutServerMeta } from '../resource-checks.js';
import { isResourceType } from '../../common/resource-types.js';

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** One entry of a batch or transaction Bundle, as parsed and checked. */
export interface Entry {
  index: number;
  method: Method;
  type: string;
  id?: string;
  /**
   * Query string, without `?`, of a search (GET) or of the criteria of a conditional update (PUT)
   * or delete (DELETE).
   */
  query?: string;
  fullUrl?: string;
  resource?: FhirResource;
  /** The patch of a PATCH entry (its `Binary` or `Parameters` resource). */
  patch?: PatchDocument;
  ifNoneExist?: string;
  /** `request.ifNoneMatch` / `request.ifModifiedSince` of a read: a conditional read. */
  ifNoneMatch?: string;
  ifModifiedSince?: string;
  ifMatch?: string;
  /** Id given to a created resource before writing (so references to it can be rewritten). */
  newId?: string;
  /**
   * A GET of `Patient/$everything` or `Patient/[id]/$everything` (the only operation an entry may
   * name), of a history (`[type]/_history`, `[type]/[id]/_history`) or of one version
   * (`[type]/[id]/_history/[vid]`, its id in `versionId`).
   */
  operation?: EntryOperation;
  versionId?: string;
}

/** What a GET entry asks beyond a read or a search. */
export type EntryOperation = 'everything' | 'history' | 'vread';

interface RequestTarget {
  type: string;
  id?: string;
  query?: string;
  operation?: EntryOperation;
  versionId?: string;
}

export function entryError(
  index: number,
  message: string,
  status = 400,
  code: FhirIssueCode = 'invalid',
): FhirError {
  return new FhirError(status, code, message, { expression: [`Bundle.entry[${index}]`] });
}

/**
 * Reads `request.url` (relative `Patient`, `Patient/1`, `Patient?x=y`, or absolute) into a type, an
 * optional id and an optional query.
 */
function parseRequestUrl(index: number, url: string): RequestTarget {
  let path = url;
  let query: string | undefined;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) {
    try {
      const parsed = new URL(url);
      path = parsed.pathname;
      query = parsed.search ? parsed.search.slice(1) : undefined;
    } catch {
      throw entryError(index, 'request.url is not a valid URL');
    }
  } else {
    const q = url.indexOf('?');
    if (q !== -1) {
      path = url.slice(0, q);
      query = url.slice(q + 1);
    }
  }
  const segments = path.split('/').filter((s) => s !== '');
  if (segments.at(-1) === '$everything' || segments.at(-1) === '%24everything') {
    const target = parseRequestUrl(index, segments.slice(0, -1).join('/'));
    if (target.type !== 'Patient')
      throw entryError(index, '$everything is an operation of Patient', 404, 'not-found');
    return { ...target, ...(query !== undefined ? { query } : {}), operation: 'everything' };
  }
  const historyAt = segments.indexOf('_history');
  if (historyAt !== -1) return historyTarget(index, segments, historyAt, query);
  const last = segments[segments.length - 1];
  const beforeLast = segments[segments.length - 2];
  if (last !== undefined && isResourceType(last))
    return { type: last, ...(query !== undefined ? { query } : {}) };
  if (beforeLast !== undefined && last !== undefined && isResourceType(beforeLast)) {
    checkIdOf(index, last);
    return { type: beforeLast, id: last, ...(query !== undefined ? { query } : {}) };
  }
  if (last !== undefined && /^[A-Z]/.test(last) && !beforeLast) {
    throw entryError(index, `Unknown resource type ${last}`, 404, 'not-found');
  }
  throw entryError(index, 'request.url must be [type], [type]/[id] or [type]?[query]');
}

/** `[type]/_history`, `[type]/[id]/_history` or `[type]/[id]/_history/[vid]` as an entry's target. */
function historyTarget(
  index: number,
  segments: string[],
  at: number,
  query: string | undefined,
): RequestTarget {
  const tail = segments.slice(at + 1);
  if (at === 0) throw entryError(index, 'The system history is not read in a Bundle entry');
  const target = parseRequestUrl(index, segments.slice(0, at).join('/'));
  if (target.operation !== undefined || target.query !== undefined || tail.length > 1)
    throw entryError(
      index,
      'request.url must be [type]/_history, [type]/[id]/_history or [type]/[id]/_history/[vid]',
    );
  const withQuery = query !== undefined ? { query } : {};
  if (tail.length === 0) return { ...target, ...withQuery, operation: 'history' };
  if (target.id === undefined) throw entryError(index, 'A version is read as [type]/[id]/_history/[vid]');
  return { ...target, ...withQuery, operation: 'vread', versionId: tail[0]! };
}

function checkIdOf(index: number, id: string): void {
  try {
    checkId(id);
  } catch {
    throw entryError(index, 'request.url has an invalid id');
  }
}

function parseIfMatch(index: number, header: unknown): string | undefined {
  if (header === undefined) return undefined;
  const m = typeof header === 'string' ? /^\s*(?:W\/)?"?([A-Za-z0-9\-.]{1,64})"?\s*$/.exec(header) : null;
  if (!m) throw entryError(index, 'request.ifMatch must be an ETag such as W/"1"');
  return m[1];
}

/**
 * Reads one entry of a batch or transaction Bundle (400 when malformed): `GET`, `POST`, `PUT`
 * (`[type]/[id]`, or `[type]?[criteria]`: a conditional update), `PATCH` (`[type]/[id]`, with a
 * `Parameters` or `Binary` resource) and `DELETE` (`[type]/[id]`, or a conditional delete).
 * `patching` bounds the patch of a PATCH entry (the nesting of a `Binary`'s JSON Patch, its
 * operations, the size it may grow the resource to).
 */
export function parseEntry(index: number, raw: unknown, patching: EntryPatchOptions = {}): Entry {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw entryError(index, 'Entry must be an object');
  const { request, resource, fullUrl } = raw as { request?: unknown; resource?: unknown; fullUrl?: unknown };
  if (request === null || typeof request !== 'object') throw entryError(index, 'Entry needs a request');
  const { method, url, ifNoneExist, ifMatch, ifNoneMatch, ifModifiedSince } = request as Record<
    string,
    unknown
  >;
  if (typeof url !== 'string' || url === '') throw entryError(index, 'request.url is required');
  if (fullUrl !== undefined && typeof fullUrl !== 'string')
    throw entryError(index, 'fullUrl must be a string');
  const verb = typeof method === 'string' ? method.toUpperCase() : '';
  if (verb === 'HEAD') {
    throw entryError(index, `request.method ${verb} is not supported`, 405, 'not-supported');
  }
  if (verb !== 'GET' && verb !== 'POST' && verb !== 'PUT' && verb !== 'PATCH' && verb !== 'DELETE') {
    throw entryError(index, 'request.method must be GET, POST, PUT, PATCH or DELETE');
  }
  const target = parseRequestUrl(index, url);
  const entry: Entry = { index, method: verb, type: target.type };
  if (target.id !== undefined) entry.id = target.id;
  if (target.query !== undefined) entry.query = target.query;
  if (target.operation !== undefined) {
    if (verb !== 'GET')
      throw entryError(
        index,
        `${target.operation === 'everything' ? '$everything' : '_history'} is read with GET in a Bundle`,
        405,
        'not-supported',
      );
    entry.operation = target.operation;
    if (target.versionId !== undefined) entry.versionId = target.versionId;
  }
  if (typeof fullUrl === 'string') entry.fullUrl = fullUrl;
  if (verb === 'POST' || verb === 'PUT') {
    try {
      entry.resource = withoutServerMeta(checkResource(resource, target.type));
    } catch (error) {
      if (error instanceof FhirError) throw entryError(index, error.message);
      throw error;
    }
  }
  if (verb === 'GET' && target.id !== undefined) {
    if (ifNoneMatch !== undefined) {
      if (typeof ifNoneMatch !== 'string')
        throw entryError(index, 'ifNoneMatch must be an ETag such as W/"1"');
      entry.ifNoneMatch = ifNoneMatch;
    }
    if (ifModifiedSince !== undefined) {
      if (typeof ifModifiedSince !== 'string' || Number.isNaN(Date.parse(ifModifiedSince)))
        throw entryError(index, 'ifModifiedSince must be an instant');
      entry.ifModifiedSince = ifModifiedSince;
    }
  }
  if (verb === 'POST') {
    if (target.id !== undefined || target.query !== undefined)
      throw entryError(index, 'POST request.url must be [type]');
    if (ifNoneExist !== undefined) {
      if (typeof ifNoneExist !== 'string' || ifNoneExist === '')
        throw entryError(index, 'ifNoneExist must be a query');
      entry.ifNoneExist = ifNoneExist;
    }
  }
  if (verb === 'PUT' || verb === 'DELETE' || verb === 'PATCH') {
    if (target.id === undefined && (verb === 'PATCH' || !target.query)) {
      throw entryError(
        index,
        `request.url of ${verb} must be [type]/[id]${verb === 'PATCH' ? '' : ' or [type]?[criteria]'}`,
      );
    }
    if (target.id !== undefined && target.query !== undefined) {
      throw entryError(index, `request.url of ${verb} must be [type]/[id] or [type]?[criteria], not both`);
    }
    const version = parseIfMatch(index, ifMatch);
    if (version !== undefined) entry.ifMatch = version;
  }
  if (verb === 'PUT' && target.id !== undefined) {
    if (entry.resource!.id !== target.id)
      throw entryError(index, 'resource.id must equal the id of request.url');
  }
  if (verb === 'PATCH') {
    try {
      entry.patch = patchDocumentOfEntry(resource, patching);
    } catch (error) {
      // A patch with too many operations keeps its 413.
      if (error instanceof FhirError) throw entryError(index, error.message, error.status, error.issueCode);
      throw error;
    }
  }
  return entry;
}

/** Replaces every `reference` that names a bundle entry's `fullUrl` with the entry's `Type/id`, in place. */
export function rewriteReferences(value: unknown, map: ReadonlyMap<string, string>): void {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const item of value) rewriteReferences(item, map);
    return;
  }
  const record = value as Record<string, unknown>;
  // for-in, not Object.keys: no key array allocated per object of every resource.
  for (const key in record) {
    const child = record[key];
    if (key === 'reference' && typeof child === 'string') {
      const target = map.get(child);
      if (target !== undefined) record[key] = target;
    } else if (typeof child === 'object') {
      rewriteReferences(child, map);
    }
  }
}

/**
 * The conditional references (`Patient?identifier=urn:mrn|123`) in `value`, each once: a
 * `reference` made of a resource type, `?` and search criteria.
 * @see https://hl7.org/fhir/R4/http.html#trules
 */
export function conditionalReferencesOf(value: unknown, out = new Set<string>()): Set<string> {
  if (value === null || typeof value !== 'object') return out;
  if (Array.isArray(value)) {
    for (const item of value) conditionalReferencesOf(item, out);
    return out;
  }
  const record = value as Record<string, unknown>;
  for (const key in record) {
    const child = record[key];
    if (key === 'reference' && typeof child === 'string') {
      const q = child.indexOf('?');
      if (q > 0 && isResourceType(child.slice(0, q))) out.add(child);
    } else if (typeof child === 'object') {
      conditionalReferencesOf(child, out);
    }
  }
  return out;
}

/** Every alias under which other entries may reference `entry`'s resource. */
export function aliasesOf(entry: Entry, target: string): [string, string][] {
  const out: [string, string][] = [];
  if (entry.fullUrl) {
    out.push([entry.fullUrl, target]);
    // An absolute fullUrl `…/Type/id` is also referenced as the relative `Type/id`.
    const m = /\/([A-Z][A-Za-z]+\/[A-Za-z0-9\-.]{1,64})$/.exec(entry.fullUrl);
    if (m?.[1] && !/^urn:/i.test(entry.fullUrl) && m[1] !== target) out.push([m[1], target]);
  }
  return out;
}

/** The checked `type` and raw `entry` list of a batch or transaction Bundle (400/413 otherwise). */
export function parseBundle(
  body: unknown,
  options: { maxEntries: number },
): { type: 'batch' | 'transaction'; raw: unknown[] } {
  const bundle = checkResource(body, 'Bundle');
  const type = bundle.type;
  if (type !== 'batch' && type !== 'transaction') {
    throw new FhirError(400, 'invalid', 'Bundle.type must be batch or transaction', {
      expression: ['Bundle.type'],
    });
  }
  const raw = bundle.entry ?? [];
  if (!Array.isArray(raw))
    throw new FhirError(400, 'invalid', 'Bundle.entry must be an array', { expression: ['Bundle.entry'] });
  if (raw.length > options.maxEntries) {
    throw new FhirError(413, 'too-costly', `A Bundle may hold at most ${options.maxEntries} entries`);
  }
  return { type, raw };
}
