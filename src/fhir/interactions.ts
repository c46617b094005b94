import { refuseAuditEventWrite } from './audit-append-only.js';
import { canAccess, type ResourceAction } from '../auth/access.js';
import type { Principal } from '../http/principal.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type { FhirResource, ResourcePage, StorageOperations, StoredResource } from '../storage/types.js';
import { checkId, checkResource, checkType, withoutServerMeta } from './resource-checks.js';
import type { SearchResolver } from '../search/match.js';
import { parseSearch, type ParsedSearch, type SearchQueryOptions } from './search-query.js';

/**
 * What every FHIR interaction runs with. Interactions are framework-free: the router (and the
 * batch/transaction processor) build a context per request.
 */
export interface FhirContext {
  /** The store, or a transaction view of it. */
  storage: StorageOperations;
  /** The principal's project: every read and write stays inside it. */
  projectId: string;
  principal: Principal;
  /** Resolves when `resource` may be stored in this project; throws a 400 `FhirError` otherwise. */
  validate(resource: FhirResource): Promise<void>;
  /**
   * Runs `fn` with a context whose reads and writes apply as one (a storage transaction), or with
   * this one when it is that already: a conditional interaction's search and its write, so that
   * concurrent requests cannot both find no match and both create.
   */
  atomically<T>(fn: (ctx: FhirContext) => Promise<T>): Promise<T>;
}

/** The context of `ctx` inside the transaction `tx`: nested `atomically` calls run in it as well. */
export function transactionContext(ctx: FhirContext, tx: StorageOperations): FhirContext {
  const inner: FhirContext = { ...ctx, storage: tx, atomically: (fn) => fn(inner) };
  return inner;
}

/** Result of a write interaction. */
export interface WriteOutcome {
  /** 200 (updated, or an existing match of a conditional create) or 201 (created). */
  status: 200 | 201;
  resource: StoredResource;
}

/**
 * 403 unless the principal may perform `action` on `resourceType` (the one access decision); 405
 * for a write of an append-only type (`AuditEvent`), whoever asks.
 */
export function authorize(ctx: FhirContext, resourceType: string, action: ResourceAction): void {
  refuseAuditEventWrite(resourceType, action);
  if (!canAccess(ctx.principal, resourceType, action)) {
    throw new FhirError(403, 'forbidden', `Not allowed to ${action} ${resourceType} resources`);
  }
}

/** `GET [base]/[type]/[id]` @see https://hl7.org/fhir/R4/http.html#read */
export async function readResource(ctx: FhirContext, type: string, id: string): Promise<StoredResource> {
  checkType(type);
  checkId(id);
  authorize(ctx, type, 'read');
  return ctx.storage.readResource(ctx.projectId, type, id);
}

/**
 * `GET [base]/[type]/[id]/_history/[vid]`: only the current version is served (the store keeps no
 * readable history); an older version id is a 404.
 * @see https://hl7.org/fhir/R4/http.html#vread
 */
export async function readResourceVersion(
  ctx: FhirContext,
  type: string,
  id: string,
  versionId: string,
): Promise<StoredResource> {
  const resource = await readResource(ctx, type, id);
  if (resource.meta.versionId !== versionId) {
    throw new FhirError(404, 'not-found', `Version ${versionId} of ${type}/${id} is not available`);
  }
  return resource;
}

/**
 * The resources matching a conditional request (`ifNoneExist`, `If-None-Exist`): a search with
 * strict handling, at most two results needed to tell none / one / several apart.
 */
export async function conditionalMatches(
  ctx: FhirContext,
  type: string,
  criteria: string,
): Promise<StoredResource[]> {
  const params = new URLSearchParams(criteria.startsWith('?') ? criteria.slice(1) : criteria);
  authorize(ctx, type, 'search');
  const { query } = await parseSearch(type, params, {}, storeResolver(ctx));
  const page = await ctx.storage.searchResources(ctx.projectId, type, { ...query, offset: 0, count: 2 });
  return page.resources;
}

/**
 * `POST [base]/[type]`: the server assigns the id (a client id in the body is ignored). With
 * `ifNoneExist`, an existing single match is returned with 200 instead; several matches are a 412.
 * @see https://hl7.org/fhir/R4/http.html#create
 */
export async function createResource(
  ctx: FhirContext,
  type: string,
  body: unknown,
  options: { ifNoneExist?: string } = {},
): Promise<WriteOutcome> {
  checkType(type);
  const resource = withoutServerMeta(checkResource(body, type));
  delete resource.id;
  authorize(ctx, type, 'create');
  const { ifNoneExist } = options;
  if (ifNoneExist === undefined) {
    await ctx.validate(resource);
    return { status: 201, resource: await ctx.storage.createResource(ctx.projectId, resource) };
  }
  // The search and the create in one transaction: of concurrent creates with the same criteria,
  // one creates and the others find its resource.
  return ctx.atomically(async (tx) => {
    const matches = await conditionalMatches(tx, type, ifNoneExist);
    if (matches.length > 1) {
      throw new FhirError(412, 'duplicate', 'The conditional create criteria match more than one resource');
    }
    if (matches[0]) return { status: 200, resource: matches[0] };
    await tx.validate(resource);
    return { status: 201, resource: await tx.storage.createResource(tx.projectId, resource) };
  });
}

/**
 * `PUT [base]/[type]/[id]`: replaces the resource, or creates it with that id. The body's id must
 * equal the URL's. With `ifMatch`, the current version must be that one (412 otherwise).
 * @see https://hl7.org/fhir/R4/http.html#update
 */
export async function updateResource(
  ctx: FhirContext,
  type: string,
  id: string,
  body: unknown,
  options: { ifMatch?: string } = {},
): Promise<WriteOutcome> {
  checkType(type);
  checkId(id);
  const resource = withoutServerMeta(checkResource(body, type));
  if (resource.id === undefined) {
    throw new FhirError(400, 'required', 'The resource must carry its id', { expression: [`${type}.id`] });
  }
  if (resource.id !== id) {
    throw new FhirError(400, 'invalid', 'The id in the body does not match the URL', {
      expression: [`${type}.id`],
    });
  }
  authorize(ctx, type, 'update');
  await ctx.validate(resource);
  const result = await ctx.storage.updateResource(
    ctx.projectId,
    resource as FhirResource & { id: string },
    options.ifMatch !== undefined ? { ifMatch: options.ifMatch } : undefined,
  );
  return { status: result.created ? 201 : 200, resource: result.resource };
}

/**
 * The existence rule of every DELETE (plain, batch and transaction entries alike), checked before
 * the write: an id that never existed in the caller's project (an id of another project included)
 * is a 404; an already deleted resource may be deleted again (204, nothing changes), except with
 * `ifMatch`, which no version matches any more: 410. Throws the storage `NotFoundError`.
 * @see https://hl7.org/fhir/R4/http.html#delete
 */
export async function checkDeleteTarget(
  ctx: FhirContext,
  type: string,
  id: string,
  ifMatch: string | undefined,
): Promise<void> {
  try {
    await ctx.storage.readResource(ctx.projectId, type, id);
  } catch (error) {
    if (error instanceof NotFoundError && error.deleted && ifMatch === undefined) return;
    throw error;
  }
}

/**
 * `DELETE [base]/[type]/[id]`. Deleting a resource that is already deleted succeeds (idempotent);
 * an id that never existed is a 404 (see {@link checkDeleteTarget}).
 * @see https://hl7.org/fhir/R4/http.html#delete
 */
export async function deleteResource(
  ctx: FhirContext,
  type: string,
  id: string,
  options: { ifMatch?: string } = {},
): Promise<void> {
  checkType(type);
  checkId(id);
  authorize(ctx, type, 'delete');
  await checkDeleteTarget(ctx, type, id, options.ifMatch);
  await ctx.storage.deleteResource(
    ctx.projectId,
    type,
    id,
    options.ifMatch !== undefined ? { ifMatch: options.ifMatch } : undefined,
  );
}

/** Result of a search: the page, plus how it was parsed (for links and the ignored-parameter outcome). */
export interface SearchOutcome extends ParsedSearch {
  page: ResourcePage;
}

/**
 * How a chained or reverse-chained search reads the resources of another type: every current one of
 * the principal's project, each type authorized for search first (a chain must not reveal what the
 * principal may not search).
 */
function storeResolver(ctx: FhirContext): SearchResolver {
  return {
    async *resources(resourceType) {
      checkType(resourceType);
      authorize(ctx, resourceType, 'search');
      const page = await ctx.storage.searchResources(ctx.projectId, resourceType, {});
      yield* page.resources;
    },
  };
}

/**
 * `GET [base]/[type]?…`: one page of matches (see `parseSearch` for what is supported), only
 * ever of the principal's project.
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
  const parsed = await parseSearch(type, params, options, storeResolver(ctx));
  const page = await ctx.storage.searchResources(ctx.projectId, type, parsed.query);
  return { ...parsed, page };
}
