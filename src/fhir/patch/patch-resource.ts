import { FhirError } from '../../http/http-error.js';
import { PreconditionFailedError } from '../../storage/errors.js';
import type { FhirResource, StoredResource } from '../../storage/types.js';
import { rewriteReferences } from '../bundle/bundle-entries.js';
import { checkId, checkResource, checkType, withoutServerMeta } from '../resource-checks.js';
import { authorize, conditionalMatches, type WriteOutcome } from '../interactions.js';
import type { FhirContext } from '../context.js';
import { applyPatchDocument, type PatchDocument } from './patch-document.js';

/**
 * `PATCH [base]/[type]/[id]`: applies a JSON Patch or FHIRPath Patch to the current version and
 * stores the result, reading and writing in one transaction (the write also asks for the version
 * read, so nothing written meanwhile is lost). With `ifMatch`, the current version must be that one
 * (412 otherwise). The patch may not change `resourceType` or `id` (422); the result goes through
 * the checks and validation of an update (400 in a strict project when invalid: nothing is written).
 * Needs the `update` right.
 * @see https://hl7.org/fhir/R4/http.html#patch
 */
export async function patchResource(
  ctx: FhirContext,
  type: string,
  id: string,
  patch: PatchDocument,
  options: { ifMatch?: string; references?: ReadonlyMap<string, string> } = {},
): Promise<WriteOutcome> {
  checkType(type);
  checkId(id);
  authorize(ctx, type, 'update');
  return ctx.atomically(async (tx) =>
    writePatched(tx, await tx.storage.readResource(tx.projectId, type, id), patch, options),
  );
}

/**
 * `PATCH [base]/[type]?[criteria]`: conditional patch. The one resource the criteria match is
 * patched as {@link patchResource} patches it, the search, the read and the write in one
 * transaction; no match is a 404, several a 412, criteria naming no parameter a 412. Needs the
 * `update` right, and `search` for the criteria (every type they read included).
 * @see https://hl7.org/fhir/R4/http.html#patch
 */
export async function conditionalPatch(
  ctx: FhirContext,
  type: string,
  criteria: string,
  patch: PatchDocument,
  options: { ifMatch?: string } = {},
): Promise<WriteOutcome> {
  checkType(type);
  authorize(ctx, type, 'update');
  return ctx.atomically(async (tx) => {
    const matches = await conditionalMatches(tx, type, criteria, { requireCriteria: true });
    if (matches.length > 1) {
      throw new FhirError(412, 'duplicate', 'The conditional patch criteria match more than one resource');
    }
    const [current] = matches;
    if (!current) throw new FhirError(404, 'not-found', 'No resource matches the conditional patch criteria');
    return writePatched(tx, current, patch, options);
  });
}

/** Patches `current` and writes the result, asking for `current`'s version (nothing written meanwhile is lost). */
async function writePatched(
  tx: FhirContext,
  current: StoredResource,
  patch: PatchDocument,
  options: { ifMatch?: string },
): Promise<WriteOutcome> {
  const resource = await patchedResource(tx, current, patch, options);
  const result = await tx.storage.updateResource(tx.projectId, resource, { ifMatch: current.meta.versionId });
  return { status: 200, resource: result.resource };
}

/**
 * `current` with `patch` applied, checked and validated as an update's body is (see
 * {@link patchResource}); what to write with `ifMatch: current.meta.versionId`. In a Bundle,
 * `references` rewrites the references to other entries' `fullUrl`s the patch wrote.
 */
export async function patchedResource(
  ctx: FhirContext,
  current: StoredResource,
  patch: PatchDocument,
  options: { ifMatch?: string; references?: ReadonlyMap<string, string> } = {},
): Promise<FhirResource & { id: string }> {
  const { resourceType: type, id } = current;
  const { ifMatch } = options;
  if (ifMatch !== undefined && current.meta.versionId !== ifMatch) {
    throw new PreconditionFailedError(`${type}/${id} is not at version ${ifMatch}`);
  }
  const patched = await applyPatchDocument(current, patch);
  const record = patched as { resourceType?: unknown; id?: unknown } | null;
  if (record === null || typeof record !== 'object' || Array.isArray(record)) {
    throw new FhirError(422, 'invalid', 'The patch does not leave a resource');
  }
  if (record.resourceType !== type || record.id !== id) {
    throw new FhirError(422, 'invalid', 'A patch may not change the resourceType or the id', {
      expression: [record.resourceType !== type ? `${type}.resourceType` : `${type}.id`],
    });
  }
  const resource = withoutServerMeta(checkResource(patched, type)) as FhirResource & { id: string };
  if (options.references) rewriteReferences(resource, options.references);
  await ctx.validate(resource);
  return resource;
}
