import { randomUUID } from 'node:crypto';
import { errorOutcome, toHttpError, type ErrorLogger } from '../http/error-rendering.js';
import { ERROR_TABLE } from '../http/error-table.js';
import { FhirError, type FhirIssueCode } from '../http/http-error.js';
import { StorageError } from '../storage/errors.js';
import type {
  FhirResource,
  ResourceWrite,
  Storage,
  StorageOperations,
  StoredResource,
  StoredText,
  WriteResult,
} from '../storage/types.js';
import {
  authorize,
  checkDeleteTarget,
  conditionalMatches,
  readResource,
  searchResources,
  type FhirContext,
} from './interactions.js';
import { readAccess, RequestActivity, searchAccess } from './audit-activity.js';
import type { OperationOutcome } from './outcome.js';
import { checkId, checkResource, withoutServerMeta } from './resource-checks.js';
import { isResourceType } from './resource-types.js';
import type { ParseSearchOptions } from './search.js';
import { etagOf } from './versioning.js';

/** Options of {@link processBundle}. */
export interface BundleProcessingOptions {
  /** Absolute URL of the FHIR base (`https://host/fhir/R4`), for `fullUrl`s of the response. */
  baseUrl: string;
  /** Largest number of entries accepted (413 above). */
  maxEntries: number;
  /** `Prefer: return=minimal`: leave the resources out of the response entries. */
  returnMinimal?: boolean;
  /** Search options for GET entries. */
  search?: ParseSearchOptions;
  /** Receives the errors of batch entries that fail with a 5xx status. @default writes to stderr */
  onError?: ErrorLogger;
  /**
   * Collects what the Bundle did, for the audit trail: each write applied, each read or search of
   * patient data (a transaction's only once it has committed). @default undefined (nothing collected)
   */
  activity?: RequestActivity;
}

/** A `Bundle` as JSON. */
export interface BundleJson {
  resourceType: 'Bundle';
  id?: string;
  type: string;
  entry?: Record<string, unknown>[];
  [key: string]: unknown;
}

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

interface Entry {
  index: number;
  method: Method;
  type: string;
  id?: string;
  /** Query string of a search (GET) or conditional request, without `?`. */
  query?: string;
  fullUrl?: string;
  resource?: FhirResource;
  ifNoneExist?: string;
  ifMatch?: string;
  /** Id given to a created resource before writing (so references to it can be rewritten). */
  newId?: string;
}

function entryError(
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
function parseRequestUrl(index: number, url: string): { type: string; id?: string; query?: string } {
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

function parseEntry(index: number, raw: unknown): Entry {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw entryError(index, 'Entry must be an object');
  const { request, resource, fullUrl } = raw as { request?: unknown; resource?: unknown; fullUrl?: unknown };
  if (request === null || typeof request !== 'object') throw entryError(index, 'Entry needs a request');
  const { method, url, ifNoneExist, ifMatch } = request as Record<string, unknown>;
  if (typeof url !== 'string' || url === '') throw entryError(index, 'request.url is required');
  if (fullUrl !== undefined && typeof fullUrl !== 'string')
    throw entryError(index, 'fullUrl must be a string');
  const verb = typeof method === 'string' ? method.toUpperCase() : '';
  if (verb === 'PATCH' || verb === 'HEAD') {
    throw entryError(index, `request.method ${verb} is not supported`, 405, 'not-supported');
  }
  if (verb !== 'GET' && verb !== 'POST' && verb !== 'PUT' && verb !== 'DELETE') {
    throw entryError(index, 'request.method must be GET, POST, PUT or DELETE');
  }
  const target = parseRequestUrl(index, url);
  const entry: Entry = { index, method: verb, type: target.type };
  if (target.id !== undefined) entry.id = target.id;
  if (target.query !== undefined) entry.query = target.query;
  if (typeof fullUrl === 'string') entry.fullUrl = fullUrl;
  if (verb === 'POST' || verb === 'PUT') {
    try {
      entry.resource = withoutServerMeta(checkResource(resource, target.type));
    } catch (error) {
      if (error instanceof FhirError) throw entryError(index, error.message);
      throw error;
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
  if (verb === 'PUT' || verb === 'DELETE') {
    if (target.id === undefined) {
      throw entryError(
        index,
        `Conditional ${verb} is not supported: request.url must be [type]/[id]`,
        400,
        'not-supported',
      );
    }
    const version = parseIfMatch(index, ifMatch);
    if (version !== undefined) entry.ifMatch = version;
  }
  if (verb === 'PUT') {
    if (entry.resource!.id !== target.id)
      throw entryError(index, 'resource.id must equal the id of request.url');
  }
  return entry;
}

/** Replaces every `reference` that names a bundle entry's `fullUrl` with the entry's `Type/id`, in place. */
function rewriteReferences(value: unknown, map: ReadonlyMap<string, string>): void {
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

/** Every alias under which other entries may reference `entry`'s resource. */
function aliasesOf(entry: Entry, target: string): [string, string][] {
  const out: [string, string][] = [];
  if (entry.fullUrl) {
    out.push([entry.fullUrl, target]);
    // An absolute fullUrl `…/Type/id` is also referenced as the relative `Type/id`.
    const m = /\/([A-Z][A-Za-z]+\/[A-Za-z0-9\-.]{1,64})$/.exec(entry.fullUrl);
    if (m?.[1] && !/^urn:/i.test(entry.fullUrl) && m[1] !== target) out.push([m[1], target]);
  }
  return out;
}

function responseOf(
  status: string,
  resource: StoredResource | undefined,
  options: BundleProcessingOptions,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  if (!resource) return { response: { status, ...extra } };
  return {
    fullUrl: `${options.baseUrl}/${resource.resourceType}/${resource.id}`,
    ...(options.returnMinimal ? {} : { resource }),
    response: {
      status,
      location: `${resource.resourceType}/${resource.id}/_history/${resource.meta.versionId}`,
      etag: etagOf(resource.meta.versionId),
      lastModified: resource.meta.lastUpdated,
      ...extra,
    },
  };
}

/** What a written entry's `fullUrl` and `response` are made of; checked before they are written unescaped. */
const PLAIN_FIELDS = /^[A-Za-z0-9\-.:+]+$/;

/**
 * The response entry of a write whose stored JSON text the store answered: {@link bundleBytes}
 * splices that text in, and writes `fullUrl` and `response` from their parts, without making the
 * objects. `toJSON` gives the same entry as FHIR JSON (the resource parsed from the text) for any
 * other reader.
 */
class WrittenEntry {
  constructor(
    readonly status: string,
    readonly baseUrl: string,
    readonly stored: StoredText,
    private readonly result: WriteResult,
    readonly withResource: boolean,
  ) {}

  /** True when the type, id, version and instant need no JSON escaping (always, from the stores). */
  get plain(): boolean {
    const { resourceType, id, versionId, lastUpdated } = this.stored;
    return (
      isResourceType(resourceType) &&
      PLAIN_FIELDS.test(id) &&
      PLAIN_FIELDS.test(versionId) &&
      PLAIN_FIELDS.test(lastUpdated)
    );
  }

  toJSON(): Record<string, unknown> {
    const { resourceType, id, versionId, lastUpdated } = this.stored;
    return {
      fullUrl: `${this.baseUrl}/${resourceType}/${id}`,
      ...(this.withResource ? { resource: this.result.resource } : {}),
      response: {
        status: this.status,
        location: `${resourceType}/${id}/_history/${versionId}`,
        etag: etagOf(versionId),
        lastModified: lastUpdated,
      },
    };
  }
}

/** The response entry of a write (see {@link WrittenEntry}). */
function writeResponseOf(
  status: string,
  result: WriteResult,
  options: BundleProcessingOptions,
): Record<string, unknown> {
  const { stored } = result;
  if (!stored) return responseOf(status, result.resource, options);
  const entry = new WrittenEntry(status, options.baseUrl, stored, result, !options.returnMinimal);
  return entry as unknown as Record<string, unknown>;
}

/**
 * The response Bundle as UTF-8 JSON: entries written from stored text get that text spliced in
 * (`"resource":<stored JSON>`) instead of a parse and a `JSON.stringify` of the resource. The
 * pieces are encoded straight into one buffer (no joined copy of the whole text first).
 */
export function bundleBytes(bundle: BundleJson): Buffer {
  const { entry, ...head } = bundle;
  const headText = JSON.stringify(head);
  const parts: string[] = [`${headText.slice(0, -1)}${headText.length > 2 ? ',' : ''}"entry":[`];
  let separator = '';
  let base = { url: '', json: '' };
  for (const e of entry ?? []) {
    if (e instanceof WrittenEntry && e.plain) {
      // `"<base>/` escaped once for all the entries of one base.
      if (base.url !== e.baseUrl || base.json === '')
        base = { url: e.baseUrl, json: JSON.stringify(`${e.baseUrl}/`).slice(0, -1) };
      const { resourceType, id, versionId, lastUpdated } = e.stored;
      const path = `${resourceType}/${id}`;
      parts.push(`${separator}{"fullUrl":${base.json}${path}"${e.withResource ? ',"resource":' : ''}`);
      if (e.withResource) parts.push(e.stored.json);
      parts.push(
        `,"response":{"status":"${e.status}","location":"${path}/_history/${versionId}",` +
          `"etag":"W/\\"${versionId}\\"","lastModified":"${lastUpdated}"}}`,
      );
    } else {
      parts.push(`${separator}${JSON.stringify(e)}`);
    }
    separator = ',';
  }
  parts.push(']}');
  let length = 0;
  for (const part of parts) length += Buffer.byteLength(part);
  const bytes = Buffer.allocUnsafe(length);
  let at = 0;
  for (const part of parts) at += bytes.write(part, at);
  return bytes;
}

async function runGet(
  ctx: FhirContext,
  entry: Entry,
  options: BundleProcessingOptions,
  activity: RequestActivity | undefined,
): Promise<Record<string, unknown>> {
  if (entry.id !== undefined) {
    const resource = await readResource(ctx, entry.type, entry.id);
    activity?.accessed(readAccess('read', resource));
    return responseOf('200 OK', resource, options);
  }
  const result = await searchResources(
    ctx,
    entry.type,
    new URLSearchParams(entry.query ?? ''),
    options.search,
  );
  activity?.accessed(searchAccess(entry.type, entry.query ?? '', result.page.resources));
  const searchset: BundleJson = {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'searchset',
    total: result.page.total,
    entry: result.page.resources.map((r) => ({
      fullUrl: `${options.baseUrl}/${r.resourceType}/${r.id}`,
      resource: r,
      search: { mode: 'match' },
    })),
  };
  return { resource: searchset, response: { status: '200 OK' } };
}

/** Checks, authorizes and validates the write of one POST/PUT/DELETE entry (references already rewritten). */
async function planWrite(ctx: FhirContext, entry: Entry): Promise<ResourceWrite> {
  if (entry.method === 'DELETE') {
    authorize(ctx, entry.type, 'delete');
    // Same rules as a plain DELETE: an unknown id (or another project's) is a 404.
    await checkDeleteTarget(ctx, entry.type, entry.id!, entry.ifMatch);
    return {
      op: 'delete',
      resourceType: entry.type,
      id: entry.id!,
      ...(entry.ifMatch !== undefined ? { ifMatch: entry.ifMatch } : {}),
    };
  }
  const resource = entry.resource!;
  if (entry.method === 'POST') {
    authorize(ctx, entry.type, 'create');
    resource.id = entry.newId!;
    await ctx.validate(resource);
    return { op: 'create', resource };
  }
  authorize(ctx, entry.type, 'update');
  await ctx.validate(resource);
  return {
    op: 'update',
    resource: resource as FhirResource & { id: string },
    ...(entry.ifMatch !== undefined ? { ifMatch: entry.ifMatch } : {}),
  };
}

function parseBundle(
  body: unknown,
  options: BundleProcessingOptions,
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

/**
 * Processes a `batch` or `transaction` Bundle (`POST [base]`) and returns the response Bundle.
 *
 * - `urn:uuid:` (and any other) `fullUrl`s of created resources resolve to server-assigned ids, and
 *   every `reference` naming them is rewritten, before anything is written.
 * - `request.ifNoneExist` makes a create conditional (an existing single match is answered instead).
 * - A transaction is all-or-nothing: any failing entry fails the whole Bundle with that entry's error,
 *   and nothing is written (`storage.writeResources`, or `storage.transaction` when conditional creates
 *   or reads must see the same state as the writes).
 * - In a batch each entry succeeds or fails on its own; failures become entries with an outcome.
 * @see https://hl7.org/fhir/R4/http.html#transaction
 */
export async function processBundle(
  ctx: FhirContext,
  storage: Storage,
  body: unknown,
  options: BundleProcessingOptions,
): Promise<BundleJson> {
  const { type, raw } = parseBundle(body, options);
  return type === 'transaction'
    ? processTransaction(ctx, storage, raw, options)
    : processBatch(ctx, raw, options);
}

async function processTransaction(
  ctx: FhirContext,
  storage: Storage,
  raw: unknown[],
  options: BundleProcessingOptions,
): Promise<BundleJson> {
  const entries = raw.map((e, i) => parseEntry(i, e));
  const targets = new Set<string>();
  const references = new Map<string, string>();
  for (const entry of entries) {
    if (entry.method === 'POST') entry.newId = randomUUID();
    const id = entry.method === 'POST' ? entry.newId : entry.id;
    if (entry.method === 'GET' || id === undefined) continue;
    const key = `${entry.type}/${id}`;
    if (targets.has(key)) throw entryError(entry.index, `${key} appears more than once in the transaction`);
    targets.add(key);
    if (entry.method !== 'DELETE')
      for (const [alias, target] of aliasesOf(entry, key)) references.set(alias, target);
  }

  // Each run collects its own activity: an adapter may run `run` again (a retried transaction).
  let activity: RequestActivity | undefined;
  const run = async (tx: StorageOperations): Promise<Record<string, unknown>[]> => {
    const txCtx: FhirContext = { ...ctx, storage: tx };
    const local = options.activity ? new RequestActivity() : undefined;
    activity = local;
    const responses: Record<string, unknown>[] = new Array<Record<string, unknown>>(entries.length);
    // Conditional creates first: a match replaces the create, and references to it point at the match.
    for (const entry of entries) {
      if (entry.ifNoneExist === undefined) continue;
      const matches = await conditionalMatches(txCtx, entry.type, entry.ifNoneExist).catch(
        (error: unknown) => {
          throw relabel(error, entry.index);
        },
      );
      if (matches.length > 1) {
        throw entryError(entry.index, 'ifNoneExist matches more than one resource', 412, 'duplicate');
      }
      const match = matches[0];
      if (match) {
        for (const [alias] of aliasesOf(entry, ''))
          references.set(alias, `${match.resourceType}/${match.id}`);
        local?.accessed(readAccess('read', match));
        responses[entry.index] = responseOf('200 OK', match, options);
      }
    }
    const writes: ResourceWrite[] = [];
    const writeEntries: Entry[] = [];
    for (const entry of entries) {
      if (entry.method === 'GET' || responses[entry.index]) continue;
      if (entry.resource) rewriteReferences(entry.resource, references);
      writes.push(await at(entry.index, planWrite(txCtx, entry)));
      writeEntries.push(entry);
    }
    const results = writes.length > 0 ? await tx.writeResources(ctx.projectId, writes) : [];
    results.forEach((result, i) => {
      const entry = writeEntries[i]!;
      local?.wrote(writes[i]!, result);
      if (result.op === 'delete') responses[entry.index] = { response: { status: '204 No Content' } };
      else {
        const status = result.op === 'create' || result.created ? '201 Created' : '200 OK';
        responses[entry.index] = writeResponseOf(status, result, options);
      }
    });
    for (const entry of entries) {
      if (entry.method !== 'GET') continue;
      responses[entry.index] = await at(entry.index, runGet(txCtx, entry, options, local));
    }
    return responses;
  };

  // Reads (conditional creates, GETs, the existence check of DELETEs) must see the state the writes
  // apply to.
  const needsTransaction = entries.some(
    (e) => e.ifNoneExist !== undefined || e.method === 'GET' || e.method === 'DELETE',
  );
  const responses = needsTransaction ? await storage.transaction(run) : await run(ctx.storage);
  if (activity) options.activity?.absorb(activity);
  return { resourceType: 'Bundle', id: randomUUID(), type: 'transaction-response', entry: responses };
}

/** Awaits `work`, labelling a failure with the entry it belongs to. */
async function at<T>(index: number, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    throw relabel(error, index);
  }
}

/**
 * Adds the failing entry's position to an error's expression (so the client knows which one failed),
 * storage errors (an unknown id: 404) included.
 */
function relabel(raw: unknown, index: number): unknown {
  if (raw instanceof FhirError ? raw.expression !== undefined : !(raw instanceof StorageError)) return raw;
  const error = toHttpError(raw);
  if (!(raw instanceof FhirError) && error.status >= 500) return raw;
  const issueCode = error instanceof FhirError ? error.issueCode : ERROR_TABLE[error.code].issue;
  return new FhirError(error.status, issueCode, error.message, {
    expression: [`Bundle.entry[${index}]`],
    headers: error.headers,
    cause: raw,
  });
}

async function processBatch(
  ctx: FhirContext,
  raw: unknown[],
  options: BundleProcessingOptions,
): Promise<BundleJson> {
  const parsed: (Entry | { index: number; error: unknown })[] = raw.map((e, i) => {
    try {
      return parseEntry(i, e);
    } catch (error) {
      return { index: i, error };
    }
  });
  const references = new Map<string, string>();
  for (const entry of parsed) {
    if ('error' in entry || entry.method !== 'POST') continue;
    entry.newId = randomUUID();
    for (const [alias, target] of aliasesOf(entry, `${entry.type}/${entry.newId}`))
      references.set(alias, target);
  }
  const responses: Record<string, unknown>[] = [];
  for (const entry of parsed) {
    try {
      if ('error' in entry) throw entry.error;
      responses.push(await runBatchEntry(ctx, entry, references, options));
    } catch (error) {
      const { status, outcome } = errorOutcome(error, options.onError);
      responses.push({
        response: { status: String(status), outcome } satisfies { status: string; outcome: OperationOutcome },
      });
    }
  }
  return { resourceType: 'Bundle', id: randomUUID(), type: 'batch-response', entry: responses };
}

async function runBatchEntry(
  ctx: FhirContext,
  entry: Entry,
  references: ReadonlyMap<string, string>,
  options: BundleProcessingOptions,
): Promise<Record<string, unknown>> {
  if (entry.method === 'GET') return runGet(ctx, entry, options, options.activity);
  if (entry.ifNoneExist !== undefined) {
    const matches = await conditionalMatches(ctx, entry.type, entry.ifNoneExist);
    if (matches.length > 1)
      throw new FhirError(412, 'duplicate', 'ifNoneExist matches more than one resource');
    if (matches[0]) {
      options.activity?.accessed(readAccess('read', matches[0]));
      return responseOf('200 OK', matches[0], options);
    }
  }
  if (entry.resource) rewriteReferences(entry.resource, references);
  const write = await planWrite(ctx, entry);
  const [result] = await ctx.storage.writeResources(ctx.projectId, [write]);
  options.activity?.wrote(write, result);
  if (!result || result.op === 'delete') return { response: { status: '204 No Content' } };
  const status = result.op === 'create' || result.created ? '201 Created' : '200 OK';
  return writeResponseOf(status, result, options);
}
