import {
  compartmentSearch,
  idFilter,
  lastUpdatedFilters,
  typeSearch,
  type SearchFilter,
} from '../../storage/search-request.js';
import { canAccess } from '../../auth/access/access.js';
import { FhirError } from '../../http/http-error.js';
import { typedTail } from '../../search/parse-value.js';
import type { ResourceQuery, StoredResource } from '../../storage/types.js';
import { patientCompartmentTypes } from '../compartment.js';
import type { EverythingCursor, EverythingParams } from './everything-params.js';
import { searchReads } from '../interactions.js';
import type { FhirContext } from '../context.js';
import { deadlineOf } from '../search/costly-reads.js';
import { checkId } from '../resource-checks.js';
import { loadSearchRegistry } from '../../search/definitions.js';
import { parseSearch } from '../search/search-query.js';

/**
 * `Patient/[id]/$everything` and `Patient/$everything`: a patient's record as one paged walk.
 *
 * The walk has a fixed order, so that a `next` link (a keyset position, {@link EverythingCursor})
 * neither repeats nor skips a resource when others write meanwhile, as search paging does:
 *
 * 1. the compartment types ({@link COMPARTMENT_ORDER}: `Patient` first, then the others by name),
 *    each read from the store's compartment index in the store's default order (`lastUpdated`,
 *    then id), resumed with `ResourceQuery.after`;
 * 2. then the referenced types ({@link REFERENCED_TYPES}), each in id order: the resources of those
 *    types that the compartment resources of the walk's types reference directly (each once).
 *
 * At the type level the walk visits every Patient of the project in id order, each with its own
 * walk; a resource in the compartments of two patients comes once under each.
 * @see https://hl7.org/fhir/R4/patient-operation-everything.html
 */

/** Types of resources the compartment references that the walk adds (none is a compartment type). */
export const REFERENCED_TYPES: readonly string[] = Object.freeze([
  'Practitioner',
  'PractitionerRole',
  'Organization',
  'Location',
  'Medication',
  'Device',
]);

/** The compartment types in walk order: the Patient first, then the others by name. */
const COMPARTMENT_ORDER: readonly string[] = Object.freeze([
  'Patient',
  ...patientCompartmentTypes()
    .filter((t) => t !== 'Patient')
    .sort(),
]);

const WALK_ORDER: readonly string[] = Object.freeze([...COMPARTMENT_ORDER, ...REFERENCED_TYPES]);
const isCompartmentType = (type: string): boolean => COMPARTMENT_ORDER.includes(type);

/** One page of a walk. */
export interface EverythingPage {
  /** The compartment resources of the page (`search.mode = match`) and referenced ones (`include`), in walk order. */
  entries: { resource: StoredResource; mode: 'match' | 'include' }[];
  /** Where the next page starts; undefined on the last page. */
  next?: EverythingCursor;
}

/**
 * The types the walk reads for this caller: those of `_type` (else every type of the walk) that the
 * principal may search. 403 when that leaves none.
 */
function walkTypes(ctx: FhirContext, params: EverythingParams): string[] {
  const asked = params.types;
  const types = WALK_ORDER.filter(
    (t) => (asked === undefined || asked.includes(t)) && canAccess(ctx.principal, t, 'search'),
  );
  if (types.length === 0 && (asked === undefined || asked.some((t) => WALK_ORDER.includes(t)))) {
    throw new FhirError(403, 'forbidden', 'Not allowed to search any resource type $everything returns');
  }
  return types;
}

/**
 * The ids, per referenced type, that the patient's compartment resources of `sources` reference
 * (those within `start` / `end` when given, whatever `_since` says).
 */
async function referencedIds(
  ctx: FhirContext,
  patientId: string,
  sources: readonly string[],
  params: EverythingParams,
): Promise<Map<string, string[]>> {
  const found = new Map<string, Set<string>>();
  const visit = (value: unknown): void => {
    if (value === null || typeof value !== 'object') return;
    if (Array.isArray(value)) {
      for (const item of value) visit(item);
      return;
    }
    const record = value as Record<string, unknown>;
    for (const key in record) {
      const child = record[key];
      if (key === 'reference' && typeof child === 'string') {
        const tail = typedTail(child);
        // Only this server's references: relative ones (an absolute URL may name another server).
        if (tail && REFERENCED_TYPES.includes(tail.resourceType) && child.startsWith(tail.resourceType)) {
          let ids = found.get(tail.resourceType);
          if (!ids) found.set(tail.resourceType, (ids = new Set()));
          ids.add(tail.id);
        }
      } else if (typeof child === 'object') visit(child);
    }
  };
  for (const type of sources) {
    const page = await ctx.storage.searchResources(ctx.projectId, type, {
      search: compartmentSearch(type, [patientId], await careDateFilters(ctx, type, params)),
      ...deadlineOf(ctx),
    });
    for (const resource of page.resources) visit(resource);
  }
  return new Map([...found].map(([type, ids]) => [type, [...ids]]));
}

/**
 * The filters of `start` / `end` for resources of `type`: its R4 `date` search parameter searched
 * with `ge<start>` and `le<end>` (a resource without a date fails them), for the store to answer.
 * None when neither is given, for the Patient, and for types without a `date` parameter (all of
 * whose resources are kept).
 */
async function careDateFilters(
  ctx: FhirContext,
  type: string,
  params: EverythingParams,
): Promise<SearchFilter[]> {
  if ((params.start === undefined && params.end === undefined) || type === 'Patient') return [];
  const registry = await loadSearchRegistry();
  if (registry.get(type, 'date')?.type !== 'date') return [];
  const values: [string, string][] = [];
  if (params.start !== undefined) values.push(['date', `ge${params.start}`]);
  if (params.end !== undefined) values.push(['date', `le${params.end}`]);
  return (await parseSearch(type, values, {}, searchReads(ctx))).request.filters;
}

/**
 * `types` less the compartment types of which the store says the patient's compartment has no
 * resource (`Storage.compartmentTypes`: one round trip, where asking each type is one per type: a
 * sixty-odd on a database for a patient with few kinds of records); all of them when it cannot say.
 */
async function patientTypes(
  ctx: FhirContext,
  patientId: string,
  types: readonly string[],
): Promise<readonly string[]> {
  if (!ctx.storage.compartmentTypes || !types.some(isCompartmentType)) return types;
  const present = new Set(await ctx.storage.compartmentTypes(ctx.projectId, patientId));
  return types.filter((type) => !isCompartmentType(type) || present.has(type));
}

/**
 * Up to `limit` resources of one patient's walk from `start` (the cursor's type and position, or
 * the beginning), with the position of the last one.
 */
async function walkPatient(
  ctx: FhirContext,
  patientId: string,
  allowed: readonly string[],
  params: EverythingParams,
  start: EverythingCursor | undefined,
  limit: number,
): Promise<EverythingPage['entries']> {
  const out: EverythingPage['entries'] = [];
  const types = await patientTypes(ctx, patientId, allowed);
  const startAt = start ? WALK_ORDER.indexOf(start.type) : 0;
  let references: Map<string, string[]> | undefined;
  for (const type of types) {
    if (out.length >= limit) break;
    const at = WALK_ORDER.indexOf(type);
    if (at < startAt) continue;
    const resume = start && at === startAt ? start : undefined;
    const query: ResourceQuery = { count: limit - out.length, total: 'none', ...deadlineOf(ctx) };
    const since = params.since === undefined ? [] : lastUpdatedFilters({ ge: params.since });
    if (isCompartmentType(type)) {
      query.search = compartmentSearch(
        type,
        [patientId],
        [...since, ...(await careDateFilters(ctx, type, params))],
      );
      if (resume?.lastUpdated !== undefined) query.after = { id: resume.id, lastUpdated: resume.lastUpdated };
    } else {
      references ??= await referencedIds(ctx, patientId, types.filter(isCompartmentType), params);
      const ids = references.get(type);
      if (!ids || ids.length === 0) continue;
      query.search = typeSearch(type, [idFilter(ids), ...since]);
      query.sort = '_id';
      if (resume) query.after = { id: resume.id };
    }
    const page = await ctx.storage.searchResources(ctx.projectId, type, query);
    const mode = isCompartmentType(type) ? 'match' : 'include';
    for (const resource of page.resources) out.push({ resource, mode });
  }
  return out;
}

/** 400 unless `cursor` is a position of the walk (its type in the walk, `lastUpdated` where the order has it). */
function checkCursor(cursor: EverythingCursor | undefined, typeLevel: boolean): void {
  if (cursor === undefined) return;
  const wrongLevel = typeLevel ? cursor.patient === undefined : cursor.patient !== undefined;
  const shaped =
    WALK_ORDER.includes(cursor.type) && (cursor.lastUpdated !== undefined) === isCompartmentType(cursor.type);
  if (wrongLevel || !shaped) {
    throw new FhirError(400, 'invalid', '_cursor is not a paging cursor of this $everything', {
      expression: ['_cursor'],
    });
  }
}

function positionOf(resource: StoredResource, patient: string | undefined): EverythingCursor {
  return {
    ...(patient === undefined ? {} : { patient }),
    type: resource.resourceType,
    id: resource.id,
    ...(isCompartmentType(resource.resourceType) ? { lastUpdated: resource.meta.lastUpdated } : {}),
  };
}

/**
 * One page of `Patient/[patientId]/$everything`: 404 when the patient does not exist in the
 * caller's project (410 when deleted), whatever types the caller may read; only the types the
 * caller may search are walked (see {@link walkTypes}).
 */
export async function patientEverything(
  ctx: FhirContext,
  patientId: string,
  params: EverythingParams,
): Promise<EverythingPage> {
  checkId(patientId);
  const types = walkTypes(ctx, params);
  // Throws the store's NotFoundError (404, or 410 when deleted).
  await ctx.storage.readResource(ctx.projectId, 'Patient', patientId);
  checkCursor(params.cursor, false);
  const entries = await walkPatient(ctx, patientId, types, params, params.cursor, params.count + 1);
  return pageOf(entries, params.count, () => undefined);
}

/**
 * One page of `Patient/$everything`: the walk of every Patient of the caller's project, in id order
 * (the principal must be allowed to search `Patient`: 403 otherwise).
 */
export async function allPatientsEverything(
  ctx: FhirContext,
  params: EverythingParams,
): Promise<EverythingPage> {
  if (!canAccess(ctx.principal, 'Patient', 'search')) {
    throw new FhirError(403, 'forbidden', 'Patient/$everything needs the right to search Patient');
  }
  const types = walkTypes(ctx, params);
  const { cursor } = params;
  checkCursor(cursor, true);
  const limit = params.count + 1;
  const entries: (EverythingPage['entries'][number] & { patient: string })[] = [];
  let patient = cursor?.patient;
  let start = cursor;
  // The next patients in id order, read a batch at a time once one patient's walk did not fill the page.
  let upcoming: string[] = [];
  // The cursor's patient may have been deleted since: its walk then yields nothing, and the next one starts.
  while (entries.length < limit) {
    if (patient === undefined || start === undefined) {
      if (upcoming.length === 0) {
        const count = patient === undefined ? 1 : limit - entries.length;
        upcoming = await nextPatients(ctx, patient, count);
      }
      const found = upcoming.shift();
      if (found === undefined) break;
      patient = found;
    }
    const walked = await walkPatient(ctx, patient, types, params, start, limit - entries.length);
    for (const entry of walked) entries.push({ ...entry, patient });
    start = undefined;
  }
  return pageOf(entries, params.count, (i) => entries[i]?.patient);
}

/** The ids of up to `count` Patients after `after` in id order (from the first without it). */
async function nextPatients(ctx: FhirContext, after: string | undefined, count: number): Promise<string[]> {
  const next = await ctx.storage.searchResources(ctx.projectId, 'Patient', {
    sort: '_id',
    count,
    total: 'none',
    ...(after === undefined ? {} : { after: { id: after } }),
    ...deadlineOf(ctx),
  });
  return next.resources.map((r) => r.id);
}

function pageOf(
  entries: EverythingPage['entries'],
  count: number,
  patientAt: (index: number) => string | undefined,
): EverythingPage {
  if (entries.length <= count) return { entries: entries.map(({ resource, mode }) => ({ resource, mode })) };
  const page = entries.slice(0, count).map(({ resource, mode }) => ({ resource, mode }));
  const last = page.at(-1)!;
  return { entries: page, next: positionOf(last.resource, patientAt(count - 1)) };
}
