import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { transactionContext, type FhirContext } from '../../src/fhir/context.js';
import { collectIncludes } from '../../src/fhir/search/search-includes.js';
import { loadSearchRegistry } from '../../src/search/definitions.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';

let storage: Storage;
beforeEach(async () => {
  storage = memoryStorage();
  await storage.createProject({ id: 'p', name: 'P', strictMode: false });
});
afterEach(async () => {
  await storage.close();
});

function context(scopes = ['system/*.*']): FhirContext {
  const ctx: FhirContext = {
    storage,
    projectId: 'p',
    principal: { projectId: 'p', kind: 'client', id: 'c', scopes, admin: false, superAdmin: false },
    validate: () => Promise.resolve(),
    atomically: (fn) => storage.transaction((tx) => fn(transactionContext(ctx, tx))),
  };
  return ctx;
}

describe('collectIncludes', () => {
  it('stops at the limit of included resources, with a too-costly warning', async () => {
    const registry = await loadSearchRegistry();
    for (let i = 0; i < 5; i++) {
      await storage.updateResource('p', { resourceType: 'Patient', id: `p${i}` });
      await storage.updateResource('p', {
        resourceType: 'Observation',
        id: `o${i}`,
        status: 'final',
        code: { text: 'x' },
        subject: { reference: `Patient/p${i}` },
      });
    }
    const { request } = parseSearchRequest(registry, 'Observation', [['_include', 'Observation:subject']]);
    const matches = (await storage.searchResources('p', 'Observation', { sort: '_id' })).resources;
    const all = await collectIncludes(context(), registry, request, matches, { maxIncluded: 5, maxDepth: 3 });
    expect(all.resources.map((r) => r.id).sort()).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(all.issues).toEqual([]);
    const cut = await collectIncludes(context(), registry, request, matches, { maxIncluded: 3, maxDepth: 3 });
    expect(cut.resources).toHaveLength(3);
    expect(cut.issues.map((i) => i.code)).toEqual(['too-costly']);

    const rev = parseSearchRequest(registry, 'Patient', [['_revinclude', 'Observation:subject']]).request;
    const patients = (await storage.searchResources('p', 'Patient', { sort: '_id', count: 2 })).resources;
    const reverse = await collectIncludes(context(), registry, rev, patients, {
      maxIncluded: 10,
      maxDepth: 3,
    });
    expect(reverse.resources.map((r) => r.id)).toEqual(['o0', 'o1']);
    const refused = await collectIncludes(
      context(['system/Patient.rs', 'system/Observation.r']),
      registry,
      rev,
      patients,
      {
        maxIncluded: 10,
        maxDepth: 3,
      },
    );
    expect(refused.resources).toEqual([]);
    expect(refused.issues.map((i) => i.code)).toEqual(['suppressed']);
  });
});
