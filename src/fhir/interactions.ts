import { randomUUID } from 'node:crypto';
import { refuseAuditEventWrite } from './audit/audit-append-only.js';
import { canAccess, type ResourceAction } from '../auth/access/access.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError, PreconditionFailedError } from '../storage/errors.js';
import type { FhirResource, StoredResource } from '../storage/types.js';
import { checkId, checkResource, checkType, withoutServerMeta } from './resource-checks.js';
import { deadlineOf } from './search/costly-reads.js';
import { parseSearch, type SearchQueryOptions, type SearchReads } from './search/search-query.js';
import type { FhirContext } from './context.js';
import { DEFAULT_MAX_TERMINOLOGY_CODES } from './search/resolve-terminology.js';

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
export function authorize(
  ctx: Pick<FhirContext, 'principal'>,
  resourceType: string,
  action: ResourceAction,
): void {
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
 * The resources matching a conditional request (`ifNoneExist`, `If-None-Exist`, the query of a
 * conditional update or delete): a search with strict handling, at most `limit` results (two tell
 * none / one / several apart). With `requireCriteria`, criteria without any search parameter
 * (which would match every resource of the type) are a 412.
 */
export async function conditionalMatches(
  ctx: FhirContext,
  type: string,
  criteria: string,
  options: { limit?: number; requireCriteria?: boolean } = {},
): Promise<StoredResource[]> {
  const params = new URLSearchParams(criteria.startsWith('?') ? criteria.slice(1) : criteria);
  authorize(ctx, type, 'search');
  const { query, applied } = await parseSearch(type, params, searchLimitsOf(ctx), searchReads(ctx));
  if (options.requireCriteria && applied.length === 0) {
    throw new FhirError(412, 'invalid', 'Conditional criteria must name at least one search parameter');
  }
  const count = options.limit ?? 2;
  // Which resources match, not a page of them: no paging cursor, no order by values.
  const { after: _after, before: _before, order: _order, ...matching } = query;
  const page = await ctx.storage.searchResources(ctx.projectId, type, {
    ...matching,
    offset: 0,
    count,
    total: 'none',
    ...deadlineOf(ctx),
  });
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
 * `PUT [base]/[type]?[criteria]`: conditional update, its search and its write in one transaction
 * (of concurrent requests with the same criteria, one creates and the others update it).
 *
 * - No match: the resource is created, with the body's id when it has one that is not taken
 *   (201; a taken id is a 409), else with a new id.
 * - One match: it is updated (200); a body id must be the match's (400 otherwise).
 * - Several matches: 412.
 *
 * With `ifMatch`, the match must be at that version (412 otherwise, and when nothing matches).
 * @see https://hl7.org/fhir/R4/http.html#cond-update
 */
export async function conditionalUpdate(
  ctx: FhirContext,
  type: string,
  criteria: string,
  body: unknown,
  options: { ifMatch?: string } = {},
): Promise<WriteOutcome> {
  checkType(type);
  const resource = withoutServerMeta(checkResource(body, type));
  authorize(ctx, type, 'update');
  return ctx.atomically(async (tx) => {
    const target = await conditionalUpdateTarget(tx, type, criteria, resource.id, options.ifMatch);
    const write = { ...resource, id: target.id };
    await tx.validate(write);
    if (target.match === undefined) {
      // A new id, or the body's free one: create (an update of a free id creates it).
      const result = await tx.storage.updateResource(tx.projectId, write);
      return { status: 201, resource: result.resource };
    }
    const result = await tx.storage.updateResource(tx.projectId, write, {
      ifMatch: target.match.meta.versionId,
    });
    return { status: 200, resource: result.resource };
  });
}

/**
 * What a conditional update writes to (see {@link conditionalUpdate}): the id, and the match when
 * it updates one. Run it in the transaction of the write.
 */
export async function conditionalUpdateTarget(
  ctx: FhirContext,
  type: string,
  criteria: string,
  bodyId: string | undefined,
  ifMatch: string | undefined,
): Promise<{ id: string; match?: StoredResource }> {
  const matches = await conditionalMatches(ctx, type, criteria, { requireCriteria: true });
  if (matches.length > 1) {
    throw new FhirError(412, 'duplicate', 'The conditional update criteria match more than one resource');
  }
  const match = matches[0];
  if (match) {
    if (bodyId !== undefined && bodyId !== match.id) {
      throw new FhirError(
        400,
        'invalid',
        'The id in the body is not the id of the resource the criteria match',
        {
          expression: [`${type}.id`],
        },
      );
    }
    if (ifMatch !== undefined && match.meta.versionId !== ifMatch) {
      throw new PreconditionFailedError(`${type}/${match.id} is not at version ${ifMatch}`);
    }
    return { id: match.id, match };
  }
  if (ifMatch !== undefined)
    throw new PreconditionFailedError('No resource matches the conditional update criteria');
  if (bodyId === undefined) return { id: randomUUID() };
  try {
    await ctx.storage.readResource(ctx.projectId, type, bodyId);
  } catch (error) {
    // Free (never used, or deleted): the resource is created with the body's id.
    if (error instanceof NotFoundError) return { id: bodyId };
    throw error;
  }
  throw new FhirError(409, 'conflict', `${type}/${bodyId} exists and does not match the criteria`, {
    expression: [`${type}.id`],
  });
}

/** How a conditional delete treats several matches: 412 (`single`), or deletes them all (`multiple`). */
export type ConditionalDeleteMode = 'single' | 'multiple';

/**
 * `DELETE [base]/[type]?[criteria]`: deletes the resource the criteria match, its search and its
 * deletes in one transaction. No match deletes nothing (still a success, as a delete is). Several
 * matches are a 412 in `single` mode; in `multiple` mode all are deleted, at most `maxMatches`
 * (412 `too-costly` when more match). Answers the references deleted.
 * @see https://hl7.org/fhir/R4/http.html#cdelete
 */
export async function conditionalDelete(
  ctx: FhirContext,
  type: string,
  criteria: string,
  options: { mode: ConditionalDeleteMode; maxMatches: number },
): Promise<string[]> {
  checkType(type);
  authorize(ctx, type, 'delete');
  return ctx.atomically(async (tx) => {
    const matches = await conditionalDeleteTargets(tx, type, criteria, options);
    if (matches.length === 0) return [];
    await tx.storage.writeResources(
      tx.projectId,
      matches.map((m) => ({ op: 'delete', resourceType: type, id: m.id, ifMatch: m.meta.versionId })),
    );
    return matches.map((m) => `${type}/${m.id}`);
  });
}

/** The resources a conditional delete deletes (see {@link conditionalDelete}). */
export async function conditionalDeleteTargets(
  ctx: FhirContext,
  type: string,
  criteria: string,
  options: { mode: ConditionalDeleteMode; maxMatches: number },
): Promise<StoredResource[]> {
  const limit = options.mode === 'single' ? 2 : options.maxMatches + 1;
  const matches = await conditionalMatches(ctx, type, criteria, { limit, requireCriteria: true });
  if (options.mode === 'single' && matches.length > 1) {
    throw new FhirError(412, 'duplicate', 'The conditional delete criteria match more than one resource');
  }
  if (matches.length > options.maxMatches) {
    throw new FhirError(
      412,
      'too-costly',
      `The conditional delete criteria match more than ${options.maxMatches} resources`,
    );
  }
  return matches;
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

/**
 * How a chained or reverse-chained search may reach the resources of another type: each type
 * authorized for search when the search is planned (a chain must not reveal what the principal may
 * not search). The store answers the chain itself, through `ctx.storage` (a SMART user's view puts
 * the user's reach in the search).
 */
export function searchReads(ctx: FhirContext): SearchReads {
  const { terminology } = ctx;
  return {
    authorize(resourceType) {
      checkType(resourceType);
      authorize(ctx, resourceType, 'search');
    },
    ...(terminology
      ? {
          terminology: {
            ...terminology,
            maxCodes: ctx.searchLimits?.maxTerminologyCodes ?? DEFAULT_MAX_TERMINOLOGY_CODES,
          },
        }
      : {}),
  };
}

/** `{ limits }` of `ctx` when it has some: the search options a context's searches are parsed with. */
export function searchLimitsOf(ctx: FhirContext): Pick<SearchQueryOptions, 'limits'> {
  return ctx.searchLimits === undefined ? {} : { limits: ctx.searchLimits };
}
