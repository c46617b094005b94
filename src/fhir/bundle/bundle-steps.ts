/**
 * The steps batch and transaction Bundles share (`batch.ts`, `batch-bundle.ts`): GET entries, the
 * planned write of an entry, the conditional-delete mode, and conditional references.
 */
import { admitted } from '../search/costly-reads.js';
import type { ErrorLogger } from '../../http/error-rendering.js';
import { FhirError } from '../../http/http-error.js';
import type { FhirResource, ResourceWrite, Storage } from '../../storage/types.js';
import {
  authorize,
  checkDeleteTarget,
  conditionalMatches,
  readResource,
  type ConditionalDeleteMode,
} from '../interactions.js';
import { searchResources } from '../search/search-resources.js';
import type { FhirContext } from '../context.js';
import { readAccess, RequestActivity, searchAccess } from '../audit/audit-activity.js';
import { entryError, type Entry } from './bundle-entries.js';
import { responseOf } from './bundle-response.js';
import { buildSearchBundle } from '../search/search-bundle.js';
import { allPatientsEverything, patientEverything } from '../everything/everything.js';
import { everythingBundle, everythingQuery } from '../everything/everything-bundle.js';
import { parseEverythingParams } from '../everything/everything-params.js';
import { buildHistoryBundle, parseHistoryRequest, readHistoryPage, readVersion } from '../history/history.js';
import { etagOf, notModified } from '../versioning.js';
import type { SearchQueryOptions } from '../search/search-query.js';
import type { EntryPatchOptions } from '../patch/patch-document.js';
import type { PatchLimits } from '../patch/patch-limits.js';

/** Options of `processBundle` (batch.ts). */
export interface BundleProcessingOptions {
  /** Absolute URL of the FHIR base (`https://host/fhir/R4`), for `fullUrl`s of the response. */
  baseUrl: string;
  /** Largest number of entries accepted (413 above). */
  maxEntries: number;
  /** `Prefer: return=minimal`: leave the resources out of the response entries. */
  returnMinimal?: boolean;
  /**
   * `Prefer: return=OperationOutcome`: an `informational` OperationOutcome in each write entry's
   * `response.outcome` instead of its resource.
   */
  returnOutcome?: boolean;
  /** Search options for GET entries. */
  search?: SearchQueryOptions;
  /**
   * What a conditional DELETE entry does with several matches (`fhirRouter`'s option), or `off`
   * (the entry answers 405). At most `maxEntries` are deleted. @default 'single'
   */
  conditionalDelete?: ConditionalDeleteMode | 'off';
  /** Deepest nesting of the JSON Patch of a PATCH entry's `Binary`. @default 100 */
  maxJsonDepth?: number;
  /**
   * The bounds of each PATCH entry's patch: its operations, and the size it may grow the resource
   * to (`fhirRouter`'s `maxPatchOperations` and `maxPatchedResourceSize`).
   * @default DEFAULT_PATCH_LIMITS (1,000 operations, 32 MiB)
   */
  patchLimits?: PatchLimits;
  /** Receives the errors of batch entries that fail with a 5xx status. @default writes to stderr */
  onError?: ErrorLogger;
  /**
   * Collects what the Bundle did, for the audit trail: each write applied, each read or search of
   * patient data (a transaction's only once it has committed). @default undefined (nothing collected)
   */
  activity?: RequestActivity;
}

/** How the PATCH entries of a Bundle processed with `options` are read and bounded. */
export function patchingOf(options: BundleProcessingOptions): EntryPatchOptions {
  return {
    ...(options.maxJsonDepth !== undefined ? { maxDepth: options.maxJsonDepth } : {}),
    ...(options.patchLimits ? { limits: options.patchLimits } : {}),
  };
}

/** Answers a GET entry (a read, a conditional read, a search), as a batch or a transaction runs it. */
export async function runGet(
  ctx: FhirContext,
  entry: Entry,
  options: BundleProcessingOptions,
  activity: RequestActivity | undefined,
): Promise<Record<string, unknown>> {
  // Searches, `$everything` and history listings take a turn of the project, as alone they do.
  if (entry.operation === 'everything')
    return admitted(ctx, (turn) => runEverything(turn, entry, options, activity));
  if (entry.operation === 'history')
    return admitted(ctx, (turn) => runHistory(turn, entry, options, activity));
  if (entry.operation === 'vread') return runHistory(ctx, entry, options, activity);
  // A search takes its turn once parsed and checked (`searchResources`).
  if (entry.id === undefined) return runSearch(ctx, entry, options, activity);
  const resource = await readResource(ctx, entry.type, entry.id);
  activity?.accessed(readAccess('read', resource));
  if (notModified(resource, entry.ifNoneMatch, entry.ifModifiedSince)) {
    return {
      response: {
        status: '304 Not Modified',
        etag: etagOf(resource.meta.versionId),
        lastModified: resource.meta.lastUpdated,
      },
    };
  }
  // `Prefer: return=` is about writes: a read answers its resource either way.
  return responseOf('200 OK', resource, { baseUrl: options.baseUrl });
}

/** A search GET entry: the searchset a plain search answers. */
async function runSearch(
  ctx: FhirContext,
  entry: Entry,
  options: BundleProcessingOptions,
  activity: RequestActivity | undefined,
): Promise<Record<string, unknown>> {
  const result = await searchResources(
    ctx,
    entry.type,
    new URLSearchParams(entry.query ?? ''),
    options.search,
  );
  activity?.accessed(
    searchAccess(entry.type, entry.query ?? '', [...result.page.resources, ...result.included]),
  );
  // The same searchset a plain search answers: includes, subsetting, outcome and links.
  return { resource: buildSearchBundle(options.baseUrl, entry.type, result), response: { status: '200 OK' } };
}

/** A `Patient/$everything` or `Patient/[id]/$everything` GET entry: its first page (or the one its `_cursor` names). */
async function runEverything(
  ctx: FhirContext,
  entry: Entry,
  options: BundleProcessingOptions,
  activity: RequestActivity | undefined,
): Promise<Record<string, unknown>> {
  const params = parseEverythingParams(new URLSearchParams(entry.query ?? ''), options.search);
  const page =
    entry.id === undefined
      ? await allPatientsEverything(ctx, params)
      : await patientEverything(ctx, entry.id, params);
  const resources = page.entries.map((e) => e.resource);
  activity?.accessed(searchAccess('Patient', everythingQuery(params), resources));
  const url = `${options.baseUrl}/Patient/${entry.id === undefined ? '' : `${entry.id}/`}$everything`;
  return {
    resource: everythingBundle(url, params, page, options.baseUrl),
    response: { status: '200 OK' },
  };
}

/** A history GET entry (`[type]/_history`, `[type]/[id]/_history`) or a vread (`…/_history/[vid]`). */
async function runHistory(
  ctx: FhirContext,
  entry: Entry,
  options: BundleProcessingOptions,
  activity: RequestActivity | undefined,
): Promise<Record<string, unknown>> {
  // Versions are read through the store itself, not inside a transaction's view.
  const storage = ctx.storage as Partial<Storage>;
  if (typeof storage.readHistory !== 'function' || typeof storage.readResourceVersion !== 'function')
    throw entryError(entry.index, 'History and version reads are answered in a batch, not in a transaction');
  const store = storage as Storage;
  if (entry.operation === 'vread') {
    const resource = await readVersion(ctx, store, entry.type, entry.id!, entry.versionId!);
    activity?.accessed(readAccess('vread', resource));
    return responseOf('200 OK', resource, { baseUrl: options.baseUrl });
  }
  const target = { type: entry.type, ...(entry.id === undefined ? {} : { id: entry.id }) };
  const request = parseHistoryRequest(target, new URLSearchParams(entry.query ?? ''), {
    defaultCount: options.search?.defaultCount ?? HISTORY_DEFAULT_COUNT,
    maxCount: options.search?.maxCount ?? HISTORY_MAX_COUNT,
    lenient: options.search?.lenient ?? false,
  });
  const page = await readHistoryPage(ctx, store, request);
  const resources = page.entries.flatMap((e) => (e.resource ? [e.resource] : []));
  activity?.accessed(searchAccess(entry.type, `_history?${entry.query ?? ''}`, resources));
  return { resource: buildHistoryBundle(options.baseUrl, request, page), response: { status: '200 OK' } };
}

/** Page sizes of a history entry when the Bundle's options give none (`fhirRouter`'s defaults). */
const HISTORY_DEFAULT_COUNT = 20;
const HISTORY_MAX_COUNT = 1000;

/** Checks, authorizes and validates the write of one POST/PUT/DELETE entry (references already rewritten). */
export async function planWrite(ctx: FhirContext, entry: Entry): Promise<ResourceWrite> {
  if (entry.method === 'PATCH') throw new FhirError(500, 'exception', 'A PATCH entry is not planned here');
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

/** A conditional DELETE entry's options, or a 405 for the entry when conditional delete is off. */
export function deleteModeOf(
  entry: Entry,
  options: BundleProcessingOptions,
): { mode: ConditionalDeleteMode; maxMatches: number } {
  const mode = options.conditionalDelete ?? 'single';
  if (mode === 'off') {
    throw entryError(entry.index, 'Conditional delete is not supported', 405, 'not-supported');
  }
  return { mode, maxMatches: options.maxEntries };
}

/**
 * Adds to `references` the target of each of `found`, conditional references
 * (`Patient?identifier=…` → `Patient/<id>` of its one match): 404 (`not-found`) when its criteria
 * match no resource, 412 (`duplicate`) when they match several, 412 (`invalid`) when they name no
 * search parameter. A reference that is the `fullUrl` of an entry of the Bundle (already in
 * `references`) names that entry's resource and is not searched.
 * @see https://hl7.org/fhir/R4/http.html#trules
 */
export async function resolveConditionalReferences(
  ctx: FhirContext,
  found: Iterable<string>,
  references: Map<string, string>,
): Promise<void> {
  for (const reference of found) {
    if (references.has(reference)) continue;
    const q = reference.indexOf('?');
    const type = reference.slice(0, q);
    const matches = await conditionalMatches(ctx, type, reference.slice(q + 1), { requireCriteria: true });
    if (matches.length === 0) {
      throw new FhirError(404, 'not-found', `The conditional reference ${reference} matches no resource`);
    }
    if (matches.length > 1) {
      throw new FhirError(
        412,
        'duplicate',
        `The conditional reference ${reference} matches more than one resource`,
      );
    }
    references.set(reference, `${type}/${matches[0]!.id}`);
  }
}
