import { randomUUID } from 'node:crypto';
import { errorOutcome } from '../../http/error-rendering.js';
import { FhirError } from '../../http/http-error.js';
import type { OperationOutcome } from '../../http/outcome.js';
import { conditionalDelete, conditionalMatches, conditionalUpdate } from '../interactions.js';
import { patchResource } from '../patch/patch-resource.js';
import type { FhirContext } from '../context.js';
import { readAccess } from '../audit/audit-activity.js';
import {
  aliasesOf,
  conditionalReferencesOf,
  parseEntry,
  rewriteReferences,
  type Entry,
} from './bundle-entries.js';
import { responseOf, writeResponseOf, type BundleJson } from './bundle-response.js';
import { fhirErrorOfSearch } from '../search/search-errors.js';
import {
  deleteModeOf,
  planWrite,
  resolveConditionalReferences,
  runGet,
  patchingOf,
  type BundleProcessingOptions,
} from './bundle-steps.js';

/**
 * Processes a `batch` Bundle: every entry stands alone, a failure becomes its entry's outcome.
 * @see https://hl7.org/fhir/R4/http.html#transaction
 */
export async function processBatch(
  ctx: FhirContext,
  raw: unknown[],
  options: BundleProcessingOptions,
): Promise<BundleJson> {
  const parsed: (Entry | { index: number; error: unknown })[] = raw.map((e, i) => {
    try {
      return parseEntry(i, e, patchingOf(options));
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
      const { status, outcome } = errorOutcome(fhirErrorOfSearch(error), options.onError);
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
  if (entry.method === 'PATCH') {
    const { resource } = await patchResource(ctx, entry.type, entry.id!, entry.patch!, {
      ...(entry.ifMatch !== undefined ? { ifMatch: entry.ifMatch } : {}),
      references,
    });
    options.activity?.wrote({ op: 'update', resource }, { op: 'update', resource });
    return responseOf('200 OK', resource, options);
  }
  if (entry.method === 'DELETE' && entry.query !== undefined) {
    const deleted = await conditionalDelete(ctx, entry.type, entry.query, deleteModeOf(entry, options));
    for (const reference of deleted) {
      const [resourceType, id] = reference.split('/') as [string, string];
      options.activity?.wrote({ op: 'delete', resourceType, id });
    }
    return { response: { status: '204 No Content' } };
  }
  // An entry with conditional references resolves them and writes in one storage transaction, so
  // that what they resolved to still exists when it is written.
  const found = entry.resource ? conditionalReferencesOf(entry.resource) : undefined;
  if (found && found.size > 0) {
    return ctx.atomically(async (tx) => {
      const resolved = new Map(references);
      await resolveConditionalReferences(tx, found, resolved);
      return writeEntry(tx, entry, resolved, options);
    });
  }
  return writeEntry(ctx, entry, references, options);
}

/** A POST or PUT entry (conditional or not) or a plain DELETE, references to other entries rewritten. */
async function writeEntry(
  ctx: FhirContext,
  entry: Entry,
  references: ReadonlyMap<string, string>,
  options: BundleProcessingOptions,
): Promise<Record<string, unknown>> {
  if (entry.resource) rewriteReferences(entry.resource, references);
  if (entry.method === 'PUT' && entry.query !== undefined) {
    const result = await conditionalUpdate(
      ctx,
      entry.type,
      entry.query,
      entry.resource,
      entry.ifMatch !== undefined ? { ifMatch: entry.ifMatch } : {},
    );
    const { resource } = result;
    options.activity?.wrote(
      { op: 'update', resource },
      { op: 'update', resource, created: result.status === 201 },
    );
    return responseOf(result.status === 201 ? '201 Created' : '200 OK', resource, options);
  }
  const { ifNoneExist } = entry;
  if (ifNoneExist !== undefined) {
    // The search and the create in one transaction (see `createResource`).
    return ctx.atomically(async (tx) => {
      const matches = await conditionalMatches(tx, entry.type, ifNoneExist);
      if (matches.length > 1)
        throw new FhirError(412, 'duplicate', 'ifNoneExist matches more than one resource');
      if (matches[0]) {
        options.activity?.accessed(readAccess('read', matches[0]));
        return responseOf('200 OK', matches[0], options);
      }
      return writeBatchEntry(tx, entry, options);
    });
  }
  return writeBatchEntry(ctx, entry, options);
}

/** Plans and applies the write of one batch entry; its response entry. */
async function writeBatchEntry(
  ctx: FhirContext,
  entry: Entry,
  options: BundleProcessingOptions,
): Promise<Record<string, unknown>> {
  const write = await planWrite(ctx, entry);
  const [result] = await ctx.storage.writeResources(ctx.projectId, [write]);
  options.activity?.wrote(write, result);
  if (!result || result.op === 'delete') return { response: { status: '204 No Content' } };
  const status = result.op === 'create' || result.created ? '201 Created' : '200 OK';
  return writeResponseOf(status, result, options);
}
