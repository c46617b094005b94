import { randomUUID } from 'node:crypto';
import { toHttpError } from '../../http/error-rendering.js';
import { ERROR_TABLE } from '../../http/error-table.js';
import { FhirError } from '../../http/http-error.js';
import { StorageError } from '../../storage/errors.js';
import type { ResourceWrite, Storage, StorageOperations, StoredResource } from '../../storage/types.js';
import {
  authorize,
  conditionalDeleteTargets,
  conditionalMatches,
  conditionalUpdateTarget,
} from '../interactions.js';
import { patchedResource } from '../patch/patch-resource.js';
import { transactionContext, type FhirContext } from '../context.js';
import { readAccess, RequestActivity } from '../audit/audit-activity.js';
import { FhirOutcomeError } from '../../http/outcome.js';
import {
  aliasesOf,
  conditionalReferencesOf,
  entryError,
  parseBundle,
  parseEntry,
  rewriteReferences,
  type Entry,
} from './bundle-entries.js';
import { responseOf, writeResponseOf, type BundleJson } from './bundle-response.js';
import { isResourceType } from '../../common/resource-types.js';
import { processBatch } from './batch-bundle.js';
import {
  deleteModeOf,
  planWrite,
  resolveConditionalReferences,
  runGet,
  patchingOf,
  type BundleProcessingOptions,
} from './bundle-steps.js';

export type { BundleProcessingOptions } from './bundle-steps.js';

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

const isConditionalWrite = (entry: Entry): boolean =>
  entry.query !== undefined && (entry.method === 'PUT' || entry.method === 'DELETE');

async function processTransaction(
  ctx: FhirContext,
  storage: Storage,
  raw: unknown[],
  options: BundleProcessingOptions,
): Promise<BundleJson> {
  const entries = raw.map((e, i) => parseEntry(i, e, patchingOf(options)));
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

  const conditionalReferences = new Map<number, Set<string>>();
  for (const entry of entries) {
    const found = entry.resource ? conditionalReferencesOf(entry.resource) : undefined;
    if (found && found.size > 0) conditionalReferences.set(entry.index, found);
  }

  // Each run collects its own activity: an adapter may run `run` again (a retried transaction).
  let activity: RequestActivity | undefined;
  const run = async (tx: StorageOperations): Promise<Record<string, unknown>[]> => {
    const txCtx = transactionContext(ctx, tx);
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
    // Then the criteria of conditional updates and deletes: what each writes to, no resource twice.
    const taken = new Set(targets);
    const take = (entry: Entry, id: string): void => {
      const key = `${entry.type}/${id}`;
      if (taken.has(key)) throw entryError(entry.index, `${key} appears more than once in the transaction`);
      taken.add(key);
    };
    const updates = new Map<number, { id: string; ifMatch?: string }>();
    const deletes = new Map<number, StoredResource[]>();
    const resolve = async (entry: Entry): Promise<void> => {
      if (entry.method === 'PUT') {
        authorize(txCtx, entry.type, 'update');
        const target = await conditionalUpdateTarget(
          txCtx,
          entry.type,
          entry.query!,
          entry.resource!.id,
          entry.ifMatch,
        );
        take(entry, target.id);
        for (const [alias, to] of aliasesOf(entry, `${entry.type}/${target.id}`)) references.set(alias, to);
        const ifMatch = target.match?.meta.versionId;
        updates.set(entry.index, { id: target.id, ...(ifMatch !== undefined ? { ifMatch } : {}) });
        return;
      }
      authorize(txCtx, entry.type, 'delete');
      const matches = await conditionalDeleteTargets(
        txCtx,
        entry.type,
        entry.query!,
        deleteModeOf(entry, options),
      );
      for (const match of matches) take(entry, match.id);
      deletes.set(entry.index, matches);
      if (matches.length === 0) responses[entry.index] = { response: { status: '204 No Content' } };
    };
    for (const entry of entries) if (isConditionalWrite(entry)) await at(entry.index, resolve(entry));
    // Conditional references, each to the one resource its criteria match, before any write.
    for (const [index, found] of conditionalReferences) {
      if (!responses[index]) await at(index, resolveConditionalReferences(txCtx, found, references));
    }
    const writes: ResourceWrite[] = [];
    const writeEntries: Entry[] = [];
    for (const entry of entries) {
      if (entry.method === 'GET' || responses[entry.index]) continue;
      const planned = await at(entry.index, planEntry(txCtx, entry, references, updates, deletes));
      for (const write of planned) {
        writes.push(write);
        writeEntries.push(entry);
      }
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

  // Reads (conditional creates, updates, deletes and references, GETs, the existence check of
  // DELETEs, the current version a PATCH applies to) must see the state the writes apply to.
  const needsTransaction =
    conditionalReferences.size > 0 ||
    entries.some(
      (e) =>
        e.ifNoneExist !== undefined || (e.method !== 'POST' && e.method !== 'PUT') || isConditionalWrite(e),
    );
  const responses = needsTransaction ? await storage.transaction(run) : await run(ctx.storage);
  if (activity) options.activity?.absorb(activity);
  return { resourceType: 'Bundle', id: randomUUID(), type: 'transaction-response', entry: responses };
}

/**
 * The writes of one transaction entry (references to other entries rewritten): a PATCH read and
 * patched, a conditional update or delete as its criteria resolved (`updates`, `deletes`), any other
 * as {@link planWrite} plans it.
 */
async function planEntry(
  ctx: FhirContext,
  entry: Entry,
  references: ReadonlyMap<string, string>,
  updates: ReadonlyMap<number, { id: string; ifMatch?: string }>,
  deletes: ReadonlyMap<number, StoredResource[]>,
): Promise<ResourceWrite[]> {
  if (entry.method === 'PATCH') {
    authorize(ctx, entry.type, 'update');
    const current = await ctx.storage.readResource(ctx.projectId, entry.type, entry.id!);
    const resource = await patchedResource(ctx, current, entry.patch!, {
      ...(entry.ifMatch !== undefined ? { ifMatch: entry.ifMatch } : {}),
      references,
    });
    return [{ op: 'update', resource, ifMatch: current.meta.versionId }];
  }
  const matches = deletes.get(entry.index);
  if (matches) {
    return matches.map((m) => ({
      op: 'delete',
      resourceType: entry.type,
      id: m.id,
      ifMatch: m.meta.versionId,
    }));
  }
  if (entry.resource) rewriteReferences(entry.resource, references);
  const update = updates.get(entry.index);
  if (update) {
    const resource = { ...entry.resource!, id: update.id };
    await ctx.validate(resource);
    return [{ op: 'update', resource, ...(update.ifMatch !== undefined ? { ifMatch: update.ifMatch } : {}) }];
  }
  return [await planWrite(ctx, entry)];
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
  if (raw instanceof FhirOutcomeError) return withinEntry(raw, index);
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

/**
 * A validation error of a transaction entry, its issues' expressions made relative to the Bundle
 * (`Patient.name[0].family` of entry 3 becomes `Bundle.entry[3].resource.name[0].family`): the
 * answer to a transaction is one OperationOutcome for the whole Bundle. An expression that does not
 * start with a resource type (a custom validator's `name[0]`) is taken as relative to the resource.
 */
function withinEntry(error: FhirOutcomeError, index: number): FhirOutcomeError {
  const entry = `Bundle.entry[${index}].resource`;
  const rebase = (expression: string): string => {
    const type = /^[A-Za-z]+/.exec(expression)?.[0];
    if (type === undefined || !isResourceType(type)) return `${entry}.${expression}`;
    return `${entry}${expression.slice(type.length)}`;
  };
  const issues = error.issues.map((issue) =>
    issue.expression ? { ...issue, expression: issue.expression.map(rebase) } : issue,
  );
  return new FhirOutcomeError(error.status, issues, { headers: error.headers });
}
